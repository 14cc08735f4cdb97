"""`ddptui attach`: a job ddptui did not launch, watched through the same judge, events and record as a launched run.

It never signals the job: it reads the ranks' output files, their CPU time and RSS (psutil), their deaths (pidfd) and
their stacks (py-spy only: a ptrace read; never faulthandler's SIGUSR1); `stop_job` is the one exception, asked by the
user, and goes through the job's own launcher (SIGTERM to torchrun's agent, scancel)."""
from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path

from .. import events as ev
from ..edge import error_files, open_files
from ..edge.clock import now
from ..edge.locality import on_this_host, this_host
from ..edge.slurm_job import SlurmJobWatch
from ..edge.tail import Tailer
from ..evidence import slurm_state
from ..evidence.hints import HintMatcher
from ..evidence.words import ranks_text
from ..judge.judge import EXIT_FAILED, EXIT_OK, EXIT_STALLED, TearDown
from ..launch.plan import SlurmJob
from ..launch.profile.model import Profile, Workload
from ..run_loop import Over, RunLoop, RunResult
from .find import AttachedJob
from .liveness import STACK_EVERY, Liveness, Seen, decide, frame_key, liveness_words, motion_key, seen_words, waiting
from .output import last_lines

OBSERVE = 3.0  # --no-ui: seconds of output and CPU watched before the verdict (the busy test looks at 3 s of CPU)
FIRST_CHECK = 1.5  # no stall is judged before the CPU samples span this long: one sample says nothing of CPU use
BACKLOG_LINES = 20  # the last lines of each output file shown at attach
REPORT_EVERY = 10.0  # --watch: a liveness line per rank this often
ENDED_WAIT = 10.0  # after a rank failed: how long ddptui waits for the job's own launcher to end the rest
CODES_WAIT = 2.0  # every rank's process is gone: how long the launcher's output may still bring their exit codes
# --no-ui on a rank that showed no progress in OBSERVE s (a blind rank's silence says nothing): watch on, a stack sample
# this often, until every rank moved, the stall rule decided, or the stall limit (+ EXTEND_MARGIN for its check) passed
EXTEND_EVERY = 2.0
EXTEND_MARGIN = 2.0


def attach_profile(job: AttachedJob, stall_after: float) -> Profile:
    """The profile the judge and the record see: the job's world, the stall limit asked, no startup grace (the job
    is past its start, or ddptui cannot tell), stacks without a verdict-driven stop, no replica digests (no hooks)."""
    world = job.world_size or (max(job.ranks) + 1 if job.ranks else 1)
    return Profile(name=f"attach-{job.asked}", workload=Workload(command=tuple(job.launcher_argv) or None),
                   source=f"ddptui attach {job.asked}", description=f"attached to {job.kind} job {job.asked}",
                   runner="attach", nproc=world, nnodes=1, stall_after=float(stall_after),
                   startup_grace=float(stall_after), on_stall="dump", replica_check=False,
                   flight_recorder=False)


def job_json(job: AttachedJob) -> dict:
    """attach.json: what ddptui found of the job."""
    def out(o):
        return {"kind": o.kind, "path": o.path, "note": o.note}
    return {"asked": job.asked, "kind": job.kind, "launcher_pid": job.launcher_pid,
            "launcher_argv": list(job.launcher_argv), "slurm_job": job.slurm_job, "world_size": job.world_size,
            "ranks": {r: {"pid": a.pid, "local_rank": a.local_rank, "host": a.host, "node": a.node,
                          "stdout": out(a.stdout), "stderr": out(a.stderr)} for r, a in sorted(job.ranks.items())},
            "unreadable": [{"pid": u.pid, "reason": u.reason} for u in job.unreadable]}


def launcher_outputs(pid: int | None) -> list[str]:
    """The regular files the launcher's stdout/stderr go to (a shell redirect), each once: torchrun's own lines."""
    if pid is None:
        return []
    seen: list[str] = []
    for fd in (1, 2):
        try:
            path = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if path.startswith("/") and os.path.isfile(path) and path not in seen:
            seen.append(path)
    return seen


def stop_words(job: AttachedJob) -> tuple[str, list[str] | int | None]:
    """What `stop` would do to the job, in words, and how: a command (scancel), a pid to SIGTERM (its launcher), or
    None (nothing ddptui may signal)."""
    if job.slurm_job:
        return f"scancel {job.slurm_job} (Slurm ends every step and rank of the job)", ["scancel", job.slurm_job]
    if job.launcher_pid is not None and job.kind == "torchrun":
        return (f"SIGTERM to torchrun's agent (pid {job.launcher_pid}), which stops its ranks itself",
                job.launcher_pid)
    if job.launcher_pid is not None:
        return (f"SIGTERM to the process that spawned the ranks (pid {job.launcher_pid}); it has no launcher of its "
                "own, so whether it ends its ranks is up to the program", job.launcher_pid)
    return "nothing: the job has no launcher ddptui could find, and ddptui never signals ranks one by one", None


class AttachSession(RunLoop):
    """Watches one AttachedJob. `run()` blocks (call it from a thread for a UI); `emit(list[Event])` once per turn.

    watch False (--no-ui): OBSERVE seconds of output and CPU, the stacks of every rank, the verdict, detach.
    watch True: stay until every rank ended or `request_stop` (Ctrl-C, the dashboard's q): that detaches."""

    def __init__(self, job: AttachedJob, runs_root: Path | str = "runs", emit: Callable[[list], None] | None = None,
                 watch: bool = False, stall_after: float = 30.0, stack_every: float = STACK_EVERY,
                 pyspy: str | None = None, observe: float = OBSERVE) -> None:
        # py-spy, then torch's debug server where the rank runs one; never faulthandler's SIGUSR1
        super().__init__(attach_profile(job, stall_after), runs_root, emit, pyspy=pyspy, stack_method="no-signal")
        self.job, self.watch, self.stack_every, self.observe = job, watch, stack_every, observe
        self.judge.state.attached = True
        self.liveness = Liveness()
        self.followed: dict[tuple[int | None, str], str] = {}  # (rank, stream) -> the file followed
        self._cpu: dict[int, float] = {}  # rank -> CPU % of its last sample
        self._rss: dict[int, int] = {}
        self._from_output: set[int] = set()  # ranks whose root cause was read from the traceback in their output
        self.blind: dict[int, str] = {}  # rank -> why none of its own output can be read ("output not readable")
        self._asleep: dict[int, float] = {}  # rank -> wall time its threads last ran, as the scheduler dated it
        self._samples: dict[int, int] = {}  # rank -> stack samples read while watching
        self._watch_start = 0.0
        self._bound = 0.0  # --no-ui: when it stops watching without a verdict (monotonic)
        self._deadline: float | None = None  # --no-ui: when the look ends (then extended while no rank moved)
        self._next_sample = self._next_check = self._next_job = self._next_stack = self._next_report = 0.0
        self._end_asked: TearDown | None = None  # the teardown the judge asked for (a rank failed): the job's end
        self._ended_at: float | None = None  # when the judge asked for a teardown
        self._gone_at: float | None = None  # when the judge asked for it; when every rank's process was gone
        self.undecided: list[Seen] = []  # --no-ui: the ranks that showed nothing either way by the bound
        self._written: dict[int, dict | None] = {}  # rank -> bytes its threads had written (attach_sched.written)
        self._wrote: dict[int, int] = {}  # rank -> bytes it wrote while watched
        self._moved: set[int] = set()  # ranks whose sampled frame moved while watched
        self._servers: Future | None = None  # the search for the ranks' debug servers (attach_debug.Servers)
        self._fr_on: set[int] = set()  # ranks that keep Flight Recorder entries (TORCH_FR_BUFFER_SIZE set)
        if job.slurm_job:  # remote ranks' stacks are taken on their node inside the job (RunLoop._collect_stacks);
            # its state followed, and who cancelled it if Slurm did (runners/judge/job_follow.py)
            self._follow_job(SlurmJobWatch(SlurmJob("step", "srun", "", job.slurm_job)))
            self.judge.job.attached(job.slurm_job)
        self.stop_said, self.stop_how = stop_words(job)
        self.stopped_job: str | None = None  # what stop_job did

    # ---- the front end's requests ------------------------------------------------------------------

    def request_stop(self, why: str = "") -> None:
        """Detach: stop watching. The job runs on (Ctrl-C, the dashboard's q, a closed terminal)."""
        self._stop.set()

    def stop_job(self) -> str:
        """Tear the job down through its own launcher (the dashboard's s, after asking): SIGTERM to torchrun's agent
        or the spawning parent, or scancel; never a rank by itself. Returns what was done, in words."""
        import signal
        import subprocess
        how = self.stop_how
        if how is None:
            return self.stop_said
        # the ranks' deaths from now on are this stop ("stopped by ddptui on request"), as in a launched run; dated by
        # the engine's last turn (this runs on the UI thread), which is before the signal: no `now` of its own
        self.judge.teardown_began("stopped")
        ok = True
        if isinstance(how, list):
            self.judge.job_cancelling(now=now())  # Slurm's cancel that follows is ddptui's, asked by the user
            r = subprocess.run(how, capture_output=True, text=True, timeout=30)
            ok = r.returncode == 0
            done = " ".join(how) + ("" if ok else f" failed: {(r.stderr or r.stdout).strip()}")
        else:
            try:
                os.kill(how, signal.SIGTERM)
                done = f"SIGTERM sent to pid {how}"
            except OSError as e:
                ok, done = False, f"SIGTERM to pid {how} failed: {e.strerror or e}"
        if ok:
            self.stopped_job = done
        self._launcher_line(f"ddptui: stop asked: {done}")
        return done

    # ---- the run -----------------------------------------------------------------------------------
    def _start(self) -> RunResult | None:
        tailer = self._tailer = Tailer()
        job, p = self.job, self.profile
        self.record.write_json("profile.json", p.to_json())
        self.record.write_json("attach.json", job_json(job))
        local = all(on_this_host(a.host) for a in job.ranks.values())
        processes = 1 if job.kind == "torchrun" and local else max(1, len(job.ranks))
        soft, _ = open_files.ensure(open_files.needed(len(job.ranks)))
        if (why := open_files.too_few(len(job.ranks), soft)) is not None:  # not refused: a job is watched as it can be
            self._launcher_line(f"ddptui: {why}: some of the ranks' files may go unread")
        self._carry_out(self.judge.begin(self.profile.world_size, processes, now=now()))
        self._emit(ev.RunStarted(str(self.run_dir), p.name, "attach", self.world, None, time.time()))
        self.judge.matcher = HintMatcher()
        argv = " ".join(job.launcher_argv)
        self._launcher_line(f"ddptui: attached to {job.kind} job {job.asked}"
                            + (f" (launcher pid {job.launcher_pid}: {argv})" if job.launcher_pid else "")
                            + f": {len(job.ranks)} of {self.world} ranks found; ddptui signals none of its processes")
        for note in getattr(job, "notes", ()):
            self._launcher_line(f"ddptui: {note}")
        for u in job.unreadable:
            self._launcher_line(f"ddptui: pid {u.pid} of the job cannot be read: {u.reason}")
        for r in range(self.world):
            if r not in job.ranks:
                self._launcher_line(f"ddptui: rank {r} was not found among the job's processes")
        wall = time.time()
        for r, a in sorted(job.ranks.items()):
            self._carry_out(self.judge.rank_found(r, a.pid, a.host, a.node, wall, now=now()))
        self._find_servers()
        self._follow(tailer)
        for r in sorted(job.ranks):
            self._carry_out(self.judge.rank_running(r, self.blind.get(r, ""), now=now()))
        self._date_blind()
        self._flush()
        started = self._watch_start
        self._deadline = None if self.watch else started + self.observe
        self._bound = started + max(self.observe, float(self.profile.stall_after) + EXTEND_MARGIN)
        self._next_sample, self._next_check, self._next_job = 0.0, started + FIRST_CHECK, 0.0
        self._next_stack = started + (self.stack_every if self.watch else float("inf"))
        self._next_report = started + REPORT_EVERY
        return None

    def _follow(self, tailer: Tailer) -> None:
        """Every rank's output from its current end, its last lines first (at the time they were written, so that a
        rank quiet since before the attach is as quiet as it really is); the launcher's own file too."""
        taken: set[str] = set()
        backlog = []
        sources = [(r, s, a.stdout if s == "out" else a.stderr)
                   for r, a in sorted(self.job.ranks.items()) for s in ("out", "err")]
        readers: dict[str, set[int]] = {}  # file -> the ranks writing into it
        for rank, _, o in sources:
            if o.kind == "file" and o.path:
                readers.setdefault(o.path, set()).add(rank)
        for rank, stream, o in sources:
            if o.kind != "file" or not o.path:
                self._launcher_line(f"ddptui: rank {rank} std{stream}: {o.note or o.kind}: not followed")
                self._rank_note(rank, f"ddptui: std{stream} {o.note or o.kind}: not followed")
                continue
            if o.path in taken:  # stdout and stderr into one file, or ranks sharing one: read it once
                continue
            taken.add(o.path)
            owner = rank if len(readers[o.path]) == 1 else None
            backlog += self._open(tailer, o.path, owner, stream)
            if owner is None:
                self._launcher_line(f"ddptui: {ranks_text(readers[o.path])} write into "
                                    f"{o.path}: its lines show as the launcher's, a rank's only where they name it")
        for path in launcher_outputs(self.job.launcher_pid):
            if path not in taken:
                taken.add(path)
                backlog += self._open(tailer, path, None, "err")
        for rank in self.job.ranks:
            if not any((rank, s) in self.followed for s in ("out", "err")):
                shared = any(rank in rs and len(rs) > 1 for rs in readers.values())
                self.blind[rank] = "output shared with other ranks" if shared else "output not readable"
        now_wall, now_mono = time.time(), time.monotonic()
        for rank, stream, lines, mtime in sorted(backlog, key=lambda b: b[3]):
            when = min(mtime, now_wall)
            self.ingest(rank, stream, lines, when, now_mono - (now_wall - when), now())

    def _rank_note(self, rank: int, text: str) -> None:
        """A line of ddptui's in the rank's own pane and log, past the judge: it is no output of the rank's."""
        wall = time.time()
        self.record.lines(rank, "err", wall, [text])
        self._emit(ev.LogLines(rank, "err", wall, time.monotonic(), (text,)))

    def _open(self, tailer: Tailer, path: str, rank: int | None, stream: str) -> list:
        try:
            lines, offset = last_lines(path, BACKLOG_LINES)
            mtime = os.stat(path).st_mtime
        except OSError as e:
            self._launcher_line(f"ddptui: {path}: cannot read: {e.strerror or e}")
            return []
        tailer.add(path, rank, stream, start=offset)
        self.followed[(rank, stream)] = path
        return [(rank, stream, lines, mtime)] if lines else []

    def _poll(self) -> Over | None:
        """One turn of the watch; `Over(None)` when it detaches (or, --no-ui, stops watching) with no end of the job."""
        mono = time.monotonic()
        self._read_any = bool(self._read_lines(self.tailer))
        if self.slurm is not None:
            self.slurm.ask_canceller()
            if mono >= self._next_job:  # the job's state; Slurm's own word when it cancels the job
                self._next_job = mono + slurm_state.poll_interval(self.slurm.poll())
        self._check_rank_pids()
        self._take_servers()
        if mono >= self._next_sample:
            self._sample_resources()
            self._next_sample = mono + 1.0
        if mono >= self._next_stack:
            self._sample_stacks()
            self._next_stack = time.monotonic() + self.stack_every
        if mono >= self._next_check:
            self._next_check = mono + 0.25
            self._end_asked = self._carry_out(self._check()) or self._end_asked
        if self._dump.is_set():
            self._dump.clear()
            self._carry_out(self.judge.dump_requested(now=now()))
        if self.watch and mono >= self._next_report:
            self._next_report = mono + REPORT_EVERY
            self._report_liveness()
        end = self._end_asked
        if not any(t.alive for t in self.tracks.values()):
            self._launcher_line("ddptui: every rank of the job has ended")
            return Over(end)
        # A rank reaped by its launcher before ddptui read its status from the zombie died with no code: it is
        # not "alive" only once a code comes (torchrun's table), and a launcher stopped by SIGTERM prints none.
        if self._every_rank_gone():
            self._gone_at = self._gone_at or mono
            if mono - self._gone_at > CODES_WAIT:
                self._launcher_line("ddptui: every rank of the job has ended (exit codes not known for "
                                    + ", ".join(f"rank {r}" for r, t in sorted(self.tracks.items()) if t.alive)
                                    + ": their launcher reaped them and printed none)")
                return Over(end)
        if end is not None:  # a rank failed and the grace passed: wait (bounded) for the launcher to end the rest
            self._ended_at = self._ended_at or mono
            if mono - self._ended_at > ENDED_WAIT:
                return Over(end)
        if self._stop.is_set():
            self._launcher_line("ddptui: detaching; the job runs on")
            return Over(None)
        if not self.watch and self.judge.stall_info is not None:
            return Over(None)  # stalled: the verdict came with the stacks
        if self._deadline is not None and mono >= self._deadline:
            self._sample_stacks()  # the newest sample: whether each rank's frame moved since the one before
            end = self._end_asked = self._carry_out(self._check()) or end
            if self.judge.stall_info is not None or not self._watch_on(mono):
                return Over(end)
            self._deadline = min(self._bound, time.monotonic() + EXTEND_EVERY)
        return None

    def _close(self) -> None:
        """Nothing to tear down: ddptui started none of the job's processes."""

    def _stderr_path(self, rank: int) -> str | None:
        return self.followed.get((rank, "err"))

    def _recorded_errors(self) -> dict[int, dict]:
        """torchrun's error files, and for the other dead ranks the last traceback in their own stderr (an attached
        rank has no hooks to report its exception): the crash verdict's root cause reads the same as a launched run's."""
        from ..evidence.attach_evidence import traceback_report
        found = super()._recorded_errors()
        for r, t in self.tracks.items():
            if r not in found and t.exc is None and t.returncode not in (None, 0):
                rep = traceback_report(t.err_tail)
                if rep is not None:
                    found[r] = rep
                    self._from_output.add(r)
        return found

    def _sample_resources(self, emit: bool = True) -> None:
        super()._sample_resources(emit)
        for e in self.batch:
            if isinstance(e, ev.Resources):
                self._cpu.update(e.cpu)
                self._rss.update(e.rss)
        if emit:
            self._sample_writes()

    def _sample_writes(self) -> None:
        """Bytes each local rank's threads wrote since the last look (its lines wherever they go, its collectives'
        traffic; torch's debug server answering ddptui left out): a rank that writes is alive to the stall rule, as
        one whose lines ddptui reads is, even when nobody can read them."""
        from . import sched as attach_sched
        mono, wall = time.monotonic(), time.time()
        for r, t in sorted(self.tracks.items()):
            if not t.alive or not t.pid or not on_this_host(t.host):
                continue
            written = attach_sched.written(t.pid)
            n = attach_sched.wrote_since(self._written.get(r), written)
            self._written[r] = written
            if n > 0:
                self._wrote[r] = self._wrote.get(r, 0) + n
                self.judge.stack_moved(r, mono, wall)

    def _sample_stacks(self) -> dict:
        """One py-spy pass over the live local ranks (a ptrace read, a few ms of pause each): a rank whose innermost
        user frame changed is alive to the stall rule, whatever its output and CPU say. Returns rank -> StackResult."""
        from ..edge import stacks
        targets = [stacks.Target(r, pid, None, None) for r, pid in self.judge.stack_targets()
                   if on_this_host(self.tracks[r].host)]
        if not targets:
            return {}
        results = stacks.collect(targets, method="py-spy", pyspy=self.pyspy, workers=False)
        mono, wall = time.monotonic(), time.time()
        for rank, res in results.items():
            key = motion_key(res)
            if key is not None:
                self._samples[rank] = self._samples.get(rank, 0) + 1
            if self.liveness.observe(rank, mono, key, frame_key(res)):
                self._moved.add(rank)
                self.judge.stack_moved(rank, mono, wall)
        return results

    def _date_blind(self) -> None:
        """The watch begins: every rank's first stack sample. A rank with no output of its own to read is dated by the
        kernel's scheduler, read before that sample pauses it: when its Python threads last ran (their ids from the
        sample). A hang minutes old is then minutes old to the stall rule, as a file's last write would make it."""
        from . import sched as attach_sched
        here = {r: t.pid for r, t in self.tracks.items() if r in self.blind and t.pid and on_this_host(t.host)}
        readings = {r: attach_sched.read(pid) for r, pid in here.items()}
        results = self._sample_stacks()
        self._watch_start = time.monotonic()
        now_mono, now_wall = time.monotonic(), time.time()
        for r, reading in sorted(readings.items()):
            res = results.get(r)
            tids = {th.tid for th in res.threads if th.tid} if res is not None and res.method == "py-spy" else set()
            since = attach_sched.quiet_since(reading, tids, now_mono)
            if since is None or now_mono - since < 1.0:
                continue
            wall = now_wall - (now_mono - since)
            self._asleep[r] = wall
            said = time.strftime("%H:%M:%S", time.localtime(wall))
            self.judge.quiet_since(r, since, wall, f"{self.blind[r]}: its Python threads have not run since {said}, "
                                                   "the kernel's scheduler says")
            self._launcher_line(f"ddptui: rank {r} ({self.blind[r]}): its Python threads have not run since {said} "
                                f"({now_mono - since:.0f} s ago, read from the kernel's scheduler before any stack "
                                "sample)")

    def _find_servers(self) -> None:
        """Look for the ranks' own debug servers in the background (a store read imports torch: seconds)."""
        import concurrent.futures

        from . import debug as attach_debug
        local = {r: a.pid for r, a in self.job.ranks.items() if on_this_host(a.host)}
        if not local:
            return
        self._fr_on = {r for r, pid in local.items() if attach_debug.fr_on(attach_debug.environ(pid))}
        pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="ddptui-debug-servers")
        self._servers = pool.submit(attach_debug.find, local, self.world, {this_host(), "localhost"})
        pool.shutdown(wait=False)

    def _take_servers(self, wait: float = 0.0) -> None:
        """The debug servers found, once the search is done (`wait`: seconds to wait for it)."""
        import concurrent.futures
        if self._servers is None:
            return
        try:
            found = self._servers.result(timeout=wait)
        except concurrent.futures.TimeoutError:
            return
        except Exception as e:  # noqa: BLE001 - a failed search leaves py-spy, as before
            self._servers = None
            self._launcher_line(f"ddptui: the ranks' debug servers could not be looked for: {type(e).__name__}: {e}")
            return
        self._servers = None
        for line in found.said:
            self._launcher_line(f"ddptui: {line}")
        for r, addr in sorted(found.addresses.items()):
            self._carry_out(self.judge.debug_server_found(r, addr, time.time(), now=now()))

    def _collect_stacks(self, req):
        from .debug import STORE_TIMEOUT
        self._take_servers(wait=STORE_TIMEOUT)  # a stall's stacks and records: with the debug servers when there are
        return super()._collect_stacks(req)

    def _fr_sockets(self, targets) -> tuple[dict[int, str], str]:
        """Only ranks that keep Flight Recorder entries: an empty dump from one that keeps none is no evidence."""
        socks = {t.rank: t.debug_sock for t in targets if t.debug_sock and t.rank in self._fr_on}
        return socks, ("no Flight Recorder in the rank: it runs no torch debug server "
                       "(torch.distributed.debug.start_debug_server(), TORCH_WORKER_SERVER_SOCKET), or keeps no "
                       "entries (TORCH_FR_BUFFER_SIZE not set above 0)")

    def _seen(self) -> list[Seen]:
        """Every live rank as the watch saw it since it began."""
        out = []
        for r, t in sorted(self.tracks.items()):
            if not t.alive:
                continue
            cpu = self._cpu.get(r)
            asleep = self._asleep.get(r) if t.quiet_by else None  # dated, and nothing since
            how = ", ".join(x for x in (f"it wrote {_size(self._wrote[r])}" if self._wrote.get(r) else "",
                                        "its frame moved" if r in self._moved else "") if x)
            out.append(Seen(r, r in self.blind, t.last_progress >= self._watch_start, self._samples.get(r, 0),
                            self.liveness.frame(r), None if cpu is None else cpu / 100.0, asleep,
                            how or ("it wrote lines" if t.last_progress >= self._watch_start else "")))
        return out

    def _watch_on(self, mono: float) -> bool:
        """--no-ui at the end of a look: every rank showed progress (a line, a frame that moved): done. Otherwise its
        silence is no evidence of health: watch on, saying so, until the bound; there, what was seen is said. A stall
        held off because a quiet rank burns CPU moves the bound to the hold's end (BUSY_HOLD x the limit, x the
        machine's overload when it is over its cores: the hold's own bound, runners/evidence/stall.py)."""
        left = waiting(self._seen())
        if not left:
            self.undecided = []
            return False
        held = self.judge.held
        if mono >= self._bound and held is not None:
            hold_end = EXTEND_MARGIN + min(mono + held.until - held.trigger.quiet, self._watch_start + held.until)
            if hold_end > self._bound + 1.0:
                self._launcher_line(f"ddptui: {held.reason}: watching until the hold ends, up to "
                                    f"{hold_end - mono:.0f} s more")
                self._bound = hold_end
        if mono >= self._bound:
            self.undecided = left
            return False
        if not self.undecided:  # said once, when the watch is extended
            self._launcher_line(f"ddptui: no verdict yet after {mono - self._watch_start:.0f} s: "
                                + "; ".join(seen_words(s) for s in left)
                                + f". Watching up to {self._bound - mono:.0f} s more (until each rank moves, or the "
                                  f"stall "
                                  f"limit --stall-after {float(self.profile.stall_after):g} s is reached), a stack "
                                  f"sample every {EXTEND_EVERY:g} s")
        self.undecided = left
        return True

    def _report_liveness(self) -> None:
        from ..evidence.stall import BLOCKED_CPU
        mono = time.monotonic()
        limit = float(self.profile.stall_after)
        words = []
        for r, t in sorted(self.tracks.items()):
            if not t.alive:
                continue
            quiet = mono - t.last_progress
            cpu = self._cpu.get(r)
            state = decide(quiet, self.liveness.same_for(r, mono), None if cpu is None else cpu / 100.0, limit,
                           BLOCKED_CPU)
            words.append(liveness_words(r, state, quiet, cpu, self._rss.get(r), self.liveness.frame(r)))
        if words:
            self._launcher_line("ddptui: " + "; ".join(words))

    # ---- the end -----------------------------------------------------------------------------------
    def _every_rank_gone(self) -> bool:
        """Every rank's process ended, with or without a known exit code."""
        return all(not t.alive or t.exit_wall is not None for t in self.tracks.values())

    def _end(self, end: TearDown | None) -> RunResult:
        for rank, stream, lines in self.tailer.poll():  # what the ranks wrote since the last turn's read
            self.ingest(rank, stream, lines, time.time(), time.monotonic(), now())
        self._flush()
        gone = self._every_rank_gone()
        if gone and self.stopped_job is not None and end is None:  # the user's stop ended it: no crash of its own
            return self._conclude(TearDown("stopped", EXIT_FAILED))
        if gone or end is not None:  # the job ended (or failed) while attached: the crash verdict, as a launched run
            if self.slurm is not None:
                self.slurm.end_state()  # how Slurm ended it (cancelled? by whom?), bounded
            return self._conclude(end)
        st = self.judge.stall_info
        if st is not None:
            return self._finish("stalled", EXIT_STALLED)
        status = "detached"
        if not self.watch:
            seen = self._seen()
            if self.undecided:  # the bound passed with a rank that showed neither progress nor a stall
                status = "undecided"
                self._launcher_line(f"ddptui: no verdict after {time.monotonic() - self._watch_start:.0f} s: "
                                    + "; ".join(seen_words(s) for s in self.undecided)
                                    + ". Neither progress nor a stall was shown: this is no all-clear (`ddptui attach "
                                      f"{self.job.asked} --watch` keeps watching)")
            elif seen:
                self._launcher_line("ddptui: every rank showed progress while watched ("
                                    + ", ".join(f"rank {s.rank}" for s in seen) + "): no stall")
            for s in seen:  # what each rank was doing, for the summary (no rank is "starting" after minutes)
                doing = seen_words(s).split(": ", 1)[1]
                self.tracks[s.rank].outcome = f"{self.blind[s.rank]}; {doing}" if s.blind else doing
            self._carry_out(self.judge.dump_requested(now=now()))  # the stacks of every rank now, no verdict: nothing is stuck
        return self._finish(status, EXIT_OK)

    def _finish(self, status: str, exit_code: int, preflight: Sequence = ()) -> RunResult:
        if self.judge.crash is not None:
            self._say_sources()
        return super()._finish(status, exit_code, preflight)

    def _say_sources(self) -> None:
        """Where a dead rank's exit status and root cause came from: a non-child's status cannot be waited on."""
        crash = self.judge.crash
        for r, t in sorted(self.tracks.items()):
            if t.returncode in (None, 0) and not (crash and crash.root_rank == r):
                continue
            d = self._deaths.seen.get(t.pid)
            if d is not None and getattr(d, "returncode", None) is not None:
                code = f"read from /proc/{t.pid}/stat while it was a zombie, before its launcher reaped it"
            elif t.returncode is not None:
                code = "from its launcher's own output (torchrun's exit code table)"
            else:
                code = "unknown: it is not ddptui's child, and neither /proc nor its launcher's output gave it"
            cause = []
            if r in self._from_output and (r, "err") in self.followed:
                cause.append(f"the traceback in its stderr ({self.followed[(r, 'err')]})")
            elif (r, "err") in self.followed:
                cause.append(f"its stderr ({self.followed[(r, 'err')]})")
            if error_files.recorded_error(self.judge.launcher_log.error_file(r)):
                cause.append("torchrun's error file")
            if (None, "err") in self.followed:
                cause.append(f"torchrun's output ({self.followed[(None, 'err')]})")
            self._launcher_line(f"ddptui: rank {r}: exit status {code}; evidence: "
                                + (", ".join(cause) or "none readable"))


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n / 1e3:.0f} KB" if n >= 1e3 else f"{n} bytes"
