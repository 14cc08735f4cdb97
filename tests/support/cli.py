"""The `ddptui` command run for real by a test: once to its end, or live in the background, and its run folder."""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from pathlib import Path

from tests.support.wait import Deadline, wait_until

ROOT = Path(__file__).resolve().parents[2]
# How a rank that raised RuntimeError under torchrun is said to have ended: its own exit 1, or its exception then
# torchrun's SIGTERM (it was still tearing its gloo group down when its peer, aborted on the closed connection, was
# seen first: CI under load). The rank is the root cause either way.
RAISED = ("exit 1", "RuntimeError, then SIGTERM")


def ddptui(*args, runs_dir, timeout=120, **kw):
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("NO_COLOR", None)
    return subprocess.run([sys.executable, "-m", "ddptui.tui.cli", "--runs-dir", str(runs_dir), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout, env=env, **kw)


@contextlib.contextmanager
def live_ddptui(runs_dir: Path, *args: str):
    """A headless ddptui running in the background; killed on the way out if the test left it running."""
    proc = subprocess.Popen([sys.executable, "-m", "ddptui.tui.cli", "--runs-dir", str(runs_dir), *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def only_run(runs_dir: Path) -> Path:
    (d,) = list(runs_dir.iterdir())
    return d


def _rank1_log(runs_dir: Path) -> str:
    runs = list(runs_dir.iterdir()) if runs_dir.exists() else []
    log = runs[0] / "rank1.log" if runs else None
    return log.read_text(errors="replace") if log is not None and log.exists() else ""


def wait_for_rank1(runs_dir: Path, text: str, timeout: float = 60) -> Deadline:
    """Wait until the live run's rank 1 log shows `text` (else the test fails here, showing that log); returns the
    deadline, whose time left the test's further waits on the same run share."""
    deadline = Deadline(timeout, "the run")
    wait_until(lambda: text in _rank1_log(runs_dir), timeout, f"rank 1's log to show {text!r}", step=0.2,
               seen=lambda: f"runs {sorted(p.name for p in runs_dir.iterdir())}, rank 1's log ending "
                            f"{_rank1_log(runs_dir)[-2000:]!r}")
    return deadline


class Output:
    """What a live ddptui writes, read as it comes (a thread), so a test can wait for what it says."""

    def __init__(self, proc: subprocess.Popen):
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, args=(proc.stdout,), daemon=True)
        self.reader.start()

    def _read(self, stream) -> None:
        for line in stream:
            self.lines.append(line)

    def text(self) -> str:
        return "".join(list(self.lines))

    def wait(self, condition, timeout: float, what: str = "ddptui to say it") -> None:
        wait_until(condition, timeout, what, seen=lambda: self.text()[-2000:])

    def all(self) -> str:
        self.reader.join(30)  # the process ended: its pipe reaches EOF
        return self.text()
