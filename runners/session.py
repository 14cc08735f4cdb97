"""One run from profile to verdict: plan, spawn, read, monitor, diagnose, record, and emit to a front end."""
from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path
from typing import Callable

import psutil

from . import events as ev
from . import oom, parse, procs, replica, xla_evidence
from .crash import RankEvidence, ended_by_our_stop, stopped_words
from .crash import decide as decide_crash
from .deathwatch import DeathWatch
from .launcher_log import TorchrunLog
from . import stall as stall_rule
from .rank_track import RankTrack, find_slow
from .steptime import slowed_down, slowed_together, take_report
from .record import RunRecord, new_run_dir
from .tail import Tailer

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_STALLED, EXIT_REPLICAS = 0, 1, 2, 3, 4
CRASH_GRACE = 5.0  # seconds survivors get to fail on their own after a rank died, before we tear them down
TEARDOWN_DEADLINE = 5.0
# Seconds between loop turns unless there is a backlog to read. Every wake-up takes a core from a rank for
# a moment, and ranks in lock-step all wait for it: on 2 cores, 20 wake-ups a second cost a 2-rank run ~4 %
# of its wall time, 4 a second nothing measurable. After a quiet turn the first new output or a process's
# exit wakes the loop at once; the dashboard redraws at the same period.
IDLE_POLL = 0.25
DISCOVER_EARLY, DISCOVER_FOUND = 0.2, 2.0  # how often to look for launcher-created log files


def free_port(addr: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((addr, 0))
        return s.getsockname()[1]


def make_plan(profile, run_dir: Path, port: int, dashboard_pid: int | None = None):
    if profile.runner == "torchrun":
        from .torchrun import plan
    elif profile.runner == "env":
        from .env_runner import plan
    elif profile.runner == "xla":
        from .xla import plan
    elif profile.runner == "mirage":
        from .mirage import plan
    else:
        raise ValueError(f"unknown runner {profile.runner!r}")
    return plan(profile, run_dir, port, dashboard_pid)


class Session:
    """Runs one profile. `run()` blocks (call it from a thread for a UI); `emit(list[Event])` once per turn."""

    def __init__(self, profile, runs_root: Path | str = "runs", emit: Callable[[list], None] | None = None,
                 pyspy: str | None = None, stack_method: str = "auto") -> None:
        self.profile = profile
        self.emit_fn = emit or (lambda batch: None)
        self.run_dir = new_run_dir(Path(runs_root), profile.name)
        self.record = RunRecord(self.run_dir)
        self.pyspy, self.stack_method = pyspy, stack_method
        self.world = profile.world_size
        self.tracks: dict[int, RankTrack] = {}
        self.procs: list[procs.Proc] = []
        self.batch: list = []
        self._stop = threading.Event()
        self._dump = threading.Event()
        self._kill_now = threading.Event()  # asked again while stopping: SIGKILL without the TERM deadline
        self.survivors: list[str] = []  # processes that outlived SIGKILL at teardown, described
        self.status: str | None = None
        self.hints: list[dict] = []
        self.stall_info: dict | None = None
        self.hang: ev.HangVerdict | None = None
        self.crash: ev.CrashVerdict | None = None
        self.stack_collections: list[str] = []
        self._matcher = None
        self._deaths = DeathWatch()  # ranks a launcher spawned: when each really died
        self._launcher_log = TorchrunLog()  # what torchrun says about its ranks
        self._oom_counters: dict[int, oom.CgroupCounter] = {}  # rank pid -> its memory cgroup's OOM count
        self._died_at: dict[int, float] = {}  # pid -> wall time the watcher saw it die
        self._first_failure: float | None = None
        self.slow_info: dict | None = None  # the slow ranks named, once per run
        self._slow_samples: list[float] = []  # when stacks were sampled to find the slow rank
        self._held_said = False  # the current stall hold (busy ranks past their limit) was said
        self._cpu_pid: dict[int, int] = {}  # rank -> pid its CPU history belongs to
        self._tearing_down = False
        self._stop_at: float | None = None  # wall time ddptui began signalling the run's processes (its teardown)
        self._stop_why: str | None = None  # the run's status then: "stalled", "timeout", "stopped", "failed"
        self._pending_progress: dict[int, tuple[float, str]] = {}  # rank -> (wall, source), one event per turn
        self._started_mono = time.monotonic()
        self.plan = None
        self.first_digests: dict[int, tuple[list, str]] = {}  # rank -> (digests before its first update, source)
        # XLA's rendezvous warnings in the worker's log: collective evidence (runners/xla_evidence.py)
        self._xla_rdv = xla_evidence.Rendezvous() if profile.runner == "xla" else None

    # ---- thread-safe requests from a front end ------------------------------------------------------
    def request_stop(self) -> None:
        self._stop.set()

    def request_dump(self) -> None:
        self._dump.set()

    def request_kill(self) -> None:
        """Stop, and SIGKILL every process at once instead of waiting out the TERM deadline."""
        self._stop.set()
        self._kill_now.set()

    # ---- emitting ------------------------------------------------------------------------------------
    def _emit(self, e) -> None:
        self.batch.append(e)
        if not isinstance(e, ev.LogLines):
            self.record.event(e)

    def _flush(self) -> None:
        if self._pending_progress:  # progress coalesced to one event per rank per turn: the UI samples it
            for rank, (wall, source) in sorted(self._pending_progress.items()):
                t = self.tracks[rank]
                self._emit(ev.Progress(rank, t.step, t.loss, wall, source, t.take_new_losses()))
            self._pending_progress.clear()
        if self.batch:
            batch, self.batch = self.batch, []
            self.record.flush()
            try:
                self.emit_fn(batch)
            except Exception:  # a front end's bug must not kill the run or lose its record
                import traceback
                traceback.print_exc()

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
                self._deaths.close()
                self.record.close()

    def _teardown(self) -> dict:
        """Tear every process down (bounded), and say which ones outlived SIGKILL."""
        self._tearing_down = True
        if self._stop_at is None:
            self._stop_at = time.time()
        td = procs.teardown(self.procs, self._rank_pids(), TEARDOWN_DEADLINE, hurry=self._kill_now.is_set)
        who = {pr.pid: pr.spec.name for pr in self.procs}
        who.update({t.pid: f"rank {t.rank}" for t in self.tracks.values() if t.pid})
        for s in td["survivors"]:
            line = procs.describe_survivor(s["pid"], s["state"], who.get(s["pid"]))
            self.survivors.append(line)
            self._launcher_line(f"ddptui: {line}")
        return td

    def _run(self) -> int:
        p = self.profile
        self.record.write_json("profile.json", p.to_json())
        port = free_port(p.master_addr) if p.master_port == "auto" else int(p.master_port)
        self.plan = make_plan(p, self.run_dir, port, os.getpid())
        self.record.write_json("plan.json", self.plan.to_json())
        self.world = self.plan.world_size
        now_m = time.monotonic()
        self.tracks = {r: RankTrack(r, now_m, last_progress=now_m, steps_total=p.steps) for r in range(self.world)}
        self._emit(ev.RunStarted(str(self.run_dir), p.name, p.runner, self.world, p.steps, time.time()))
        problems = self._preflight()
        if problems:
            return self._finish("preflight failed", EXIT_USAGE)
        self._matcher = _hint_matcher()
        procs.become_subreaper()
        tailer = Tailer()
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
            if spec.stdout_rank is not None:
                self.tracks[spec.stdout_rank].pid = proc.pid
        for src in self.plan.sources:
            tailer.add(src.path, src.rank, src.stream)
        self._flush()
        try:
            return self._loop(tailer)
        finally:
            tailer.close()

    def _loop(self, tailer: Tailer) -> int:
        p = self.profile
        next_discover = next_sample = next_check = 0.0
        exit_code, status = None, None
        while True:
            mono = time.monotonic()
            if mono >= next_discover:
                tailer.discover()
                # quickly until every file a launcher will create exists, then only for new ones (a restart's)
                next_discover = mono + (DISCOVER_FOUND if tailer.all_found() else DISCOVER_EARLY)
            got = tailer.poll()
            wall = time.time()
            for rank, stream, lines in got:
                self._lines(rank, stream, lines, wall, mono)
            for proc in self.procs:
                if proc.returncode is None and proc.poll() is not None:
                    self._proc_exited(proc)
            if mono >= next_sample:
                self._sample_resources()
                next_sample = mono + 1.0
            if mono >= next_check:
                next_check = mono + 0.25
                self._check_rank_pids()
                outcome = self._check(mono)
                if outcome:
                    status, exit_code = outcome
            if self._dump.is_set():
                self._dump.clear()
                self._dump_on_request()
            if self._stop.is_set() and status is None:
                status, exit_code = "stopped", EXIT_FAILED
                self._launcher_line("ddptui: stop requested, tearing every rank down")
            if status is not None or all(pr.returncode is not None for pr in self.procs):
                break
            self._flush()
            if not got:  # quiet: the first new output (inotify) or exit (pidfd) wakes us at once
                procs.sleep_until_exit(self.procs, IDLE_POLL, also=tailer.watch.fd)
            elif not tailer.backlog:  # a trickle (progress lines, logs): read it in batches, a few turns a second
                procs.sleep_until_exit(self.procs, IDLE_POLL)
        if any(pr.returncode is None for pr in self.procs):
            self._stop_why = status
            td = self._teardown()
            self._launcher_line(f"ddptui: teardown took {td['seconds']:.2f} s"
                                + (" (SIGKILL needed)" if td["killed"] else ""))
            for proc in self.procs:
                if proc.returncode is not None and proc.exited:
                    self._proc_exited(proc, torn_down=True)
        for rank, stream, lines in tailer.drain():
            self._lines(rank, stream, lines, time.time(), time.monotonic())
            self._flush()  # one chunk at a time: what is left after the ranks exit can be large
        return self._conclude(status, exit_code)

    # ---- reading lines -------------------------------------------------------------------------------
    def _launcher_line(self, text: str) -> None:
        wall = time.time()
        self.record.lines(None, "err", wall, [text])
        self._emit(ev.LogLines(None, "err", wall, time.monotonic(), (text,)))

    def _lines(self, rank: int | None, stream: str, lines: list[str], wall: float, mono: float) -> None:
        groups: dict[int | None, list[str]] = {}
        blob = getattr(lines, "text", None)
        if blob is None:
            blob = "\n".join(lines)
        tagged = rank is None or (parse.has_marker(blob) and any(ln.startswith(parse.TAG) for ln in lines))
        if tagged:
            split = parse.split_prefix if rank is None else parse.untag
            for ln in lines:
                r, text = split(ln)
                r = rank if r is None else r
                if r is None:
                    shown_now = self._torchrun_summary(text)  # a traceback may be held back, then folded
                    if shown_now:
                        groups.setdefault(None, []).extend(shown_now)
                    continue
                groups.setdefault(r if r in self.tracks else None, []).append(text)
        else:
            groups[rank] = lines
        for r, group in groups.items():
            shown = self._interpret(r, stream, group, wall, mono, blob if group is lines else None)
            if shown:
                self.record.lines(r, stream, wall, shown)
                self._emit(ev.LogLines(r, stream, wall, mono, tuple(shown)))

    def _interpret(self, rank: int | None, stream: str, lines: list[str], wall: float, mono: float,
                   blob: str | None = None) -> list[str]:
        """Reports are taken out of the shown log; steps, losses and hints are read from the rest."""
        t = self.tracks.get(rank) if rank is not None else None
        shown = lines
        if blob is None:
            blob = "\n".join(lines)  # one C-speed pass answers "is there anything to look at?" for the batch
        if parse.has_marker(blob) and parse.REPORT in blob:
            shown = []
            for ln in lines:
                rep = parse.report(ln)
                if rep is None and parse.REPORT in ln:
                    ln, rep = parse.unglue_report(ln)
                    if rep is not None and ln:
                        shown.append(ln)
                if rep is None:
                    shown.append(ln)
                else:
                    self._report(rep, rank, wall, mono)
            blob = "\n".join(shown)
        if t is not None:
            t.saw_output(mono, wall)
            t.tail.extend(shown[-40:])
            if stream == "err":
                t.err_tail.extend(shown[-80:])
            if t.status == "starting":
                self._set_status(t, "running", "", wall)
            if parse.may_have_step_or_loss(blob):
                news = False
                for ln in shown:
                    step, loss, summary = parse.step_loss(ln)
                    if summary:
                        t.summary_loss = summary
                    elif step is not None or loss is not None:
                        news = t.saw_step(step, loss, mono, wall) or news
                if news:  # one progress event per batch, not per line: the UI samples, the record keeps every line
                    self._pending_progress[rank] = (wall, "parsed")
        if self._matcher is not None and shown:
            for ln, hint in self._matcher.feed_many(rank, shown, blob):
                self._hint(hint, rank, ln, wall)
        if rank is None and self._xla_rdv is not None and shown:
            self._xla_lines(shown, blob, wall)
        return shown

    def _report(self, rep: dict, line_rank: int | None, wall: float, mono: float) -> None:
        r = rep.get("r")
        rank = r if isinstance(r, int) and r in self.tracks else line_rank
        t = self.tracks.get(rank) if rank is not None else None
        if t is None:
            return
        t.ran = True  # its own report (XLA thread replicas share one pid: each says hello for itself)
        kind = rep.get("k")
        if kind == "hello":
            if isinstance(rep.get("pid"), int):
                t.pid = rep["pid"]
            t.host = str(rep.get("host", ""))
            self._emit(ev.RankHello(rank, t.pid or 0, t.host, int(rep.get("world") or self.world), wall))
        elif kind in ("step", "loss"):
            pairs = rep.get("steps")  # a rank's batched [[step, loss], ...] since its last report
            if not isinstance(pairs, list):
                pairs = [(rep.get("step"), rep.get("loss"))]
            news, steps = False, []
            for pair in pairs:
                step, loss = pair if isinstance(pair, (list, tuple)) and len(pair) == 2 else (None, None)
                step = step if isinstance(step, int) else None
                loss = loss if isinstance(loss, (int, float)) else None
                news = t.saw_step(step, loss, mono, wall, reported=True) or news
                if step is not None:
                    steps.append(step)
            take_report(t.clock, rep, steps, mono)  # step time by the rank's own clock (`at`, `dt`)
            if news:
                self._pending_progress[rank] = (wall, "hook" if kind == "step" else "report")
        elif kind == "first_digest":
            self.first_digests.setdefault(rank, (rep.get("params") or [], str(rep.get("source") or "")))
        elif kind == "digest":
            if t.digests is None or rep.get("source") == "explicit":
                t.digests = rep.get("params") or []
        elif kind == "verdict":
            t.verdict = {"ok": bool(rep.get("ok")), "text": str(rep.get("text", ""))}
        elif kind == "exc":
            t.exc = rep
            if t.first_failure_wall is None:
                t.first_failure_wall = wall

    def _torchrun_summary(self, text: str) -> list[str]:
        """torchrun's own lines are evidence about ranks we did not start ourselves: whom it stopped and when, exit
        codes, its Root Cause. Returns the lines to show (its SignalException traceback folded into one)."""
        log = self._launcher_log
        shown = log.feed(text, we_signalled=self._tearing_down)
        if log.changed:
            log.changed = False
            for rank, code in log.exit_codes(self._pid_ranks(), self.world if len(self.plan.procs) == 1 else None):
                t = self.tracks.get(rank)
                if t is not None and t.returncode is None:
                    t.returncode, t.signal = code, procs.signal_name(code)
                    if t.exit_wall is not None:  # its death was seen before its exit code was known
                        self._rank_ended(t, False)
        return shown

    def _pid_ranks(self) -> dict[int, int]:
        return {t.pid: t.rank for t in self.tracks.values() if t.pid}

    def _hint(self, hint, rank, line: str, wall: float) -> None:
        p = self.profile
        if hint.code == "xla-rendezvous-deadlock" and p.runner == "xla" and not p.xla.async_client:
            return  # the recipe is already applied: the warning comes from a real hang, which the verdict names
        self.hints.append({"code": hint.code, "title": hint.title, "explanation": hint.explanation,
                           "fix": hint.fix, "rank": rank, "line": line[:500]})
        self._emit(ev.HintRaised(hint.code, hint.title, hint.explanation, hint.fix, rank, line[:500], wall))

    # ---- process and rank state ----------------------------------------------------------------------
    def _set_status(self, t: RankTrack, status: str, detail: str, wall: float | None = None) -> None:
        if t.status != status or detail:
            t.status = status
            self._emit(ev.RankState(t.rank, status, detail, wall or time.time()))

    def _proc_exited(self, proc: procs.Proc, torn_down: bool = False) -> None:
        rc = proc.returncode
        sig = procs.signal_name(rc)
        self._emit(ev.ProcessExited(proc.spec.name, proc.spec.ranks, rc, sig, proc.exited or time.time()))
        launcher = proc.spec.stdout_rank is None
        self._check_rank_pids()  # the deaths the watcher saw first, with their times (and a launcher's ranks' codes)
        for r in proc.spec.ranks:
            t = self.tracks[r]
            if t.exit_wall is not None and not launcher:
                continue
            if launcher and t.returncode is None:
                # the launcher exits 0 only if every rank did; otherwise ranks without a failure entry were stopped by it
                t.returncode = 0 if rc == 0 else None
            elif not launcher:
                t.returncode, t.signal = rc, sig
                t.exit_wall = self._died_at.get(proc.pid)  # when it died, not the loop turn that noticed it
            t.exit_wall = t.exit_wall or proc.exited
            self._rank_ended(t, torn_down or (launcher and t.returncode is None))

    def _rank_ended(self, t: RankTrack, stopped: bool) -> None:
        """Its status when it ended, from what is known now; the crash verdict settles it at the end."""
        if t.status in ("exited", "failed", "killed"):
            return
        rc = t.returncode
        own_error = t.first_failure_wall is not None or t.exc is not None
        by_launcher = self._launcher_log.pid_stopped(t.pid)
        stop_signal = t.signal in ("SIGTERM", "SIGINT") and self._first_failure is not None
        failed = [x for x in self.tracks.values() if x.status == "failed"]
        first = min(failed, key=lambda x: x.first_failure_wall or time.time()) if failed else None
        if rc == 0:
            t.outcome = "exited 0"
            self._set_status(t, "exited", "exit 0")
        elif self._ended_by_our_stop(t, stopped):  # ddptui's own signal (or a launcher passing it on): not a failure
            words = stopped_words(self._stop_why, first.rank if first else None)
            t.outcome = words if t.ran else f"never started ({words})"
            self._set_status(t, "killed", t.outcome)
        elif rc is not None and rc < 0 and t.completed and not stopped:
            t.outcome = f"completed, then died at exit ({t.signal})"
            self._set_status(t, "exited", t.outcome)
            self._hint_exit(t)
        elif not own_error and (stopped or by_launcher or stop_signal):
            if not t.ran:  # not a line, not a report (the hello either): its program never ran
                t.outcome = "never started"
            elif self._tearing_down and stopped:
                t.outcome = f"torn down by ddptui after rank {first.rank} failed" if first else "stopped by ddptui"
            else:
                t.outcome = f"stopped by the launcher after rank {first.rank} failed" if first else \
                    "stopped by the launcher"
            self._set_status(t, "killed", t.outcome)
        else:
            what = t.signal or (f"exit {rc}" if rc is not None else "exit ?")
            t.outcome = f"failed ({what})"
            t.first_failure_wall = min(t.first_failure_wall or t.exit_wall or time.time(), t.exit_wall or time.time())
            if self._first_failure is None:
                self._first_failure = time.monotonic()
            self._set_status(t, "failed", what)
            self._hint_exit(t)

    def _ended_by_our_stop(self, t: RankTrack, stopped: bool) -> bool:
        """It died after ddptui began tearing the run down, with no error of its own before (crash.ended_by_our_stop);
        with no death time known, `stopped` during the teardown says so."""
        if t.exit_wall is None:
            return stopped and self._tearing_down
        return ended_by_our_stop(RankEvidence(t.rank, t.returncode, died_at=t.exit_wall,
                                              error_at=t.first_failure_wall), self._stop_at)

    def _hint_exit(self, t: RankTrack) -> None:
        if self._matcher is not None and t.returncode is not None:
            p = self.profile
            hint = self._matcher.for_exit(t.rank, t.returncode, completed=t.completed,
                                          in_process=p.runner == "mirage" and p.mirage.in_process, env=p.env)
            if hint is not None:
                self._hint(hint, t.rank, t.outcome, time.time())

    def _rank_pids(self) -> set[int]:
        return {t.pid for t in self.tracks.values() if t.pid}

    def _check_rank_pids(self) -> None:
        """Ranks under a launcher: when each really died (its pidfd, watched by a thread) and its exit status
        (read from the zombie before the launcher reaps it; else torchrun's own lines say it later)."""
        own = {pr.pid for pr in self.procs}
        alive: dict[int, list[RankTrack]] = {}  # several ranks share a pid when they are threads (XLA on CPU)
        for t in self.tracks.values():
            if not t.pid:
                continue
            if t.pid not in self._oom_counters:
                self._oom_counters[t.pid] = oom.CgroupCounter(t.pid)
            if t.exit_wall is None:
                self._deaths.watch(t.pid)  # our own rank processes too: the moment they died, not the turn
                if t.pid not in own:
                    alive.setdefault(t.pid, []).append(t)
        for d in sorted(self._deaths.deaths(), key=lambda d: d.wall):  # in the order they really died
            self._died_at.setdefault(d.pid, d.wall)
            for t in alive.pop(d.pid, []):
                if t.returncode is None and d.returncode is not None:
                    t.returncode, t.signal = d.returncode, procs.signal_name(d.returncode)
                self._rank_died(t, d.wall)
        for pid, ts in alive.items():
            if not self._deaths.watching(pid) and not psutil.pid_exists(pid):  # no pidfd here: the slow way
                for t in ts:
                    self._rank_died(t, time.time())

    def _rank_died(self, t: RankTrack, wall: float) -> None:
        t.exit_wall = wall
        if t.returncode is not None:
            self._rank_ended(t, False)
        elif not t.completed and self._first_failure is None and t.exc is not None:
            self._first_failure = time.monotonic()

    def _sample_resources(self, emit: bool = True) -> None:
        """CPU % and RSS of every live rank; each rank's CPU seconds are kept for the stall rule's busy test.

        A rank whose process is not known yet (a launcher still starting it) is judged by its launcher's CPU."""
        cpu, rss, seen = {}, {}, {}
        for t in self.tracks.values():
            if not t.alive:
                continue
            pid = t.pid or self._starter_pid(t.rank)
            if not pid:
                continue
            if pid not in seen:
                try:
                    pr = _psproc(pid)
                    with pr.oneshot():
                        times = pr.cpu_times()
                        seen[pid] = (time.monotonic(), times.user + times.system, pr.memory_info().rss)
                except psutil.Error:
                    seen[pid] = None
            if seen[pid] is None:
                continue
            mono, used, size = seen[pid]
            if self._cpu_pid.get(t.rank) != pid:  # another process now (started, restarted): history starts over
                self._cpu_pid[t.rank] = pid
                t.cpu_hist.clear()
            prev = t.cpu_hist[-1] if t.cpu_hist else None
            t.cpu_hist.append((mono, used))
            if t.pid:
                cpu[t.rank] = 100.0 * (used - prev[1]) / (mono - prev[0]) if prev and mono > prev[0] else 0.0
                rss[t.rank] = size
        if cpu and emit:
            self._emit(ev.Resources(cpu, rss, time.time()))

    def _starter_pid(self, rank: int) -> int | None:
        """The live launcher that is to start `rank`, while the rank has not said its pid."""
        for pr in self.procs:
            if pr.returncode is None and rank in pr.spec.ranks:
                return pr.pid
        return None

    # ---- decisions -----------------------------------------------------------------------------------
    def _check(self, mono: float):
        p = self.profile
        if p.timeout and mono - self._started_mono > p.timeout:
            self._launcher_line(f"ddptui: timeout of {p.timeout:g} s reached, tearing every rank down")
            return "timeout", EXIT_FAILED
        if self._first_failure is not None and mono - self._first_failure > CRASH_GRACE:
            live = [t.rank for t in self.tracks.values() if t.alive]
            if live:
                self._launcher_line(f"ddptui: a rank failed {CRASH_GRACE:g} s ago; tearing down survivors "
                                    + ", ".join(map(str, live)))
                return "failed", EXIT_FAILED
        if self._first_failure is None:
            found = self._xla_stall(self._judge_stall(mono), mono)
            if isinstance(found, stall_rule.Stall) and self.stall_info is None:
                return self._stalled(found)
            if isinstance(found, stall_rule.Held) and self.stall_info is None and not self._held_said:
                self._held_said = True
                self._launcher_line(f"ddptui: {found.reason}")
            if found is None:
                self._held_said = False
                if self.stall_info is not None:
                    ended, self.stall_info = self.stall_info, None  # it moved again: a later stall is a new one
                    self._emit(ev.StallCleared(tuple(ended["stalled"]), time.time()))
                    for t in self.tracks.values():
                        if t.stalled:
                            t.stalled = False
                            self._set_status(t, "running", "progressing again")
            self._check_slow(mono)
        return None

    def _judge_stall(self, mono: float):
        """None, a Stall, or Held: ranks past their limit while a quiet one still burns CPU."""
        tracks = self.tracks.values()
        if not stall_rule.any_over(stall_rule.quiet_ranks(self.profile, tracks, mono, with_cpu=False)):
            return None
        if self.stall_info is None:  # the CPU evidence as of now, not as of the last 1 s sample
            self._sample_resources(emit=False)
        now = time.monotonic()
        live = stall_rule.live_tracks(tracks)
        floor = stall_rule.busy_floor(len(os.sched_getaffinity(0)), len(live), os.getloadavg()[0])
        return stall_rule.judge(stall_rule.quiet_ranks(self.profile, tracks, now), floor)

    def _stalled(self, found):
        wall = time.time()
        stalled, progressing, limit = found.stalled, found.progressing, found.trigger.limit
        mono = time.monotonic()  # a rank that never wrote a line: its quiet time counts from the start
        since = min(self.tracks[r].last_progress_wall or wall - (mono - self.tracks[r].last_progress) for r in stalled)
        self.stall_info = {"stalled": stalled, "progressing": progressing, "threshold": limit.seconds,
                           "rule": limit.rule, "reason": found.reason, "trigger": found.trigger.rank,
                           "detected": wall, "since": since}
        for q in found.quiet:
            if q.rank in stalled:
                t = self.tracks[q.rank]
                t.stalled = True
                self._set_status(t, "stalled", f"no step or output for {q.quiet:.0f} s ({q.limit.rule})"
                                 + ("" if q.cpu is None else f", {q.cpu * 100:.0f} % of a core"))
        self._emit(ev.StallDetected(tuple(stalled), tuple(progressing), since, limit.seconds, wall, found.reason))
        if self.profile.runner == "mirage" and self.world > 1 and self._matcher is not None:
            hint = self._matcher.raise_code("mirage-multigpu-hang")
            if hint is not None:
                self._hint(hint, None, "stall under mirage with several GPUs", wall)
        self._flush()
        policy = self.profile.on_stall
        if policy == "wait":
            self._verdict_without_stacks(stalled, since)
            return None
        self._collect_stacks("stall", stalled=stalled, since=since)
        if policy == "stop":
            self._launcher_line("ddptui: on_stall=stop: stacks collected, tearing every rank down")
            return "stalled", EXIT_STALLED
        return None

    def _check_slow(self, mono: float) -> None:
        """Name a rank whose steps got SLOWER x its own early steps (by its own clock), or a straggler, once."""
        if self.slow_info is not None:
            return
        lag = find_slow(self.tracks.values())
        if lag:
            lead = max(t.step for t in self.tracks.values() if t.alive and t.step is not None)
            for r in lag:
                self._set_status(self.tracks[r], "slow", f"at step {self.tracks[r].step}, "
                                 f"{lead - self.tracks[r].step} steps behind the lead ({lead})")
            self._slow_named(lag, f"{_ranks_word(lag)} far behind the other ranks (lead at step {lead})")
            return
        clocks = {t.rank: t.clock for t in self.tracks.values() if t.alive and not t.completed}
        downs = slowed_down(clocks)
        if not downs:
            return
        if not slowed_together(downs, clocks):
            self._slow_ranks(downs, "")  # the others kept their pace: no doubt which ranks are slow
            return
        # Every rank slowed together (lock-step collectives): the slow one is the rank whose own work grew, the
        # one NOT waiting in a collective when sampled. A sample can catch it in the collective too: up to 3.
        if self._slow_samples and (len(self._slow_samples) >= 3 or mono - self._slow_samples[-1] < 1.0):
            return
        if not self._slow_samples:
            self._launcher_line("ddptui: every rank's steps got slower (" + "; ".join(d.text() for d in downs)
                                + "); sampling stacks to find the rank whose own work grew")
        self._slow_samples.append(mono)
        hv = self._collect_stacks("slow", slowed=downs)  # a sample's verdict: summary.json's slow, never its hang
        culprits = set(hv.culprits) if hv is not None else set()
        named = [d for d in downs if d.rank in culprits]
        if named:
            self._slow_ranks(named, " (every rank slowed in lock-step; it is the one not waiting in a collective)")
        elif len(self._slow_samples) >= 3:
            self._slow_ranks(downs, " (every rank slowed in lock-step; 3 stack samples did not single one out)")
        if self.slow_info is not None and hv is not None:
            self.slow_info["verdict"] = {"text": hv.text, "culprits": list(hv.culprits), "waiting": list(hv.waiting),
                                         "where": hv.where, "stacks": hv.path}

    def _slow_ranks(self, downs, why: str) -> None:
        for d in downs:
            self._set_status(self.tracks[d.rank], "slow", d.detail())
        self._slow_named([d.rank for d in downs], "; ".join(d.text() for d in downs) + why)

    def _slow_named(self, ranks, text: str) -> None:
        self.slow_info = {"ranks": list(ranks), "text": text, "wall": time.time()}
        self._launcher_line(f"ddptui: {text}")

    # ---- stacks and verdicts -------------------------------------------------------------------------
    def _targets(self):
        from .stacks import Target
        out = []
        for t in self.tracks.values():
            if t.pid and t.alive:
                out.append(Target(t.rank, t.pid, self._stderr_path(t.rank)))
        return out

    def _stderr_path(self, rank: int) -> str | None:
        import glob
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

    def _dump_on_request(self) -> None:
        """`d`, `ddptui dump`, SIGUSR1: stacks now; a verdict only while the run is actually stalled."""
        st = self.stall_info
        if st is None:
            self._collect_stacks("on request")
        else:
            self._collect_stacks("on request", stalled=st["stalled"], since=st["since"])

    def _collect_stacks(self, why: str, stalled=None, since=None, slowed=None) -> ev.HangVerdict | None:
        """Record every rank's stacks (and its workers'); with ``stalled`` (or ``slowed``: the SlowDowns of a run that
        still moves) also the verdict read from them, returned. Stacks of a healthy run taken at slightly different
        moments are no evidence of anything."""
        slow = slowed is not None
        from . import stacks, hang_verdict as verdict
        targets = self._targets()
        if not targets:
            self._launcher_line("ddptui: no live rank to collect stacks from")
            return None
        t0 = time.monotonic()
        results = stacks.collect(targets, method=self.stack_method, pyspy=self.pyspy)
        secs = time.monotonic() - t0
        n = len(self.stack_collections) + 1
        folder = self.run_dir / "stacks" / f"{n:02d}-{why.replace(' ', '-')}"
        folder.mkdir(parents=True, exist_ok=True)
        threads, method, workers = {}, {}, {}
        for rank, res in sorted(results.items()):
            (folder / f"rank{rank}.txt").write_text(_stack_file(self.tracks[rank], res, stacks), encoding="utf-8")
            threads[rank] = stacks.to_json(res)
            method[rank] = res.method if res.threads else f"unavailable: {res.error}"
            if res.workers:
                workers[rank] = stacks.workers_json(res)
        judged = stalled is not None or slow
        self.record.write_json(str(folder.relative_to(self.run_dir) / "stacks.json"),
                               {"why": why, "seconds": secs, "method": method, "threads": threads, "workers": workers})
        self.stack_collections.append(str(folder))
        self._emit(ev.StacksCollected(method, threads, secs, str(folder), time.time(), workers,
                                      "slow" if slow else "stall" if judged else "on request"))
        if not judged:
            self._launcher_line(f"ddptui: stacks of {verdict.ranks_text(sorted(results))} recorded in {folder} "
                                "(no rank is stalled: no verdict)")
            return None
        wheres = {}
        for rank, res in results.items():
            if res.threads:
                wheres[rank] = verdict.classify(res.threads, thread_filter=_thread_filter(self.profile, rank),
                                                workers=res.workers)
        if not wheres and not slow:
            self._verdict_without_stacks(stalled or [], since or time.time())
            return self.hang
        steps = {r: self.tracks[r].step for r in self.tracks}
        if slow:  # the ranks still move: phrased as a slow-down, never as a hang
            text, culprits, waiting = verdict.slow_sentence(wheres, {d.rank: d.text() for d in slowed})
        else:
            text, culprits, waiting = verdict.hang_sentence(wheres, steps, stalled, since or time.time())
            text, culprits, waiting = self._xla_hang(text, culprits, waiting, wheres, results, steps)
        where = {r: w.to_dict(steps.get(r)) for r, w in wheres.items()}
        hv = ev.HangVerdict(text, tuple(culprits), tuple(waiting), where, time.time(), str(folder),
                            "slow" if slow else "stall")
        if not slow:
            self.hang = hv  # the run's hang verdict comes from stalls only
        self._emit(hv)
        self._launcher_line(f"ddptui: {text}")
        (folder / "verdict.txt").write_text(text + "\n", encoding="utf-8")
        return hv

    def _verdict_without_stacks(self, stalled, since: float) -> None:
        from .hang_verdict import ranks_text
        steps = ", ".join(f"rank {r} at step {self.tracks[r].step}" for r in stalled)
        text = (f"{ranks_text(stalled)} made no progress since "
                f"{time.strftime('%H:%M:%S', time.localtime(since))} ({steps}); press d / send SIGUSR1 for stacks")
        text = self._xla_hang(text, (), tuple(stalled), {}, {}, {})[0]
        self.hang = ev.HangVerdict(text, (), tuple(stalled), {}, time.time())
        self._emit(self.hang)
        self._launcher_line(f"ddptui: {text}")

    # ---- XLA rendezvous evidence (runners/xla_evidence.py): XLA has no Flight Recorder, its warnings are the record
    def _replica_kind(self) -> str:
        """Who could have made the initial weights equal: "xla" (nothing, unless the program broadcasts), "ddp"
        (DistributedDataParallel broadcast them when it wrapped the model) or "plain"."""
        if self.profile.runner == "xla":
            return "xla"
        return "ddp" if any(src == "ddp" for _, src in self.first_digests.values()) else "plain"

    def _xla_lines(self, lines: list[str], blob: str, wall: float) -> None:
        rdv = self._xla_rdv
        if xla_evidence.NEEDLE not in blob and not (rdv.keys and ("Fatal Python" in blob or " in _" in blob)):
            return
        for ln in lines:
            rl = rdv.feed(ln, wall)
            if rl is not None and rl.kind == "terminated" and self.profile.xla.pjrt_device == "CPU":
                self._xla_worker_aborts(wall)

    def _xla_worker_aborts(self, wall: float) -> None:
        """XLA's termination timeout is a FATAL log line: abort() of the one worker process, every thread replica in it.
        A replica that raised keeps its own exception as its cause."""
        for t in self.tracks.values():
            if t.alive and t.returncode is None and t.exc is None and not t.completed:
                t.returncode, t.signal = -6, "SIGABRT"
                t.exit_wall = t.exit_wall or wall
                self._rank_ended(t, False)

    def _xla_stall(self, found, mono: float):
        """XLA's rendezvous warning (5 s into a collective wait) is a stall now, whatever the progress limits say: XLA
        aborts the worker 10 s later, and the stacks must be taken before that."""
        rdv = self._xla_rdv
        if rdv is None or not rdv.keys or isinstance(found, stall_rule.Stall):
            return found
        rdv.steps_now({r: t.step for r, t in self.tracks.items()})
        if not rdv.stalled or rdv.terminated or any(t.exc is not None for t in self.tracks.values()):
            return found  # settled, too late, or a replica raised: the others wait for it in vain (a crash)
        live = stall_rule.live_tracks(self.tracks.values())
        if not live:
            return found
        waited = max(0.0, time.time() - (rdv.since or time.time()))
        limit = stall_rule.Limit(waited, f"XLA rendezvous warning: {rdv.describe()}")
        quiet = tuple(stall_rule.Quiet(t.rank, mono - t.last_progress, limit, None) for t in live)
        trigger = max(quiet, key=lambda q: q.quiet)
        reason = (f"XLA warns that {rdv.describe()} has waited {waited:.0f} s for replicas that did not arrive "
                  f"(rendezvous.cc, since {time.strftime('%H:%M:%S', time.localtime(rdv.since))})")
        return stall_rule.Stall(stalled=sorted(q.rank for q in quiet), progressing=[], trigger=trigger, reason=reason,
                                quiet=quiet)

    def _xla_hang(self, text: str, culprits, waiting, wheres: dict, results: dict, steps: dict):
        """The stack verdict with XLA's rendezvous evidence in it (op, keys, since when), when there is some."""
        rdv = self._xla_rdv
        if rdv is None:
            return text, culprits, waiting
        from .hang_verdict import pick_thread
        calls = {}
        for r, res in results.items():
            th = pick_thread(res.threads, _thread_filter(self.profile, r)) if res.threads else None
            calls[r] = xla_evidence.library_call(th.frames) if th is not None else None
        self._xla_fix_hint(calls, culprits)
        if not rdv.stalled:
            return text, culprits, waiting
        return xla_evidence.stall_sentence(rdv, text, tuple(culprits), tuple(waiting), wheres, calls, steps)

    def _xla_fix_hint(self, calls: dict, culprits=()) -> None:
        """DDP's own collectives on PJRT CPU thread replicas: the project knows the fix (profiles/xla-ddp-backend.yaml)."""
        x = self.profile.xla
        if self._matcher is None or x.pjrt_device != "CPU" or x.num_devices < 2:
            return
        if xla_evidence.ddp_collective(self._xla_rdv, calls, tuple(culprits)):
            hint = self._matcher.raise_code("xla-ddp-thread-collectives")
            if hint is not None:
                self._hint(hint, None, self._xla_rdv.lines[0] if self._xla_rdv.lines else "", time.time())

    def _xla_abort_verdict(self, crash):
        """When XLA aborted the worker: say so, instead of a replica "failing first" or being "stopped by the launcher"."""
        rdv = self._xla_rdv
        if rdv is None or not rdv.terminated:
            return crash
        import dataclasses
        self._xla_fix_hint({}, self.hang.culprits if self.hang is not None else ())
        words = xla_evidence.abort_sentence(rdv)
        if crash is not None and any(t.exc is not None for t in self.tracks.values()):
            return dataclasses.replace(crash, text=f"{crash.text}; then {words}")  # a replica's exception came first
        for t in self.tracks.values():
            if t.exc is None and not t.completed and t.signal == "SIGABRT":
                t.outcome = "XLA aborted after its rendezvous termination timeout"
        culprits = self.hang.culprits if self.hang is not None else ()
        root = culprits[0] if len(culprits) == 1 else None
        text = words + (f"; the stall verdict names rank {root} as the replica that never joined" if root is not None
                        else "")
        return ev.CrashVerdict(text, root, (), "SIGABRT", tuple(rdv.lines), time.time())

    def _crash_verdict(self) -> ev.CrashVerdict | None:
        """Who failed first, from every rank's evidence (runners/crash.py decides); each rank's outcome follows it."""
        v = decide_crash([self._rank_evidence(t) for t in self.tracks.values()], self._launcher_log.root_rank)
        if v is None:
            return None
        for r, (status, words) in v.outcomes.items():
            t = self.tracks[r]
            was, t.outcome = (t.status, t.outcome), words
            if status == "failed" and was[0] != "failed":  # taken for stopped until its exit code arrived
                self._set_status(t, status, t.signal or (f"exit {t.returncode}" if t.returncode else "failed"))
                self._hint_exit(t)
            elif status == "killed" and was != (status, words):  # the verdict knows better who stopped it
                self._set_status(t, status, words)
        return ev.CrashVerdict(v.text, v.root, v.victims, v.what, v.excerpt, time.time(), v.together, v.stopped,
                               v.never_started)

    def _rank_evidence(self, t: RankTrack) -> RankEvidence:
        stopped_by = None
        if self._ended_by_our_stop(t, "by ddptui" in t.outcome):
            stopped_by = "ddptui"
        elif self._launcher_log.pid_stopped(t.pid):
            stopped_by = "launcher"
        exc = t.exc
        if exc is None:  # a rank that used torch's @record left its error in torchrun's error file
            exc = self._launcher_log.recorded_error(t.rank)
        oom_words = ""
        if t.signal == "SIGKILL" and stopped_by is None:
            oom_words = oom.evidence(t.pid, self._oom_counters.get(t.pid) if t.pid else None)
        return RankEvidence(
            t.rank, t.returncode, died_at=t.exit_wall,
            error_at=t.first_failure_wall if exc is not None else None, exc=exc,
            err_lines=tuple(t.err_tail), out_lines=tuple(t.tail), started=t.ran or exc is not None,
            completed=t.completed, stopped_by=stopped_by, step=t.step, oom=oom_words)

    def _settle_rank_evidence(self) -> None:
        """At the end: deaths the watcher saw since the last check, and a launcher traceback still held back."""
        self._check_rank_pids()
        held = self._launcher_log.flush()
        if held:
            wall = time.time()
            self.record.lines(None, "err", wall, held)
            self._emit(ev.LogLines(None, "err", wall, time.monotonic(), tuple(held)))

    def _conclude(self, status: str | None, exit_code: int | None) -> int:
        self._settle_rank_evidence()
        for t in self.tracks.values():
            if t.alive and t.exit_wall is None:
                t.exit_wall = time.time()
            if t.status not in ("exited", "failed", "killed"):
                self._rank_ended(t, stopped=True)
        rep = None
        if self.profile.replica_check:
            res = replica.compare({r: t.digests for r, t in self.tracks.items() if t.digests is not None},
                                  self.world, {r: d for r, (d, _) in self.first_digests.items()}, self._replica_kind())
            if res.hint and self._matcher is not None:
                hint = self._matcher.raise_code(res.hint)
                if hint is not None:
                    self._hint(hint, None, res.text, time.time())
            text = res.text
            if status is not None or any(t.status == "failed" and not t.completed for t in self.tracks.values()):
                text += " (digests taken when the ranks exited, not after a completed run)"
            rep = ev.ReplicaVerdict(res.status, text, res.param, res.ranks, res.params, res.table, time.time())
            self._emit(rep)
        self.crash = self._crash_verdict() if status in (None, "failed") else None
        self.crash = self._xla_abort_verdict(self.crash) if status in (None, "failed") else self.crash
        if self.crash and rep is not None and rep.status == "differ" and not any(
                t.signal or t.exc for t in self.tracks.values()):
            self.crash = None  # the ranks only exited non-zero because their own replica check failed
        if self.crash:
            self._emit(self.crash)
        all_done = all(t.completed for t in self.tracks.values())  # a launcher failing over exit-time aborts only
        dead_launchers = [pr for pr in self.procs if pr.spec.stdout_rank is None and pr.returncode and not all_done]
        for pr in dead_launchers:
            self._launcher_line(f"ddptui: launcher {pr.spec.name} exited with "
                                f"{procs.signal_name(pr.returncode) or pr.returncode}")
        if status is None:
            bad = [t for t in self.tracks.values() if t.status == "failed"] + dead_launchers
            status, exit_code = ("failed", EXIT_FAILED) if bad else ("ok", EXIT_OK)
        if rep is not None and rep.status == "differ" and status in ("ok", "failed"):
            status, exit_code = "replicas differ", EXIT_REPLICAS
        return self._finish(status, exit_code, rep)

    def _preflight(self) -> list:
        try:
            from .preflight import check
        except ImportError:
            return []
        problems = check(self.profile)
        for pr in problems:
            self._launcher_line(f"ddptui: preflight {pr.severity}: {pr.message}" + (f" (fix: {pr.fix})" if pr.fix else ""))
        return [pr for pr in problems if pr.severity == "error"]

    def _finish(self, status: str, exit_code: int, rep=None) -> int:
        self.status = status
        wall = time.time()
        summary = {
            "profile": self.profile.name, "runner": self.profile.runner, "run_dir": str(self.run_dir),
            "status": status, "exit_code": exit_code, "world_size": self.world,
            "duration_s": round(time.monotonic() - self._started_mono, 3),
            "ddptui_cpu_s": round(time.process_time(), 3),  # this process: the engine, and the UI if any
            "ranks": {r: {"status": t.status, "outcome": t.outcome, "returncode": t.returncode,
                          "signal": t.signal, "steps": t.step, "first_loss": t.first_loss,
                          "last_loss": t.loss, "workload_loss": t.summary_loss, "pid": t.pid,
                          "workload_verdict": t.verdict}
                      for r, t in self.tracks.items()},
            "replica": None if rep is None else {"status": rep.status, "text": rep.text, "param": rep.param,
                                                 "ranks": list(rep.ranks)},
            "stall": self.stall_info,
            "slow": self.slow_info,
            "hang": None if self.hang is None else {"text": self.hang.text, "culprits": list(self.hang.culprits),
                                                    "waiting": list(self.hang.waiting), "where": self.hang.where},
            "crash": None if self.crash is None else {"text": self.crash.text, "root_rank": self.crash.root_rank,
                                                      "victims": list(self.crash.victims), "exit": self.crash.exit,
                                                      "excerpt": list(self.crash.excerpt),
                                                      "together": list(self.crash.together),
                                                      "stopped": list(self.crash.stopped),
                                                      "never_started": list(self.crash.never_started)},
            "hints": self.hints,
            "stacks": self.stack_collections,
            "survivors": self.survivors,
        }
        path = self.record.write_json("summary.json", summary)
        self._emit(ev.RunFinished(status, exit_code, str(path), wall, summary))
        self._flush()
        return exit_code


_PS_CACHE: dict[int, psutil.Process] = {}


def _psproc(pid: int) -> psutil.Process:
    """psutil needs the same Process object between calls for cpu_percent to mean anything."""
    pr = _PS_CACHE.get(pid)
    if pr is None:
        pr = _PS_CACHE[pid] = psutil.Process(pid)
    return pr


def _ranks_word(ranks) -> str:
    return f"rank {ranks[0]} is" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))} are"


def _thread_filter(profile, rank: int):
    if profile.runner == "xla":
        from .hang_verdict import xla_thread_filter
        return xla_thread_filter(rank)
    return None


def _stack_file(t: RankTrack, res, stacks_mod) -> str:
    head = [f"rank {t.rank}  pid {t.pid}  last step {t.step}  method {res.method}"]
    if res.error:
        head.append(f"error: {res.error}")
    head.append("")
    head.append(stacks_mod.render(res))
    head.append("\nlast lines:")
    head += [f"  {ln}" for ln in list(t.tail)[-20:]]
    return "\n".join(head) + "\n"


def _hint_matcher():
    from .hints import HintMatcher
    return HintMatcher()
