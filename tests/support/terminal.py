"""A private tmux server driving a real terminal program: used by the dashboard's terminal test and by the bench."""
from __future__ import annotations

import shutil
import subprocess
import uuid

from tests.support.wait import wait_until

TMUX = shutil.which("tmux") or "/usr/bin/tmux"


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
        return self.wait_until(lambda s: text in s, limit, repr(text))

    def wait_until(self, ready, limit: float, what: str) -> str:
        """The first screen `ready` accepts: a capture can land mid-redraw, so a test waits for every part it reads."""
        def accepted() -> str | None:
            s = self.screen()
            return s if ready(s) else None
        return wait_until(accepted, limit, f"{what} on the screen", step=0.25, seen=lambda: "\n" + self.screen())

    def close(self) -> None:
        subprocess.run([TMUX, "-L", self.sock, "kill-server"], capture_output=True, timeout=10)
