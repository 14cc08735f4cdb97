"""The dashboard's own run: its engine a process of its own (tui/detach.py), followed like any record (tui/follow.py)
and held over its control channel, so that a dashboard that dies (its terminal closed, killed) stops the run, while
its detach key (D) lets go and leaves the run going on."""
from __future__ import annotations

import contextlib
import socket
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

from ..runners.edge import control
from .detach import spawn_engine
from .follow import FollowSource

ENGINE_EXIT = 15.0  # seconds the dashboard waits for a run's engine to exit once the record says it ended


class HeldSource:
    """A launched run seen from the dashboard (kind "live", as LiveSource): run() starts `ddptui ARGV --no-ui
    [-- COMMAND]` in its own session, holds it, follows its record and returns the run's exit code (0 once
    detached); request_stop stops the run (through the channel), detach() lets it go on."""

    kind = "live"
    held = True  # a stop on SIGHUP/SIGTERM goes through request_stop(why) (tui/app_signals.py)

    def __init__(self, argv: list[str], command: list[str] = ()) -> None:  # type: ignore[assignment]
        self.argv, self.command = list(argv), list(command)
        self.emit: Callable[[list], None] = lambda batch: None
        self.run_dir: Path | None = None
        self.engine: subprocess.Popen | None = None
        self.detached = False
        self._follow: FollowSource | None = None
        self._hold: socket.socket | None = None
        self._lock = threading.Lock()
        self._stop_why: str | None = None  # a stop asked (None: none yet); sent once the engine answers

    def prepare(self, emit: Callable[[list], None]) -> None:
        self.emit = emit

    def run(self) -> int:
        run_dir, proc = spawn_engine(self.argv, self.command)  # DetachError: its line and what the engine said
        hold = control.connect(run_dir)
        try:
            control.request(hold, "hold")
        except (OSError, ValueError, control.ChannelError):
            hold.close()
            raise
        follow = FollowSource(run_dir)
        follow.prepare(self.emit)
        with self._lock:
            self.run_dir, self.engine, self._hold, self._follow = run_dir, proc, hold, follow
            why = self._stop_why
        if why is not None:  # asked while the engine was starting
            self._send_stop(why)
        try:
            code = follow.run()
            if not self.detached:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(ENGINE_EXIT)  # reaped: nothing of the run outlives the dashboard that stopped it
            return 0 if self.detached else code
        finally:
            with self._lock:
                self._hold = None
            hold.close()  # after a detach it was released; else the run has ended (or this stops it)

    def request_stop(self, why: str = "") -> None:
        """Stop the run (`s`, `q`, the terminal's hangup): asked through the channel once; nothing once detached."""
        with self._lock:
            if self.detached or self._stop_why is not None:
                return
            self._stop_why = why
            started = self.run_dir is not None
        if started:
            self._send_stop(why)

    def _send_stop(self, why: str) -> None:
        assert self.run_dir is not None, "the engine answered"
        try:
            control.ask(self.run_dir, "stop", timeout=2.0, why=why)
        except control.ChannelError:
            with self._lock:
                hold, self._hold = self._hold, None
            if hold is not None:
                hold.close()  # a held connection that goes stops the run as well

    def request_dump(self) -> bool:
        return self._follow is not None and self._follow.request_dump()

    def detach(self) -> Path | None:
        """Let the run go on without this dashboard: released, and the follow left. The record's path, or None
        while the engine is still starting (nothing to detach yet)."""
        with self._lock:
            hold, follow, run_dir = self._hold, self._follow, self.run_dir
            if run_dir is None or follow is None or self._stop_why is not None:
                return None
            self.detached = True
        if hold is not None:
            with contextlib.suppress(OSError, ValueError, control.ChannelError):
                control.request(hold, "release")
        follow.request_stop()
        return run_dir

    def again(self) -> HeldSource:
        return HeldSource(self.argv, self.command)
