"""One run's I/O: plan, spawn, tail, sleep, sample, collect stacks, tear down, record and emit; runners/judge/judge.py decides."""
from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from . import events as ev
from .edge import error_files, oom, procs
from .edge.deathwatch import DeathWatch
from .edge.record import RunRecord, new_run_dir
from .edge.tail import Tailer
from .evidence import fr_records, signals, slurm_state, stack_types
from .judge.job_follow import Agent, node_of_agent
from .judge.judge import (  # noqa: F401
    CRASH_GRACE,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_REPLICAS,
    EXIT_STALLED,
    EXIT_USAGE,
    CollectStacks,
    Judge,
    Launcher,
    ProbeNodes,
    TearDown,
)
from .launch import fr_env
from .launch.registry import runner_for, traits_of

TEARDOWN_DEADLINE = 5.0
# Seconds between loop turns unless there is a backlog to read. Every wake-up takes a core from a rank for
# a moment, and ranks in lock-step all wait for it: on 2 cores, 20 wake-ups a second cost a 2-rank run ~4 %
# of its wall time, 4 a second nothing measurable. After a quiet turn the first new output or a process's
# exit wakes the loop at once; the dashboard redraws at the same period.
IDLE_POLL = 0.25
DISCOVER_EARLY, DISCOVER_FOUND = 0.2, 2.0  # how often to look for launcher-created log files


def rendezvous_port(profile) -> int:
    """The profile's master_port (or c10d endpoint's port), or with `auto` a port free on that address now.
    The slurm runner's port is chosen on the job's first node (runners/launch/slurm.py): 0 here."""
    if not runner_for(profile.runner).picks_port:
        return 0
    host, port = profile.rendezvous
    if port != "auto":
        return int(port)
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def make_plan(profile, run_dir: Path, port: int, dashboard_pid: int | None = None):
    return runner_for(profile.runner).plan(profile, run_dir, port, dashboard_pid)


class Session:
    """Runs one profile. `run()` blocks (call it from a thread for a UI); `emit(list[Event])` once per turn.

    The I/O of a run; every decision is the judge's (`self.judge`, runners/judge/judge.py): this loop feeds it what it
    reads, sees exit and samples, and carries out what it asks (collect stacks, tear down)."""

    def __init__(self, profile, runs_root: Path | str = "runs", emit: Callable[[list], None] | None = None,
                 pyspy: str | None = None, stack_method: str = "auto") -> None:
        self.profile = profile
        self.emit_fn = emit or (lambda batch: None)
        self.run_dir = new_run_dir(Path(runs_root), profile.name)
        self.record = RunRecord(self.run_dir)
        self.pyspy, self.stack_method = pyspy, stack_method
        self._started_mono = time.monotonic()
        self.judge = Judge(profile, self._started_mono, time.time(), runner=traits_of(profile))
        self.procs: list[procs.Proc] = []
        self.batch: list = []
        self._stop = threading.Event()
        self._stop_why = ""
        self._dump = threading.Event()
        self._kill_now = threading.Event()  # asked again while stopping: SIGKILL without the TERM deadline
        self.survivors: list[str] = []  # processes that outlived SIGKILL at teardown, described
        self.status: str | None = None
        self.stack_collections: list[str] = []
        self._deaths = DeathWatch()  # ranks a launcher spawned: when each really died
        self._oom_counters: dict[int, oom.CgroupCounter] = {}  # rank pid -> its memory cgroup's OOM count
        self.plan = None
        self._subreaper = False  # this run made the process a subreaper (undone when it ends)
        self.slurm = None  # runners.edge.slurm_job.SlurmJobWatch when the ranks run under a Slurm job or step
        self._tailer: Tailer | None = None
        self._job_waited = False  # teardown scancelled the job and waited for its end already
        self._job_end: TearDown | None = None  # what Slurm's answer about the job asked for (NODE_FAIL: a teardown)
        self._sockets: str | None = None  # the folder of the ranks' debug sockets (runners/launch/fr_env.py), removed at the end
        self._heartbeat = None  # runners/launch/heartbeat.py: while an sbatch job of this run may be alive

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
        self.judge.tick(time.monotonic(), time.time())
        self._carry_out(self.judge.begin(world, processes))
        self.judge.matcher = _hint_matcher()

    def ingest(self, rank: int | None, stream: str, lines: list[str], wall: float, mono: float) -> None:
        """Lines read from one source in one go (rank None: a launcher's own output), as the loop reads them."""
        for e in self.judge.lines(rank, stream, lines, wall, mono):
            if type(e) is ev.LogLines:
                self.record.lines(e.rank, e.stream, e.wall, e.lines)
                self.batch.append(e)
            else:
                self._emit(e)

    def flush(self) -> None:
        """Emit this turn's events to the front end (progress coalesced to one event per rank) and flush the record."""
        self._flush()

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
            try:
                self.emit_fn(batch)
            except Exception:  # a front end's bug must not kill the run or lose its record
                import traceback
                traceback.print_exc()

    def _tick(self) -> None:
        self.judge.tick(time.monotonic(), time.time())

    # ---- the run -------------------------------------------------------------------------------------
    def run(self) -> int:
        try:
            return self._run()
        except BaseException as e:  # an engine bug: still tear down, and the record still gets its summary
            self._launcher_line(f"ddptui: internal error: {type(e).__name__}: {e}")
            raise
        finally:
            try:
                if self.procs:  # also when every process we started has exited: their orphans may not have
                    self._teardown()
                if self.status is None:
                    try:
                        self._finish("error", EXIT_FAILED)
                    except Exception:  # noqa: BLE001 - never hide the error that got us here
                        import traceback
                        traceback.print_exc()
            finally:
                if self._subreaper:
                    procs.stop_subreaping()
                self._deaths.close()
                fr_env.remove(self._sockets)
                if self._heartbeat is not None:  # after teardown: a job scancel did not end is ended by its watcher
                    self._heartbeat.stop()
                self.record.close()

    def _teardown(self, why: str | None = None) -> dict:
        """Tear every process down (bounded), and say which ones outlived SIGKILL."""
        self._tick()
        self.judge.teardown_began(why)
        extra = self._here(self.judge.rank_pids())
        if self.slurm is not None:
            self._end_job()
            extra = set()  # Slurm's ranks are slurmstepd's children, not ours: ended through scancel only
        td = procs.teardown(self.procs, extra, TEARDOWN_DEADLINE, hurry=self._kill_now.is_set)
        who = {pr.pid: pr.spec.name for pr in self.procs}
        who.update({t.pid: f"rank {t.rank}" for t in self.tracks.values() if t.pid})
        for s in td["survivors"]:
            line = procs.describe_survivor(s["pid"], s["state"], who.get(s["pid"]))
            self.survivors.append(line)
            self._launcher_line(f"ddptui: {line}")
        return td

    def _end_job(self) -> None:
        """scancel the run's Slurm job (or step) unless it is over, then wait (bounded) until sbatch/srun exit and
        Slurm holds no process or node of it: teardown through the engine, never a signal to a process on a node."""
        from .edge.slurm_job import GONE_DEADLINE
        w = self.slurm
        if self._job_waited:
            return  # one scancel and one bounded wait per run: `run`'s final sweep comes here again
        running = any(pr.returncode is None and pr.poll() is None for pr in self.procs)
        if not running and (w.job_id is None or w.gone()):
            return
        self._job_waited = True
        if self.judge.job.outside():  # Slurm is ending it already (someone's scancel): no scancel of ddptui's
            what = f"job {w.job_id}"
            self._launcher_line(f"ddptui: Slurm is ending {what} already (not ddptui's scancel): waiting for its end")
        else:
            self.judge.job_cancelling()
            what = w.cancel()
            self._launcher_line(f"ddptui: scancel {what}")
        t0 = time.monotonic()
        lost = set(self.judge.job.lost)
        left, held = [], None
        while not self._kill_now.is_set():
            left = [pr.spec.name for pr in self.procs if pr.poll() is None]
            if not left:
                held = w.held_on()
                if held is not None and set(held) <= lost:
                    break
            if time.monotonic() - t0 >= GONE_DEADLINE:
                break
            time.sleep(0.2)
        waited = time.monotonic() - t0
        why_down = w.slurmd_timeout() if not left and held else None
        self._launcher_line(slurm_state.released_words(what, waited, left, held, lost, why_down)
                            + (f" ({w.error})" if w.error and (left or held is None) else ""))
        self._job_poll()

    def _job_poll(self) -> str | None:
        """Ask Slurm about the job and tell the judge; returns its state (None: not known)."""
        info = self.slurm.poll()
        if info is None:
            return None
        nodes = self.slurm.hostnames(info.nodelist)
        down = self.slurm.down_nodes(nodes) if info.state in slurm_state.NODE_FAILED else ()
        self._tick()
        self._job_end = self._carry_out(self.judge.job_info(info, nodes, down)) or self._job_end
        self._ask_canceller()
        return info.state

    def _ask_canceller(self) -> None:
        """Slurm cancelled the job and ddptui did not: who asked, from what Slurm recorded (slurmctld's log)."""
        if self.slurm is not None and self.judge.job.wants_canceller:
            requests, where = self.slurm.kill_requests()
            self._tick()
            self._carry_out(self.judge.job_canceller(requests, where))

    def _job_end_state(self, bound: float = 10.0) -> None:
        """How Slurm ended the job, for the summary: sbatch --wait has returned, the job may still be COMPLETING."""
        end = time.monotonic() + bound
        while self.slurm.job_id is not None and time.monotonic() < end:
            last = self.slurm.last
            if last is not None and last.state in slurm_state.ENDED:
                return
            if self._job_poll() is None:
                return  # Slurm no longer knows it (or cannot be asked): what was said last stands
            time.sleep(0.3)

    def _run(self) -> int:
        p = self.profile
        self.record.write_json("profile.json", p.to_json())
        port = rendezvous_port(p)
        self.plan = make_plan(p, self.run_dir, port, os.getpid())
        self.record.write_json("plan.json", self.plan.to_json())
        if self.plan.job is not None:  # the folder Slurm writes rank files into, the batch script: before sbatch/srun
            from .launch.slurm import prepare
            prepare(self.plan, self.run_dir)
            if self.plan.job.mode == "sbatch":  # the batch script's watcher cancels the job once this stops
                from .launch.heartbeat import Heartbeat, path
                self._heartbeat = Heartbeat(path(self.run_dir)).start()
        self._tick()
        here = self.plan.ranks_here
        self._carry_out(self.judge.begin(self.plan.world_size, len(self.plan.procs), here))
        self._emit(ev.RunStarted(str(self.run_dir), p.name, p.runner, self.world, p.steps, time.time(),
                                 len(here) if self.judge.state.partial else None))
        self._sockets, problem = fr_env.prepare(p, self.run_dir)  # before any rank starts: they bind in it
        if problem:
            self._launcher_line(f"ddptui: {problem}")
        if self._sockets:
            swept = fr_env.sweep_stale(keep=self._sockets)
            if swept:
                self._launcher_line(f"ddptui: removed {len(swept)} socket folder(s) of ddptui runs that were killed"
                                    f" ({', '.join(swept)})")
        problems = self._preflight()
        if problems:
            return self._finish("preflight failed", EXIT_USAGE, problems)
        self.judge.matcher = _hint_matcher()
        if self.plan.job is None:
            # orphaned ranks of a launcher that died come to us, to be torn down; a Slurm job's processes are
            # slurmstepd's, and a subreaper that is an ancestor of slurmd (a test's cluster) would adopt its forks
            self._subreaper = procs.become_subreaper()
        tailer = self._tailer = Tailer()
        for n, spec in enumerate(self.plan.procs):
            if self._stop.is_set():  # a stop (SIGTERM, SIGINT, the UI) ends spawning at once; the loop tears down
                self._launcher_line(f"ddptui: stop requested while spawning: {n} of {len(self.plan.procs)} "
                                    "processes started, no more")
                break
            try:
                proc = procs.spawn(spec)
            except procs.SpawnError as e:
                self._launcher_line(str(e))
                return self._finish("failed", EXIT_FAILED)
            self.procs.append(proc)
            tailer.add(spec.stdout, spec.stdout_rank, "out")
            if spec.stderr != spec.stdout:
                tailer.add(spec.stderr, spec.stdout_rank, "err")
            self._emit(ev.ProcessStarted(spec.name, proc.pid, spec.ranks, proc.started))
            self.judge.process_started(proc.pid, spec.stdout_rank)
        for src in self.plan.sources:
            tailer.add(src.path, src.rank, src.stream, learn=src.learn_rank)
        if self.plan.job is not None and self.procs:
            from .edge.slurm_job import SlurmJobWatch
            self.slurm = SlurmJobWatch(self.plan.job, self.procs[0].spec.stdout)
            self.judge.job_submitted(self.plan.job.launch)
        self._flush()
        try:
            return self._loop(tailer)
        finally:
            tailer.close()

    def _loop(self, tailer: Tailer) -> int:
        next_discover = next_sample = next_check = next_job = 0.0
        end: TearDown | None = None
        while True:
            mono = time.monotonic()
            if mono >= next_discover:
                tailer.discover()
                # quickly until every file a launcher will create exists, then only for new ones (a restart's)
                next_discover = mono + (DISCOVER_FOUND if tailer.all_found() else DISCOVER_EARLY)
            got = self._read_lines(tailer)
            self._ask_canceller()
            for proc in self.procs:
                if proc.returncode is None and proc.poll() is not None:
                    end = self._proc_exited(proc) or end
            if mono >= next_sample:
                self._sample_resources()
                next_sample = mono + 1.0
            if mono >= next_check:
                next_check = mono + 0.25
                self._check_rank_pids()
                end = self._carry_out(self._check()) or end
                end = self._carry_out(self.judge.watchdog(self._agents())) or end
            if self.slurm is not None and mono >= next_job:
                next_job = mono + slurm_state.poll_interval(self._job_poll())
                end = end or self._job_end
            if self._dump.is_set():
                self._dump.clear()
                self._tick()
                self._carry_out(self.judge.dump_requested())
            if self._stop.is_set() and end is None:
                end = TearDown("stopped", EXIT_FAILED)
                why = f" ({self._stop_why})" if self._stop_why else ""
                self._launcher_line(f"ddptui: stop requested{why}, tearing every rank down")
            if end is not None or all(pr.returncode is not None for pr in self.procs):
                break
            self._flush()
            if not got:  # quiet: the first new output (inotify) or exit (pidfd) wakes us at once
                procs.sleep_until_exit(self.procs, IDLE_POLL, also=tailer.watch.fd)
            elif not tailer.backlog:  # a trickle (progress lines, logs): read it in batches, a few turns a second
                procs.sleep_until_exit(self.procs, IDLE_POLL)
        if any(pr.returncode is None for pr in self.procs):
            td = self._teardown(end.status if end is not None else None)
            self._launcher_line(f"ddptui: teardown took {td['seconds']:.2f} s"
                                + (" (SIGKILL needed)" if td["killed"] else ""))
            for proc in self.procs:
                if proc.returncode is not None and proc.exited:
                    self._proc_exited(proc, torn_down=True)
        for rank, stream, lines in tailer.drain():
            self._tick()
            self._renumber(tailer)
            self.ingest(rank, stream, lines, time.time(), time.monotonic())
            self._flush()  # one chunk at a time: what is left after the ranks exit can be large
        return self._conclude(end)

    def _read_lines(self, tailer: Tailer) -> list:
        """One read of every rank's files, ingested; what was read."""
        got = tailer.poll()
        mono, wall = time.monotonic(), time.time()
        self.judge.tick(mono, wall)
        self._renumber(tailer)
        if self.slurm is not None:
            got = slurm_words_first(got)
        for rank, stream, lines in got:
            self.ingest(rank, stream, lines, wall, mono)
        return got

    def _catch_up(self) -> None:
        """Before a death is judged, the lines its rank wrote before dying: a verdict printed just before os.abort()
        is completed work, not a crash, whether or not this turn's read came before its write."""
        if self._tailer is not None:
            self._read_lines(self._tailer)

    def _renumber(self, tailer: Tailer) -> None:
        """Ranks whose hello named another number than the plan guessed: before their lines are read."""
        for guess, rank in tailer.take_renamed():
            self._carry_out(self.judge.rank_learned(guess, rank))

    def _check(self) -> list:
        """The judge's periodic decisions, with the CPU evidence and the machine's cores and load it needs."""
        cores, load = 1, 0.0
        if self.judge.busy_test_due():
            if self.judge.stall_info is None:  # the CPU evidence as of now, not as of the last 1 s sample
                self._sample_resources(emit=False)
                self._tick()
            cores, load = len(os.sched_getaffinity(0)), os.getloadavg()[0]
        return self.judge.check(cores, load)

    # ---- reading lines -------------------------------------------------------------------------------
    def _launcher_line(self, text: str) -> None:
        wall = time.time()
        self.record.lines(None, "err", wall, [text])
        self._emit(ev.LogLines(None, "err", wall, time.monotonic(), (text,)))

    # ---- processes -----------------------------------------------------------------------------------
    def _proc_exited(self, proc: procs.Proc, torn_down: bool = False) -> TearDown | None:
        self._check_rank_pids()  # the deaths the watcher saw first, with their times (and a launcher's ranks' codes)
        self._catch_up()
        self._tick()
        launcher = proc.spec.stdout_rank is None
        self._carry_out(self.judge.process_exited(proc.spec.name, proc.spec.ranks, proc.pid, proc.returncode,
                                                  proc.exited, launcher, torn_down))
        if launcher and not torn_down:
            others = any(pr.returncode is None for pr in self.procs if pr is not proc)
            return self._carry_out(self.judge.agent_exited(proc.spec.name, proc.spec.ranks, proc.returncode,
                                                           signals.signal_name(proc.returncode), others))
        return None

    def _agents(self) -> list[Agent]:
        """The plan's processes still running that start ranks (per-node agents, sbatch, srun): the watchdog's."""
        return [Agent(pr.spec.name, node_of_agent(pr.spec.name), pr.spec.ranks) for pr in self.procs
                if pr.returncode is None and pr.spec.stdout_rank is None]

    def _check_rank_pids(self) -> None:
        """Ranks under a launcher: when each really died (its pidfd, watched by a thread) and its exit status
        (read from the zombie before the launcher reaps it; else torchrun's own lines say it later)."""
        own = {pr.pid for pr in self.procs}
        for pid in self._here(self.judge.rank_pids()):
            if pid not in self._oom_counters:
                self._oom_counters[pid] = oom.CgroupCounter(pid)
        watched = self._here(self.judge.watched_pids())
        for pid in watched:
            self._deaths.watch(pid)  # our own rank processes too: the moment they died, not the turn
        seen = [(d.pid, d.wall, d.returncode) for d in self._deaths.deaths()]
        dead = {pid for pid, _, _ in seen}
        gone = {pid for pid in watched - own - dead  # no pidfd here: the slow way
                if not self._deaths.watching(pid) and not psutil.pid_exists(pid)}
        if seen or gone:
            self._catch_up()
        self._tick()
        self._carry_out(self.judge.deaths(seen, own, gone))

    def _here(self, pids: set[int]) -> set[int]:
        """The pids of ranks on this machine: a pid another node's rank said is no process here (never watched, never
        signalled; such a rank's end comes from its launcher or job)."""
        from .edge.srun_exec import is_local
        here = socket.gethostname()
        away = {t.pid for t in self.tracks.values() if t.pid and not is_local(t.host, here)}
        return pids - away

    def _sample_resources(self, emit: bool = True) -> None:
        """CPU seconds and RSS of every live rank, for the judge (the stall rule's busy test) and the front end.

        A rank whose process is not known yet (a launcher still starting it) is judged by the CPU of its launcher's
        whole process tree: the launcher waits while what it started imports torch (torchrun's ranks, torch_xla's
        worker). A rank on another node is not sampled: its pid is another machine's (the judge is told it has no CPU
        evidence)."""
        from .edge.srun_exec import is_local
        seen, samples, no_cpu, here = {}, {}, {}, socket.gethostname()
        for rank, pid in self.judge.sample_targets().items():
            t = self.tracks[rank]
            if not is_local(t.host, here):
                no_cpu[rank] = f"runs on {t.node or t.host}"
                continue
            starting = not pid
            pid = pid or self._starter_pid(rank)
            if not pid:
                continue
            if pid not in seen:
                try:
                    pr = _psproc(pid)
                    with pr.oneshot():
                        times = pr.cpu_times()
                        used = _tree_cpu(pr, times) if starting else times.user + times.system
                        seen[pid] = (time.monotonic(), used, pr.memory_info().rss)
                except psutil.Error:
                    seen[pid] = None
            if seen[pid] is not None:
                samples[rank] = (pid, *seen[pid])
        self._tick()
        self._carry_out(self.judge.resources(samples, emit, no_cpu, host_load() if emit else None))

    def _starter_pid(self, rank: int) -> int | None:
        """The live launcher that is to start `rank`, while the rank has not said its pid."""
        for pr in self.procs:
            if pr.returncode is None and rank in pr.spec.ranks:
                return pr.pid
        return None

    # ---- stacks --------------------------------------------------------------------------------------
    def _stderr_path(self, rank: int) -> str | None:
        import glob
        learned = self._tailer.learned_file(rank, "err") if self._tailer is not None else None
        if learned:  # c10d: the folder whose hello named this rank, whatever the plan guessed
            return learned
        for spec in self.plan.procs:
            if spec.stdout_rank == rank:
                return spec.stderr
        for src in self.plan.sources:
            if src.rank == rank and src.stream == "err":
                hits = glob.glob(src.path)
                return hits[-1] if hits else None
        # ranks that share a launcher's stderr (XLA thread replicas)
        for spec in self.plan.procs:
            if rank in spec.ranks:
                return spec.stderr
        return None

    def _collect_stacks(self, req: CollectStacks) -> list:
        """Record every live rank's stacks (and its workers') as the judge asked; the judge reads its verdict from
        them (stalled or slowed ranks only: stacks of a healthy run taken at slightly different moments are no
        evidence of anything), and it is recorded next to them, with every rank's Flight Recorder dump taken at the
        same time through its debug server (runners/edge/fr_client.py)."""
        import concurrent.futures

        from .edge import fr_client, remote_stacks, srun_exec, stacks
        from .evidence import stack_types
        targets = [stacks.Target(rank, pid, self._stderr_path(rank), self.tracks[rank].debug_sock)
                   for rank, pid in self.judge.stack_targets()]
        if not targets:
            self._tick()
            return self.judge.stacks_collected(req, None, None)
        t0 = time.monotonic()
        hosts, here = {r: (t.host, t.node) for r, t in self.tracks.items()}, socket.gethostname()
        job_id = self.slurm.job_id if self.slurm is not None else None
        # a stopped rank's debug server cannot answer: not asked (one here is seen at once; one on another node by
        # the srun that would run py-spy there)
        stopped = {t.rank for t in targets if srun_exec.is_local(hosts[t.rank][0], here)
                   and stacks.stopped_state(t.pid)}
        socks, no_socket = self._fr_sockets(targets)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            fr_job = pool.submit(fr_client.take, [t.rank for t in targets],
                                 {r: sock for r, sock in socks.items() if r not in stopped}, hosts, here, job_id,
                                 self.world, no_socket,
                                 fr_records.known_groups({r: t.collectives for r, t in self.tracks.items()}))
            # ranks on other nodes are dumped there, through srun in their job (runners/edge/remote_stacks.py)
            results = remote_stacks.collect_everywhere(targets, hosts, here, job_id, method=self.stack_method,
                                                       pyspy=self.pyspy)
            fr_dumps, fr_said = fr_job.result()
        for rank, res in results.items():
            if res.state and rank not in fr_dumps:
                fr_said[rank] = f"unavailable: rank {rank} is stopped (State: {res.state})"
        secs = time.monotonic() - t0
        n = len(self.stack_collections) + 1
        folder = self.run_dir / "stacks" / f"{n:02d}-{req.why.replace(' ', '-')}"
        folder.mkdir(parents=True, exist_ok=True)
        threads, method, workers = {}, {}, {}
        for rank, res in sorted(results.items()):
            (folder / f"rank{rank}.txt").write_text(_stack_file(self.tracks[rank], res), encoding="utf-8")
            threads[rank] = stack_types.to_json(res)
            method[rank] = res.method if res.threads or res.method.startswith("unavailable: ") else \
                f"unavailable: {res.error or res.method}"  # never "unavailable: None"
            if res.workers:
                workers[rank] = stack_types.workers_json(res)
        for rank, dump in fr_dumps.items():
            self.record.write_fr(str(folder.relative_to(self.run_dir)), rank, dump)
        self.record.write_json(str(folder.relative_to(self.run_dir) / "stacks.json"),
                               {"why": req.why, "seconds": secs, "method": method, "threads": threads,
                                "workers": workers, "fr": fr_said})
        self.stack_collections.append(str(folder))
        self._emit(ev.StacksCollected(method, threads, secs, str(folder), time.time(), workers, req.judged, fr_said))
        self._tick()
        out = self.judge.stacks_collected(req, results, str(folder), fr_dumps)
        for e in out:
            if isinstance(e, ev.HangVerdict) and e.path == str(folder):
                (folder / "verdict.txt").write_text(e.text + "\n" + (f"fix: {e.fix}\n" if e.fix else ""),
                                                    encoding="utf-8")
        for node, (ranks, why) in remote_stacks.unreachable_nodes(results).items():
            self._tick()
            out += self.judge.node_lost(node, ranks, why)
        return out

    def _fr_sockets(self, targets) -> tuple[dict[int, str], str]:
        """The debug servers to take Flight Recorder dumps from (rank -> socket), and why a rank without one has none."""
        return ({t.rank: t.debug_sock for t in targets},
                fr_records.why_no_socket(self.profile.flight_recorder, fr_env.enabled(self.profile)))

    def _probe_nodes(self, req: ProbeNodes) -> list:
        """Ask the nodes the judge named whether they answer, through srun in the job (bounded: REMOTE_TIMEOUT)."""
        from .edge import node_probe
        self._flush()  # what led to the question is on screen before the wait
        answers = node_probe.probe(self.slurm.job_id if self.slurm is not None else None, dict(req.nodes))
        self._tick()
        return self.judge.nodes_probed(answers)

    # ---- the end -------------------------------------------------------------------------------------
    def _conclude(self, end: TearDown | None) -> int:
        if self.slurm is not None and self.slurm.own_job and not self._job_waited:
            self._job_end_state()
        self._check_rank_pids()  # deaths the watcher saw since the last check
        self._tick()
        self._carry_out(self.judge.settle())
        oom_evidence = {pid: oom.kill_evidence(pid, self._oom_counters.get(pid))  # this machine's log and cgroups:
                        for pid in self._here(set(self.judge.oom_suspects()))}  # of no rank on another node
        recorded = self._recorded_errors()
        launchers = [Launcher(pr.spec.name, pr.returncode) for pr in self.procs if pr.spec.stdout_rank is None]
        from .edge import nccl_dumps
        nccl = nccl_dumps.read(self.run_dir / "fr")  # what NCCL's watchdog wrote at a timeout (runners/launch/fr_env.py)
        out, status, exit_code = self.judge.conclude(end.status if end else None, end.exit_code if end else None,
                                                     launchers, oom_evidence, recorded,
                                                     nccl)
        self._carry_out(out)
        return self._finish(status, exit_code)

    def _recorded_errors(self) -> dict[int, dict]:
        """rank -> the error it recorded in torchrun's error file (torch's @record), for ranks with no exception report."""
        found = {r: error_files.recorded_error(self.judge.launcher_log.error_file(r)) for r, t in self.tracks.items() if t.exc is None}
        return {r: e for r, e in found.items() if e}

    def _preflight(self) -> list:
        try:
            from .edge.preflight import check
        except ImportError:
            return []
        problems = check(self.profile)
        for pr in problems:
            self._launcher_line(f"ddptui: preflight {pr.severity}: {pr.message}" + (f" (fix: {pr.fix})" if pr.fix else ""))
        return [pr for pr in problems if pr.severity == "error"]

    def _finish(self, status: str, exit_code: int, preflight: list = ()) -> int:
        self.status = status
        wall = time.time()
        summary = self.judge.summary(status, exit_code, str(self.run_dir),
                                     round(time.monotonic() - self._started_mono, 3),
                                     round(time.process_time(), 3),  # this process: the engine, and the UI if any
                                     self.stack_collections, self.survivors)
        if preflight:  # why the run never started, in its end event too (the dashboard's banner says it)
            summary["preflight"] = [{"code": p.code, "message": p.message, "fix": p.fix} for p in preflight]
        path = self.record.write_json("summary.json", summary)
        self._emit_progress()  # steps read in the last drain: before the end, never after it
        self._emit(ev.RunFinished(status, exit_code, str(path), wall, summary))
        self._flush()
        return exit_code


def slurm_words_first(got: list) -> list:
    """A poll's batches with slurmstepd's cancel lines first: it writes them before it signals the tasks, so the deaths
    read in the same poll (srun's "task 1: Terminated") are judged knowing Slurm cancelled the job."""
    from .evidence.slurm_state import CANCEL_NEEDLE

    def has(batch) -> bool:
        lines = batch[2]
        text = getattr(lines, "text", None)
        return CANCEL_NEEDLE in (text if text is not None else "\n".join(lines))
    return sorted(got, key=lambda b: not has(b)) if any(has(b) for b in got) else got


def host_load() -> tuple[float, int | None] | None:
    """This host's 1-minute load average and CPUs: a loaded machine makes every rank slow, whatever its model."""
    try:
        return os.getloadavg()[0], os.cpu_count()
    except OSError:  # no load average on this system
        return None


_PS_CACHE: dict[int, psutil.Process] = {}


def _tree_cpu(pr: psutil.Process, times) -> float:
    """CPU seconds of a process and everything below it, the ended ones too (each process's reaped children's times
    count in its own `children_*`): a launcher's, while the ranks it starts have not said their pids."""
    total = times.user + times.system + times.children_user + times.children_system
    try:
        kids = pr.children(recursive=True)
    except psutil.Error:
        return total
    for kid in kids:
        try:
            t = kid.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            continue
    return total


def _psproc(pid: int) -> psutil.Process:
    """psutil needs the same Process object between calls for cpu_percent to mean anything."""
    pr = _PS_CACHE.get(pid)
    if pr is None:
        pr = _PS_CACHE[pid] = psutil.Process(pid)
    return pr


def _stack_file(t, res) -> str:
    head = [f"rank {t.rank}  pid {t.pid}  last step {t.step}  method {res.method}"]
    if res.error:
        head.append(f"error: {res.error}")
    head.append("")
    head.append(stack_types.render(res))
    head.append("\nlast lines:")
    head += [f"  {ln}" for ln in list(t.tail)[-20:]]
    return "\n".join(head) + "\n"


def _hint_matcher():
    from .evidence.hints import HintMatcher
    return HintMatcher()
