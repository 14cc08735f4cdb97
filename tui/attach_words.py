"""The command that comes back to a run, as ddptui prints it: its folder quoted for a shell (it may hold spaces)."""
from __future__ import annotations

import shlex
from pathlib import Path


def attach_command(run_dir: str | Path) -> str:
    """`ddptui attach RUN_DIR`, ready to paste into a shell."""
    return f"ddptui attach {shlex.quote(str(run_dir))}"
