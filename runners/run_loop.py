"""The run loop a launched and an attached run share, in the shape of torch elastic's PContext: `start`, `wait` (turns
of `_poll` until the run is over, then its conclusion), `close`; the judge (runners/judge/judge.py) decides."""
from __future__ import annotations

import abc
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from . import events as ev
from .edge import error_files, nccl_dumps, node_probe, procs, rank_usage, remote_stacks, stack_round
from .edge.clock import now
from .edge.feed import Feed
from .edge.locality import pids_here
from .edge.rank_deaths import RankDeaths
from .edge.record import RunRecord, new_run_dir
from .edge.slurm_follow import SlurmFollow
from .edge.slurm_job import SlurmJobWatch
from .edge.stacks import Target
from .edge.tail import Tailer
from .evidence import fr_records, stack_types
from .evidence.hints import HintMatcher
from .evidence.slurm_state import CANCEL_NEEDLE
from .judge.judge import EXIT_FAILED, CollectStacks, EndAttempt, Judge, Launcher, ProbeNodes, TearDown
from .judge.run_state import Now
from .judge.runner_traits import PLAIN, RunnerTraits

# Seconds between loop turns unless there is a backlog to read. Every wake-up takes a core from a rank for
# a moment, and ranks in lock-step all wait for it: on 2 cores, 20 wake-ups a second cost a 2-rank run ~4 %
# of its wall time, 4 a second nothing measurable. After a quiet turn the first new output or a process's
# exit wakes the loop at once; the dashboard redraws at the same period.
IDLE_POLL = 0.25


@dataclass(frozen=True)
class RunResult:
    """How a run ended: the status and exit code its summary.json and ddptui's own exit say."""
    status: str
    exit_code: int


@dataclass(frozen=True)
class Over:
    """`_poll`'s word that the run's turns are over; `end`: the teardown the judge or a stop asked for (None: the run
    ended, or the watch stopped, by itself)."""
    end: TearDown | None


class RunLoop(abc.ABC):
    """One run, watched. `run()` blocks (call it from a thread for a UI); `emit(list[Event])` once per turn.

    The I/O of a run; every decision is the judge's (`self.judge`): the loop feeds it what it reads, sees exit and
    samples, each with the moment it was taken, and carries out what it asks (collect stacks, probe nodes, tear down).
    A subclass starts the run (`_start`), makes one turn (`_poll`), concludes it (`_end`) and closes it (`_close`)."""

    def __init__(self, profile, runs_root: Path | str = "runs", emit: Callable[[list], None] | None = None,
                 pyspy: str | None = None, stack_method: str = "auto", runner: RunnerTraits = PLAIN,
                 record_dir: Path | str | None = None) -> None:
        """runner: what the profile's runner declares of its ranks (the plain default: ranks are processes of their
        own, as an attached job's are). record_dir: the record's folder, fixed by whoever started this engine (the
        batch job ddptui submitted), instead of a new one under runs_root."""
        self.profile = profile
        self.emit_fn = emit or (lambda batch: None)
        self.run_dir = Path(record_dir) if record_dir is not None else new_run_dir(Path(runs_root), profile.name)
        self.record = RunRecord(self.run_dir)
        self.feed = Feed()  # viewers in other processes that get each turn's batch (runners/edge/feed.py)
        self.pyspy, self.stack_method = pyspy, stack_method
        self._started_mono = time.monotonic()
        self.judge = Judge(profile, self._started_mono, time.time(), runner=runner)
        self.procs: list[procs.Spawned] = []  # the processes this run started (none when attached)
        self.batch: list = []
        self._stop = threading.Event()
        self._stop_why = ""
        self._dump = threading.Event()
        self._kill_now = threading.Event()  # asked again while stopping: SIGKILL without the TERM deadline
        self.survivors: list[str] = []  # processes that outlived SIGKILL at teardown, described
        self.status: str | None = None
        self.stack_collections: list[str] = []
        self._deaths = RankDeaths()  # ranks a launcher spawned (or a job ddptui found): when each really died
        self.slurm: SlurmFollow | None = None  # when the ranks run under a Slurm job or step
        self._tailer: Tailer | None = None
        self._read_any = True  # whether the turn's read got anything (a quiet turn sleeps until woken)

    # what the front ends and tests read: the judge's
    @property
    def tracks(self):
        return self.judge.tracks

    @property
    def world(self) -> int:
        return self.judge.world

    @property
    def hang(self) -> ev.HangVerdict | None:
        return self.judge.hang

    @property
    def crash(self) -> ev.CrashVerdict | None:
        return self.judge.crash

    @property
    def stall_info(self) -> dict | None:
        return self.judge.stall_info

    @property
    def slow_info(self) -> dict | None:
        return self.judge.slow_info

    @property
    def hints(self) -> list[dict]:
        return self.judge.hints

    # ---- thread-safe requests from a front end ------------------------------------------------------
    def request_stop(self, why: str = "") -> None:
        """why: what asked, for the record's line (a signal)."""
        self._stop_why = self._stop_why or why  # the first that said why
        self._stop.set()

    def request_dump(self) -> None:
        self._dump.set()

    def request_kill(self) -> None:
        """Stop, and SIGKILL every process at once instead of waiting out the TERM deadline."""
        self._stop.set()
        self._kill_now.set()

    # ---- feeding lines without a run (a bench, a replay of pre-written rank files) ---------------------
    def begin(self, world: int, processes: int = 1) -> None:
        """Track ranks 0..world-1 and match hints, as `run()` does once its plan is made; then `ingest` and
        `flush` read lines through the whole path (interpret, record, emit) without starting anything."""
        self._carry_out(self.judge.begin(world, processes, now=now()))
        self.judge.matcher = HintMatcher()

    def ingest(self, rank: int | None, stream: str, lines: list[str], wall: float, mono: float,
               at: Now | None = None) -> None:
        """Lines read from one source in one go (rank None: a launcher's own output), as the loop reads them; `at`:
        when they were read (None: the judge's clock as it stands)."""
        for e in self.judge.lines(rank, stream, lines, wall, mono, now=at):
            if type(e) is ev.LogLines:
                self.record.lines(e.rank, e.stream, e.wall, e.lines)
                self.batch.append(e)
            else:
                self._emit(e)

    def flush(self) -> None:
        """Emit this turn's events to the front end (progress coalesced to one event per rank) and flush the record."""
        self._flush()

    # ---- the run, as torch elastic's PContext runs its processes ---------------------------------------
    def run(self) -> int:
        """start, wait, close: ddptui's exit code."""
        try:
            result = self.start() or self.wait()
            return result.exit_code
        except BaseException as e:  # an engine bug: still closed, and the record still gets its summary
            self._launcher_line(f"ddptui: internal error: {type(e).__name__}: {e}")
            raise
        finally:
            self.close()

    def start(self) -> RunResult | None:
        """Start (or find) the ranks and begin following them; a result when the run ended before it began."""
        return self._start()

    def wait(self) -> RunResult:
        """Turns of `_poll` until it says the run is over, each flushed to the front end, then the run's end."""
        while True:
            over = self._poll()
            if over is not None:
                return self._end(over.end)
            self._flush()
            self._idle()

    def close(self) -> None:
        """Tear down what is left (`_close`), end a run that has no end yet as an error, release what it held."""
        try:
            self._close()
            if self.status is None:
                try:
                    self._finish("error", EXIT_FAILED)
                except Exception:  # noqa: BLE001 - never hide the error that got us here
                    traceback.print_exc()
        finally:
            self._release()
            if self._tailer is not None:
                self._tailer.close()
            self._deaths.close()
            self.record.close()

    @abc.abstractmethod
    def _start(self) -> RunResult | None:
        """Write what the record keeps first, tell the judge the world, start (or find) and follow the ranks."""

    @abc.abstractmethod
    def _poll(self) -> Over | None:
        """One turn: read (`_read_any`: whether it got anything), look, ask the judge; `Over` once the turns are
        over."""

    @abc.abstractmethod
    def _end(self, end: TearDown | None) -> RunResult:
        """After the last turn: the rest of the output, the conclusion, `_finish`."""

    @abc.abstractmethod
    def _close(self) -> None:
        """What is left of the run when it ends, however it ends (a launched run's processes: torn down)."""

    def _release(self) -> None:  # noqa: B027 - a hook: only a launched run holds more
        """What the run held besides its tailer, death watch and record."""

    @property
    def tailer(self) -> Tailer:
        """The rank files' tailer, made by `_start`."""
        assert self._tailer is not None, "the run has not started"
        return self._tailer

    def _idle(self) -> None:
        """Sleep between turns: after a quiet turn the first new output (inotify) or a process's exit (pidfd) wakes
        the loop at once; a trickle (progress lines, logs) is read in batches, a few turns a second."""
        tailer = self.tailer
        if not self._read_any:
            procs.sleep_until_exit(self.procs, IDLE_POLL, also=tailer.watch.fd)
        elif not tailer.backlog:
            procs.sleep_until_exit(self.procs, IDLE_POLL)

    # ---- emitting ------------------------------------------------------------------------------------
    def _emit(self, e) -> None:
        self.batch.append(e)
        if not isinstance(e, ev.LogLines):
            self.record.event(e)

    def _carry_out(self, outputs: list) -> TearDown | None:
        """Emit the judge's events, collect the stacks it asks for; returns the first TearDown it asked for."""
        end = None
        for o in outputs:
            if isinstance(o, ev.LogLines):
                self.record.lines(o.rank, o.stream, o.wall, o.lines)
                self.batch.append(o)
            elif isinstance(o, CollectStacks):
                self._flush()  # the stall is on screen before the stacks are taken (seconds, at worst)
                end = self._carry_out(self._collect_stacks(o)) or end
            elif isinstance(o, ProbeNodes):
                end = self._carry_out(self._probe_nodes(o)) or end
            elif isinstance(o, EndAttempt):
                self._end_attempt(o)
            elif isinstance(o, TearDown):
                end = end or o
            else:
                self._emit(o)
        return end

    def _emit_progress(self) -> None:
        """The Progress events coalesced since the last flush, one per rank that moved."""
        for e in self.judge.progress():
            self._emit(e)

    def _flush(self) -> None:
        self._emit_progress()
        if self.batch:
            batch, self.batch = self.batch, []
            self.record.flush()
            self._publish(batch)
            try:
                self.emit_fn(batch)
            except Exception:  # a front end's bug must not kill the run or lose its record
                traceback.print_exc()
        elif not self.feed.idle:  # a viewer that just subscribed gets its start frame
            self._publish([])

    def _publish(self, batch: list) -> None:
        try:
            self.feed.publish(batch, self.record)
        except Exception:  # a viewer's feed must not kill the run either: the record has everything
            traceback.print_exc()

    def _launcher_line(self, text: str) -> None:
        wall = time.time()
        self.record.lines(None, "err", wall, [text])
        self._emit(ev.LogLines(None, "err", wall, time.monotonic(), (text,)))

    # ---- reading lines -------------------------------------------------------------------------------
    def _read_lines(self, tailer: Tailer) -> list:
        """One read of every rank's files, ingested; what was read."""
        got = tailer.poll()
        at = now()
        self._renumber(tailer, at)
        if self.slurm is not None:
            got = slurm_words_first(got)
        for rank, stream, lines in got:
            self.ingest(rank, stream, lines, at.wall, at.mono, at)
        return got

    def _catch_up(self) -> None:
        """Before a death is judged, the lines its rank wrote before dying: a verdict printed just before os.abort()
        is completed work, not a crash, whether or not this turn's read came before its write."""
        if self._tailer is not None:
            self._read_lines(self._tailer)

    def _renumber(self, tailer: Tailer, at: Now) -> None:
        """Ranks whose hello named another number than the plan guessed: before their lines are read."""
        for guess, rank in tailer.take_renamed():
            self._carry_out(self.judge.rank_learned(guess, rank, now=at))

    # ---- looking at the ranks ------------------------------------------------------------------------
    def _check(self) -> list:
        """The judge's periodic decisions, with the CPU evidence and the machine's cores and load it needs."""
        cores, load = 1, 0.0
        if self.judge.busy_test_due(now=now()):
            if self.judge.stall_info is None:  # the CPU evidence as of now, not as of the last 1 s sample
                self._sample_resources(emit=False)
            cores, load = rank_usage.busy_floor()
        return self.judge.check(cores, load, now=now())

    def _check_rank_pids(self) -> None:
        """Ranks under a launcher: when each really died (its pidfd, watched by a thread) and its exit status
        (read from the zombie before the launcher reaps it; else torchrun's own lines say it later)."""
        own = {pr.pid for pr in self.procs}
        self._deaths.count_oom(self._here(self.judge.rank_pids()))
        seen, gone = self._deaths.look(self._here(self.judge.watched_pids()), own)
        if seen or gone:
            self._catch_up()
        self._carry_out(self.judge.deaths(seen, own, gone, now=now()))

    def _here(self, pids: set[int]) -> set[int]:
        """The pids of ranks on this machine (a pid another node's rank said is no process here)."""
        return pids_here(pids, self.tracks)

    def _sample_resources(self, emit: bool = True) -> None:
        """CPU seconds and RSS of every live rank, for the judge (the stall rule's busy test) and the front end; a
        rank on another node is not sampled (the judge is told it has no CPU evidence)."""
        samples, no_cpu = rank_usage.sample(self.judge.sample_targets(), self.tracks, self._starter_pid)
        self._carry_out(self.judge.resources(samples, emit, no_cpu, rank_usage.host_load() if emit else None,
                                             now=now()))

    def _starter_pid(self, rank: int) -> int | None:
        """The live launcher that is to start `rank`, while the rank has not said its pid."""
        for pr in self.procs:
            if pr.returncode is None and rank in pr.spec.ranks:
                return pr.pid
        return None

    def _follow_job(self, watch: SlurmJobWatch) -> None:
        self.slurm = SlurmFollow(watch, self.judge, self._carry_out, self._launcher_line)

    # ---- stacks --------------------------------------------------------------------------------------
    @abc.abstractmethod
    def _stderr_path(self, rank: int) -> str | None:
        """The file a rank's stderr goes to (where faulthandler's dump would land)."""

    @abc.abstractmethod
    def _fr_sockets(self, targets) -> tuple[dict[int, str], str]:
        """The debug servers to take Flight Recorder dumps from (rank -> socket), and why a rank without one has none."""

    def _collect_stacks(self, req: CollectStacks) -> list:
        """Record every live rank's stacks (and its workers') as the judge asked; the judge reads its verdict from
        them (stalled or slowed ranks only: stacks of a healthy run taken at slightly different moments are no
        evidence of anything), and it is recorded next to them, with every rank's Flight Recorder dump taken at the
        same time through its debug server (runners/edge/fr_client.py)."""
        targets = [Target(rank, pid, self._stderr_path(rank), self.tracks[rank].debug_sock)
                   for rank, pid in self.judge.stack_targets()]
        if not targets:
            return self.judge.stacks_collected(req, None, None, now=now())
        socks, no_socket = self._fr_sockets(targets)
        taken = stack_round.take(targets, {r: (t.host, t.node) for r, t in self.tracks.items()},
                                 self.slurm.job_id if self.slurm is not None else None, self.world, socks, no_socket,
                                 fr_records.known_groups({r: t.collectives for r, t in self.tracks.items()}),
                                 self.stack_method, self.pyspy)
        threads, method, workers = {}, {}, {}
        for rank, res in sorted(taken.results.items()):
            threads[rank] = stack_types.to_json(res)
            method[rank] = res.method if res.threads or res.method.startswith("unavailable: ") else \
                f"unavailable: {res.error or res.method}"  # never "unavailable: None"
            if res.workers:
                workers[rank] = stack_types.workers_json(res)
        files = {rank: _stack_file(self.tracks[rank], res) for rank, res in sorted(taken.results.items())}
        folder = str(self.record.stacks(len(self.stack_collections) + 1, self.judge.attempts.stacks_attempt, req.why,
                                        files, taken.fr_dumps,
                                        {"why": req.why, "seconds": taken.seconds, "method": method,
                                         "threads": threads, "workers": workers, "fr": taken.fr_said}))
        self.stack_collections.append(folder)
        self._emit(ev.StacksCollected(method, threads, taken.seconds, folder, time.time(), workers, req.judged,
                                      taken.fr_said))
        out = self.judge.stacks_collected(req, taken.results, folder, taken.fr_dumps, now=now())
        for e in out:
            if isinstance(e, ev.HangVerdict) and e.path == folder:
                self.record.verdict(folder, e.text, e.fix)
        for node, (ranks, why) in remote_stacks.unreachable_nodes(taken.results).items():
            out += self.judge.node_lost(node, ranks, why, now=now())
        return out

    def _end_attempt(self, req: EndAttempt) -> None:
        """End the hung ranks of an attempt (their stacks are taken), not their launcher: torchrun restarts them. An
        attached job's ranks are not ddptui's to end (the judge never asks it then)."""
        self._flush()
        procs.end_ranks(self._here(set(req.pids)))

    def _probe_nodes(self, req: ProbeNodes) -> list:
        """Ask the nodes the judge named whether they answer, through srun in the job (bounded: REMOTE_TIMEOUT)."""
        self._flush()  # what led to the question is on screen before the wait
        answers = node_probe.probe(self.slurm.job_id if self.slurm is not None else None, dict(req.nodes))
        return self.judge.nodes_probed(answers, now=now())

    # ---- the end -------------------------------------------------------------------------------------
    def _conclude(self, end: TearDown | None) -> RunResult:
        if self.slurm is not None and self.slurm.watch.own_job and not self.slurm.waited:
            self.slurm.end_state()
        self._check_rank_pids()  # deaths the watcher saw since the last check
        at = now()
        self._carry_out(self.judge.settle(now=at))
        # this machine's kernel log and cgroups: of no rank on another node
        oom_evidence = self._deaths.oom_evidence(self._here(set(self.judge.oom_suspects())))
        recorded = self._recorded_errors()
        launchers = [Launcher(pr.spec.name, pr.returncode) for pr in self.procs if pr.spec.stdout_rank is None]
        nccl = nccl_dumps.read(self.run_dir / "fr")  # what NCCL's watchdog wrote at a timeout (runners/launch/fr_env.py)
        out, status, exit_code = self.judge.conclude(end.status if end else None, end.exit_code if end else None,
                                                     launchers, oom_evidence, recorded, nccl, now=at)
        self._carry_out(out)
        return self._finish(status, exit_code)

    def _recorded_errors(self) -> dict[int, dict]:
        """rank -> the error it recorded in torchrun's error file (torch's @record), for ranks with no exception report."""
        found = {r: error_files.recorded_error(self.judge.launcher_log.error_file(r)) for r, t in self.tracks.items()
                 if t.exc is None}
        return {r: e for r, e in found.items() if e}

    def _finish(self, status: str, exit_code: int, preflight: Sequence = ()) -> RunResult:
        self.status = status
        wall = time.time()
        # an attempt the conclusion did not end (a run that ended before its ranks started) ends before the summary
        ended = self.judge.end_attempt(status, now=now())
        summary = self.judge.summary(status, exit_code, str(self.run_dir),
                                     round(time.monotonic() - self._started_mono, 3),
                                     round(time.process_time(), 3),  # this process: the engine, and the UI if any
                                     self.stack_collections, self.survivors)
        if preflight:  # why the run never started, in its end event too (the dashboard's banner says it)
            summary["preflight"] = [{"code": p.code, "message": p.message, "fix": p.fix} for p in preflight]
        path = self.record.write_json("summary.json", summary)
        self._emit_progress()  # steps read in the last drain: before the end, never after it
        self._carry_out(ended)
        self._emit(ev.RunFinished(status, exit_code, str(path), wall, summary))
        self._flush()
        return RunResult(status, exit_code)



def slurm_words_first(got: list) -> list:
    """A poll's batches with slurmstepd's cancel lines first: it writes them before it signals the tasks, so the deaths
    read in the same poll (srun's "task 1: Terminated") are judged knowing Slurm cancelled the job."""
    def has(batch) -> bool:
        lines = batch[2]
        text = getattr(lines, "text", None)
        return CANCEL_NEEDLE in (text if text is not None else "\n".join(lines))
    return sorted(got, key=lambda b: not has(b)) if any(has(b) for b in got) else got


def _stack_file(t, res) -> str:
    """A rank's stacks file: who it is, its stacks, its last lines."""
    head = [f"rank {t.rank}  pid {t.pid}  last step {t.step}  method {res.method}"]
    if res.error:
        head.append(f"error: {res.error}")
    head.append("")
    head.append(stack_types.render(res))
    head.append("\nlast lines:")
    head += [f"  {ln}" for ln in list(t.tail)[-20:]]
    return "\n".join(head) + "\n"
