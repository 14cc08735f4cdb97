"""A run's attempts (each restart of its launcher) in words, as the console and the Verdict tab say them. Pure."""
from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any


def _hms(wall: Any) -> str:
    return time.strftime("%H:%M:%S", time.localtime(wall)) if isinstance(wall, (int, float)) else "?"


def outcome(status: str, verdict: str, stacks: str = "") -> str:
    """How an attempt ended: "failed: rank 1 failed first ... (stacks: DIR)"."""
    head = "ended ok" if status == "ok" else status
    return head + (f": {verdict}" if verdict else "") + (f" (stacks: {stacks})" if stacks else "")


def ended_line(attempt: int, status: str, verdict: str, stacks: str = "") -> str:
    """The line said when an attempt ends: "attempt 0 failed: rank 1 failed first ... (stacks: DIR)"."""
    return f"attempt {attempt} {outcome(status, verdict, stacks)}"


def timeline(attempts: Sequence[Mapping[str, Any]]) -> list[str]:
    """One row per attempt, from summary.json's `attempts` (or the model's): when it began and ended, how long it
    ran, its status and verdict."""
    rows = []
    for a in attempts:
        began, ended = a.get("began"), a.get("ended")
        took = f"{ended - began:.1f} s" if isinstance(began, (int, float)) and isinstance(ended, (int, float)) else "-"
        rows.append(f"attempt {a.get('attempt')}  {_hms(began)} -> {_hms(ended)}  {took:>8}  "
                    + outcome(str(a.get("status") or "?"), str(a.get("verdict") or ""), str(a.get("stacks") or "")))
    return rows
