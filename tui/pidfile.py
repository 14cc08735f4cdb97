"""A live headless run's ddptui.pid, and the check that its pid is still that run's headless ddptui before anything
signals it."""
from __future__ import annotations

import json
from pathlib import Path

import psutil

from ..runners.edge.stacks import catches_sigusr1

NAME = "ddptui.pid"
_SAME_START = 0.05  # seconds: create times are in clock ticks (10 ms); a reused pid starts later than that


def write(run_dir: Path) -> Path:
    """Record this process: its pid, its start time (a reused pid has another) and the run it serves."""
    me = psutil.Process()
    path = Path(run_dir) / NAME
    path.write_text(json.dumps({"pid": me.pid, "create_time": me.create_time(),
                                "run_dir": str(Path(run_dir).resolve())}) + "\n")
    return path


def remove(run_dir: Path) -> None:
    try:
        (Path(run_dir) / NAME).unlink()
    except OSError:
        pass


def parse(text: str) -> dict | None:
    """The recorded {"pid", "create_time"}; None when the file does not say both (e.g. a bare pid, cut short)."""
    try:
        d = json.loads(text)
    except ValueError:
        return None
    if not isinstance(d, dict):
        return None
    pid, created = d.get("pid"), d.get("create_time")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0 or not isinstance(created, (int, float)):
        return None
    return d


def is_ddptui(cmdline: list[str]) -> bool:
    """A ddptui front end: the installed `ddptui` script or `python -m tui.cli`."""
    return any(Path(a).name == "ddptui" or a in ("ddptui.tui.cli", "-mddptui.tui.cli") or a.endswith("tui/cli.py")
               for a in cmdline[:3])


def refusal(recorded: dict | None, live: dict | None, run_dir: Path | str | None = None) -> str | None:
    """Why the recorded pid must not be signalled, or None when it is the live headless ddptui of the run `run_dir`.

    `live` is what the pid is now: {"create_time", "cmdline", "sigusr1" (it handles SIGUSR1), "open" (the paths of the
    regular files it holds open)}, or None when no such process exists."""
    if recorded is None:
        return "it does not hold a pid and start time written by ddptui"
    pid = recorded["pid"]
    if live is None:
        return f"pid {pid} is not running (that ddptui has exited or was killed)"
    if abs(live["create_time"] - recorded["create_time"]) > _SAME_START:
        return f"pid {pid} now belongs to another process, started after that ddptui"
    if not is_ddptui(live["cmdline"]):
        return f"pid {pid} is not a ddptui ({' '.join(live['cmdline'])[:80]})"
    if run_dir is None:
        return None
    named = recorded.get("run_dir")
    if not isinstance(named, str):
        return "it does not say which run its ddptui serves"
    if _resolved(named) != _resolved(run_dir):  # a copied record keeps the original's pid file
        return f"it names the run {named}, not this record (a copy of a record is no live run)"
    if not live.get("sigusr1"):
        return f"pid {pid} does not handle SIGUSR1: it is no headless ddptui (a dashboard would die of it)"
    if str(Path(_resolved(run_dir)) / "events.jsonl") not in live.get("open", ()):
        return f"pid {pid} is not writing this record (it does not hold its events.jsonl open)"
    return None


def _resolved(path: Path | str) -> str:
    return str(Path(path).resolve())


def _live(pid: int) -> dict | None:
    try:
        p = psutil.Process(pid)
        if p.status() == psutil.STATUS_ZOMBIE:
            return None
        live = {"create_time": p.create_time(), "cmdline": p.cmdline(), "sigusr1": catches_sigusr1(pid)}
        try:
            live["open"] = {f.path for f in p.open_files()}
        except psutil.Error:
            live["open"] = set()
        return live
    except psutil.Error:
        return None


def live_ddptui(run_dir: Path) -> tuple[int | None, str | None]:
    """(pid of the run's live headless ddptui, None) or (None, why there is none to signal)."""
    path = Path(run_dir) / NAME
    try:
        text = path.read_text()
    except OSError:
        return None, f"no live ddptui for this run ({path} is missing: it has finished)"
    recorded = parse(text)
    why = refusal(recorded, _live(recorded["pid"]) if recorded else None, run_dir)
    if why:
        return None, f"no live ddptui for this run: {path}: {why}; nothing signalled"
    assert recorded is not None  # refusal() refuses a record that cannot be parsed
    return recorded["pid"], None
