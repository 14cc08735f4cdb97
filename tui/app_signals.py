"""SIGHUP (its terminal closed) and SIGTERM of the dashboard: the run is stopped as by `s`, its summary written, and
ddptui leaves within a bound even if the closed terminal wedged the screen's writes."""
from __future__ import annotations

import asyncio
import os
import signal
import threading
import time

from . import hangup
from .stopper import STOP_BOUND, give_up

LEAVE_GRACE = 5.0  # seconds the app has to leave by itself once the engine has ended


class AppSignals:
    """Install around `app.run()`; `restore()` once it returned."""

    def __init__(self, app, bound: float = STOP_BOUND, grace: float = LEAVE_GRACE, exit_fn=os._exit,
                 terminals: set[int] | None = None) -> None:
        """terminals: the fds to watch and let go of (default: those of 0, 1, 2 that are a terminal at install)."""
        self.app, self.bound, self.grace, self.exit_fn = app, bound, grace, exit_fn
        self._given = terminals
        self._terminals: set[int] = set()
        self._old: dict = {}
        self._fired = False
        self._no_sighup = False  # the SIGHUP was our own, for a hangup seen (perhaps before the kernel's)
        self._left = threading.Event()  # app.run() returned

    def install(self) -> None:
        self._terminals = hangup.terminals() if self._given is None else set(self._given)
        self._old = {s: signal.signal(s, self._on_signal) for s in (signal.SIGHUP, signal.SIGTERM)}
        if self._terminals:
            threading.Thread(target=self._watch_terminal, name="ddptui-hangup", daemon=True).start()

    def _watch_terminal(self) -> None:
        """A terminal can hang up without a SIGHUP reaching ddptui (its shell ignored SIGHUP and so never passed it
        on): Textual's writes then fail and its screen blocks for good. Told by the kernel (POLLHUP on the terminal,
        no wake-up before), ddptui then stops the run as on SIGHUP."""
        import select
        p, watched = select.poll(), set(self._terminals)
        for fd in watched:
            p.register(fd, 0)  # no events asked: only POLLHUP / POLLERR wake it
        while watched and not self._left.is_set():
            woke = {fd for fd, _ in p.poll()}
            if any(hangup.hung_up(fd) for fd in woke):
                break
            for fd in woke:  # an error that is no hangup: not this watch's business, and no busy loop on it
                p.unregister(fd)
                watched.discard(fd)
        else:
            return
        if not self._left.is_set() and not self._fired:
            self._no_sighup = True
            os.kill(os.getpid(), signal.SIGHUP)  # to ourselves: the handler runs where Python runs handlers

    def restore(self) -> None:
        self._left.set()
        for s, h in self._old.items():
            signal.signal(s, h)
        self._old = {}

    # -- in the signal handler (the UI thread, between two steps of its loop) ----------------------------
    def _on_signal(self, signum, frame) -> None:
        gone = hangup.detach(self._terminals)  # first: the screen's writes must not fail or block on it
        if 0 in gone:  # its keys thread would spin on end-of-file: Textual's own stop of it (LinuxDriver)
            stop_reading = getattr(getattr(self.app, "_driver", None), "exit_event", None)
            if stop_reading is not None:
                stop_reading.set()
        if self._fired:
            return
        self._fired = True
        name = signal.Signals(signum).name
        why = ("the terminal hung up" + ("" if self._no_sighup else f", {name}")) if gone else name
        app = self.app
        session = getattr(app.source, "session", None) if app.running else None
        if session is not None:
            session.request_stop(why)  # at once: the engine's thread stops the run whatever the UI does
        elif app.running and getattr(app.source, "held", False):
            app.source.request_stop(why)  # the engine is a process of its own (tui/held.py): asked through its channel
        try:
            asyncio.get_running_loop().call_soon_threadsafe(app.leave_on_signal, why)
        except RuntimeError:  # the app's loop is not running (yet, or any more): the watchdog ends it
            pass
        threading.Thread(target=self._watch, args=(session, app.engine_done, why), name="ddptui-signal-bound",
                         daemon=True).start()

    # -- the watchdog thread --------------------------------------------------------------------------
    def _watch(self, session, done: threading.Event, why: str) -> None:
        if session is None and getattr(self.app.source, "held", False) and not done.wait(self.bound):
            os.write(2, f"ddptui: the run did not end within {self.bound:g} s of {why}; ddptui leaves (its engine "
                        "stops the run when the dashboard that holds it goes)\n".encode())
            self.exit_fn(1)
            return
        if session is not None and not done.wait(self.bound):
            give_up(session, f"the run did not end within {self.bound:g} s of {why}; ddptui gives up waiting",
                    self.exit_fn)
            return
        # The run is over and recorded. The app leaves the screen, then the process ends, normally at once; a thread
        # of Textual's that a closed terminal left blocked would keep it alive: cut that off.
        if self._left.wait(self.grace):
            time.sleep(self.grace)
        code = self.app.run_code
        self.exit_fn(1 if code is None else code)
