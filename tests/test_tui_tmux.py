"""The real `python -m tui.cli` in a real terminal (tmux): pick a profile with keys, watch the run, read the screen."""
from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TMUX = shutil.which("tmux") or "/usr/bin/tmux"

pytestmark = pytest.mark.skipif(not Path(TMUX).exists(), reason="tmux not installed")


class Term:
    """A private tmux server (its own socket), so the test's environment reaches the app and nothing else is touched."""

    def __init__(self, command: str, width: int = 160, height: int = 50) -> None:
        self.sock = f"ddptui-test-{uuid.uuid4().hex[:8]}"
        # A fresh server without clients sizes windows 80x24: fix the size first, then start the app in it.
        self.tmux(["-f", "/dev/null", "new-session", "-d", "-s", "t", "-x", str(width), "-y", str(height), "sleep 600"])
        self.tmux(["set-option", "-g", "window-size", "manual"])
        self.tmux(["resize-window", "-t", "t", "-x", str(width), "-y", str(height)])
        self.tmux(["respawn-pane", "-k", "-t", "t", command])

    def tmux(self, args: list[str]) -> str:
        return subprocess.run([TMUX, "-L", self.sock, *args], capture_output=True, text=True, timeout=10).stdout

    def screen(self) -> str:
        return self.tmux(["capture-pane", "-p", "-t", "t"])

    def keys(self, *keys: str) -> None:
        self.tmux(["send-keys", "-t", "t", *keys])

    def wait_for(self, text: str, limit: float) -> str:
        end = time.monotonic() + limit
        while time.monotonic() < end:
            s = self.screen()
            if text in s:
                return s
            time.sleep(0.25)
        raise AssertionError(f"{text!r} never appeared; screen:\n{self.screen()}")

    def close(self) -> None:
        subprocess.run([TMUX, "-L", self.sock, "kill-server"], capture_output=True, timeout=10)


@pytest.mark.timeout(150)
def test_pick_a_profile_with_keys_and_watch_it_finish(tmp_path):
    runs = tmp_path / "runs"
    # Textual believes COLUMNS/LINES over the terminal; a client-less tmux server may hand the pane 80x24 ones.
    cmd = (f"unset COLUMNS LINES; cd {shlex.quote(str(ROOT))} && {shlex.quote(sys.executable)} -m tui.cli --runs-dir {shlex.quote(str(runs))};"
           " echo DDPTUI-EXITED $?; sleep 30")
    term = Term(cmd)
    try:
        s = term.wait_for("pick a profile", 30)
        assert "cpu-ddp" in s and "hang" in s
        term.wait_for("runner  torchrun", 10)  # the highlighted profile's resolved settings
        term.keys("Tab")  # nproc input
        time.sleep(0.3)
        term.keys("x")
        term.wait_for("expected an integer", 10)  # ProfileError's one line, in the UI
        term.keys("BSpace", "Tab")  # steps input
        time.sleep(0.3)
        term.keys("2", "0", "Enter")
        s = term.wait_for("run ok", 120)
        assert "20 steps" in s and "identical" in s
        assert "per-rank summary" in s  # the verdict tab came forward
        term.keys("Escape")
        s = term.wait_for("rank 1 · pid", 10)  # the pane titles: back on the grid
        assert s.count("exited ok") >= 2 and "step 20/20" in s, s
        term.keys("q")
        s = term.wait_for("DDPTUI-EXITED", 20)
        assert "DDPTUI-EXITED 0" in s
        assert len(list(runs.iterdir())) == 1
    finally:
        term.close()
