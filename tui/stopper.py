"""SIGINT/SIGTERM/SIGHUP of a headless run: the first stops it, the third SIGINT/SIGTERM SIGKILLs every rank at once,
none raises, a hung-up terminal is let go of (tui/hangup.py), and a wedged engine is cut off after a bound with the
summary still written."""
from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from . import hangup

# From the first stop to ddptui's exit at the latest. Teardown alone is bounded by 5 s (TERM) + 2 s (KILL) +
# 1 s per process reaped; the rest is the stacks a stall may be collecting and draining the logs.
STOP_BOUND = 30.0
HURRY_BOUND = 10.0  # the same after the third stop signal (SIGKILL at once)
_STATE = {psutil.STATUS_DISK_SLEEP: "D", psutil.STATUS_STOPPED: "T", psutil.STATUS_RUNNING: "R",
          psutil.STATUS_SLEEPING: "S"}


def action(count: int) -> str:
    """What the count-th stop signal does: "stop" (graceful), "again" (already stopping), "kill" (SIGKILL now)."""
    return "stop" if count <= 1 else "again" if count == 2 else "kill"


_SAY = {"again": b"ddptui: already stopping; once more and every rank is SIGKILLed now\n",
        "kill": b"ddptui: SIGKILL to every rank now\n"}


class HeadlessStopper:
    """Installs the stop handlers of a headless run; `attach(session)` once the session exists."""

    def __init__(self, bound: float | None = None, hurry_bound: float | None = None, exit_fn=os._exit,
                 ended_by_scheduler: Callable[[], bool] | None = None) -> None:
        """ended_by_scheduler: for the engine inside a Slurm batch job, whether a SIGTERM is Slurm ending the job
        (scancel from outside, its time limit): that is no stop of ddptui's; the run loop sees the job end and says
        who ended it. Asked off the signal handler, in a thread of its own (it runs scontrol)."""
        self.ended_by_scheduler = ended_by_scheduler
        self.bound = STOP_BOUND if bound is None else bound
        self.hurry_bound = HURRY_BOUND if hurry_bound is None else hurry_bound
        self.exit_fn = exit_fn
        self.session = None
        self.count = 0
        self._limit: float | None = None  # monotonic time by which run() must have returned
        self._limit_s = 0.0  # the bound in force, for the message
        self._armed = threading.Event()
        self._done = threading.Event()
        self._old: dict = {}
        self._terminals: set[int] = set()  # the fds that were a terminal at install: a hung-up one no longer says so
        self._why = ""
        self._watchdog = threading.Thread(target=self._watch, name="ddptui-stop-bound", daemon=True)

    def install(self) -> None:
        self._terminals = hangup.terminals()
        self._old = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        self._old[signal.SIGHUP] = signal.signal(signal.SIGHUP, self._on_hangup)
        self._watchdog.start()

    def attach(self, session, timeout: float = 0.0) -> None:
        """From now on a stop signal reaches `session`; a profile timeout arms the bound as well."""
        self.session = session
        if timeout:
            self._arm(timeout + self.bound)
        if self.count:
            self._deliver(action(self.count))

    def finished(self) -> None:
        """run() returned: the bound no longer applies."""
        self._done.set()
        self._armed.set()

    def restore(self) -> None:
        self.finished()
        for s, h in self._old.items():
            signal.signal(s, h)
        self._old = {}

    # -- in the signal handler: set flags only (no exception, no buffered write) --------------------
    def _on_signal(self, signum, frame) -> None:
        if signum == signal.SIGTERM and self.count == 0 and self.ended_by_scheduler is not None:
            threading.Thread(target=self._term_unless_scheduler, args=(frame,), name="ddptui-sigterm",
                             daemon=True).start()
            return
        self.count += 1
        self._why = self._why or signal.Signals(signum).name
        what = action(self.count)
        if what in _SAY:
            try:
                os.write(2, _SAY[what])
            except OSError:  # stderr gone (a closed terminal): the stop goes on
                pass
        self._deliver(what)

    def _term_unless_scheduler(self, frame) -> None:
        assert self.ended_by_scheduler is not None, "set when this thread is started"
        if self.ended_by_scheduler():
            self._arm(self.bound)  # the job's end reaches the run loop; ddptui still leaves within the bound
            return
        self.ended_by_scheduler = None  # a SIGTERM of someone's: a stop, and the next ones count as usual
        self._on_signal(signal.SIGTERM, frame)

    def _on_hangup(self, signum, frame) -> None:
        """The terminal closed (or someone sent SIGHUP): a stop, once; never the SIGKILL escalation (a shell and the
        kernel may both send it)."""
        gone = hangup.detach(self._terminals)
        if self.count == 0:
            self.count = 1
            self._why = "the terminal hung up, SIGHUP" if gone else "SIGHUP"
            self._deliver("stop")

    def _deliver(self, what: str) -> None:
        if self.session is None:
            return
        if what == "kill":
            self.session.request_kill()
            self._arm(self.hurry_bound)
        else:
            self.session.request_stop(self._why)
            self._arm(self.bound)

    def _arm(self, seconds: float) -> None:
        limit = time.monotonic() + seconds
        if self._limit is None or limit < self._limit:
            self._limit, self._limit_s = limit, seconds
        self._armed.set()

    # -- the watchdog thread ------------------------------------------------------------------------
    def _watch(self) -> None:
        self._armed.wait()
        while not self._done.is_set():
            if self._limit is not None and time.monotonic() >= self._limit:
                self._give_up()
                return
            self._done.wait(0.5)

    def _give_up(self) -> None:
        give_up(self.session, f"the run did not end within {self._limit_s:g} s; ddptui gives up waiting", self.exit_fn)


def give_up(s, why: str, exit_fn) -> None:
    """The engine did not end in time: write summary.json from what is known (unless it wrote its own), say which
    processes still run, and exit 1."""
    try:
        left = _still_running(s)
        path = Path(s.run_dir) / "summary.json"
        if not path.exists():  # the engine is wedged before its own summary: write what is known
            path.write_text(json.dumps(emergency_summary(s, why, left), indent=2, default=str))
        (Path(s.run_dir) / "ddptui.pid").unlink(missing_ok=True)
        lines = [f"ddptui: {why}"] + [f"ddptui: {x}" for x in left] + [f"ddptui: record: {s.run_dir}"]
        os.write(2, ("\n".join(lines) + "\n").encode())
    finally:
        exit_fn(1)


def _still_running(session) -> list[str]:
    pids = {pr.pid: pr.spec.name for pr in session.procs}
    pids.update({t.pid: f"rank {t.rank}" for t in session.tracks.values() if t.pid})
    out = []
    for pid, who in sorted(pids.items()):
        try:
            st = psutil.Process(pid).status()
        except psutil.Error:
            continue
        if st != psutil.STATUS_ZOMBIE:
            out.append(f"pid {pid} ({who}) still running (state {_STATE.get(st, st)})")
    return out


def emergency_summary(session, why: str, left: list[str]) -> dict:
    """What summary.json says when the engine could not write it itself."""
    return {
        "profile": session.profile.name, "runner": session.profile.runner, "run_dir": str(session.run_dir),
        "status": "stopped", "exit_code": 1, "world_size": session.world, "error": why,
        "ranks": {r: {"status": t.status, "pid": t.pid, "steps": t.step, "returncode": t.returncode}
                  for r, t in session.tracks.items()},
        "survivors": left,
    }
