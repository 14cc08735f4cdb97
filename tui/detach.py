"""`ddptui PROFILE --detach`: the engine started as a process of its own session (no terminal to lose), its output
into the record's engine.log; returns once its control channel answers, with the record's path and its pid."""
from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from pathlib import Path

from ..runners.edge import control
from .attach_words import attach_command

READY_BOUND = 60.0  # seconds for the engine to make its record and answer a ping (imports, a slow disk, load)
READY_FLAG = "--engine-ready-fd"


class DetachError(Exception):
    """The engine did not come up: one line (and what it said) and its exit code."""

    def __init__(self, line: str, code: int = 1) -> None:
        super().__init__(line)
        self.code = code


def start_engine(argv: list[str], command: list[str]) -> tuple[Path, int]:
    """Start `ddptui ARGV --no-ui [-- COMMAND]` as a detached engine: (its record, its pid) once it answers."""
    run_dir, proc = spawn_engine(argv, command)
    return run_dir, proc.pid


def spawn_engine(argv: list[str], command: list[str]) -> tuple[Path, subprocess.Popen]:
    """start_engine's work: (the record, the engine's process) once it answers (the dashboard reaps it)."""
    r, w = os.pipe()
    args = [a for a in argv if a != "--detach"] + ["--no-ui", READY_FLAG, str(w)]
    if command:
        args += ["--", *command]
    proc = subprocess.Popen([sys.executable, "-m", "ddptui.tui.cli", *args], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, pass_fds=(w,), start_new_session=True)
    os.close(w)
    try:
        run_dir = _ready_line(r, proc)
    finally:
        os.close(r)
    if run_dir is None:
        err = proc.stderr.read().decode(errors="replace").strip() if proc.stderr else ""
        code = proc.wait()
        raise DetachError(err or f"the engine exited ({code}) before it made its record", code or 1)
    if proc.stderr:
        proc.stderr.close()  # the engine's stderr is its engine.log from now on
    end = time.monotonic() + READY_BOUND
    while True:
        try:
            control.ask(run_dir, "ping", timeout=2.0)
            return run_dir, proc
        except control.ChannelError as e:
            if proc.poll() is not None:
                raise DetachError(f"the engine (pid {proc.pid}) exited ({proc.returncode}) before it answered: "
                                  f"{run_dir / 'engine.log'} says why", proc.returncode or 1) from None
            if time.monotonic() > end:
                raise DetachError(f"the engine (pid {proc.pid}) did not answer within {READY_BOUND:g} s: {e}") from None
        time.sleep(0.05)


def _ready_line(fd: int, proc: subprocess.Popen) -> Path | None:
    """The record's path the engine writes once it made it; None when it exited (or closed the pipe) first."""
    buf = b""
    end = time.monotonic() + READY_BOUND
    while b"\n" not in buf and time.monotonic() < end:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            got = os.read(fd, 4096)
            if not got:
                break
            buf += got
        elif proc.poll() is not None:
            break
    line = buf.split(b"\n", 1)[0].decode(errors="replace").strip()
    return Path(line) if line else None


def engine_ready(ready_fd: int, run_dir: Path) -> None:
    """In the detached engine, once its record exists: its output goes to RUN_DIR/engine.log, and the starter is
    told where the record is."""
    log = os.open(Path(run_dir) / "engine.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.write(ready_fd, (str(Path(run_dir).resolve()) + "\n").encode())
    os.close(ready_fd)


def run_detached(argv: list[str], command: list[str]) -> int:
    try:
        run_dir, pid = start_engine(argv, command)
    except DetachError as e:
        print(f"ddptui: --detach: {e}", file=sys.stderr)
        return e.code
    print(f"run: {run_dir}\nengine: pid {pid}\n"
          f"watch it: {attach_command(run_dir)}   (s there, or kill {pid}, stops it; its output: engine.log)")
    return 0
