"""Status words with a text marker, so a status reads the same without colour (NO_COLOR, a monochrome terminal)."""
from __future__ import annotations

OK, FAILED, WARN, STOPPED = "✓", "✗", "⚠", "■"

_MARKS = {
    "ok": OK, "exited ok": OK, "identical": OK,
    "failed": FAILED, "replicas differ": FAILED, "differ": FAILED, "crash": FAILED,
    "stalled": WARN, "slow": WARN, "incomplete": WARN,
    "stopped": STOPPED, "killed": STOPPED, "cancelled": STOPPED,
}


def mark(status: str) -> str:
    """The marker of a run's, a rank's or the replicas' status ("failed (exit 1)" is "failed"); "" for the rest
    (starting, running, live: the word alone says it)."""
    s = status.strip()
    return _MARKS.get(s) or _MARKS.get(s.split(" (")[0], "")


def marked(status: str) -> str:
    """The status with its marker before it: "✗ failed (exit 1)", "✓ ok", "running"."""
    m = mark(status)
    return f"{m} {status}" if m else status
