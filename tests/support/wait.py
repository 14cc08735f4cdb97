"""The one way a test waits for something: poll a condition, and fail with what it saw when the time runs out."""
from __future__ import annotations

import subprocess
import time
from typing import Callable, TypeVar

T = TypeVar("T")


class WaitTimeout(AssertionError):
    """What a test waited for did not come in time (or what it waited on ended first): the test fails here, saying
    what it waited for and what it saw, instead of going on to assert on a world that never arrived."""


class Deadline:
    """A wait's time and its failure: `check()` raises WaitTimeout once the time ran out or `stop_if()` gives a reason
    to stop waiting (the process it waits on ended). The pilot's `until` (tests/support/ui.py) waits with it too."""

    def __init__(self, timeout: float, what: str, seen: Callable[[], object] | None = None,
                 stop_if: Callable[[], str | None] | None = None) -> None:
        self.timeout, self.what, self.seen, self.stop_if = timeout, what, seen, stop_if
        self.end = time.monotonic() + timeout

    def left(self) -> float:
        return self.end - time.monotonic()

    def check(self, last: object = None) -> None:
        why = self.stop_if() if self.stop_if is not None else None
        if why is None and time.monotonic() >= self.end:
            why = f"not within {self.timeout:g} s"
        if why is not None:
            raise WaitTimeout(f"waited for {self.what}: {why}; saw: {self._saw(last)}")

    def _saw(self, last: object) -> str:
        if self.seen is None:
            return repr(last)
        try:
            return str(self.seen())
        except Exception as e:  # what it saw cannot be read (a file not there): that is what it saw
            return f"({type(e).__name__}: {e})"


def wait_until(cond: Callable[[], T], timeout: float, what: str, *, step: float = 0.1,
               seen: Callable[[], object] | None = None, stop_if: Callable[[], str | None] | None = None) -> T:
    """cond()'s first truthy value, polled every `step` seconds (the poll's period, not a guess at how long it takes).
    When `timeout` seconds pass first, or `stop_if()` says why waiting is pointless, raises WaitTimeout naming `what`
    and what the test saw: `seen()`, else cond()'s last value."""
    deadline = Deadline(timeout, what, seen, stop_if)
    while True:
        got = cond()
        if got:
            return got
        try:
            deadline.check(got)
        except WaitTimeout:
            got = cond()  # one last look: it may have come while the process it waits on was ending
            if got:
                return got
            raise
        time.sleep(step)


def exited(proc: subprocess.Popen, output: Callable[[], str] | None = None) -> Callable[[], str | None]:
    """A stop_if for a wait on what `proc` does: it exited (with the end of its output, when given)."""
    def why() -> str | None:
        if proc.poll() is None:
            return None
        return f"it exited {proc.returncode}" + (f"; its output ends: {output()[-3000:]}" if output else "")
    return why
