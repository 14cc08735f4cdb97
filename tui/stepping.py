"""Where a replay's stepping keys land in a record's events: incidents (stall, crash, divergence, node loss), one
event or one second back and forth, a time typed as HH:MM:SS or +SECONDS."""
from __future__ import annotations

import bisect
import datetime as dt
import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..runners import events as ev

INCIDENTS: tuple[tuple[type, str], ...] = (
    (ev.StallDetected, "stall"), (ev.CrashVerdict, "crash"), (ev.ReplicaDiverged, "divergence"),
    (ev.NodeLost, "node lost"))
WHEN_SYNTAX = "HH:MM:SS (the clock) or +SECONDS / +M:SS from the start"
_CLOCK = re.compile(r"(\d{1,2}):(\d{2})(?::(\d{2}(?:\.\d*)?))?")
_SINCE = re.compile(r"\+(?:(?:(\d+):)?(\d+):)?(\d+(?:\.\d*)?|\.\d+)")


@dataclass(frozen=True)
class Incident:
    index: int  # the event's index in the record
    wall: float
    kind: str  # "stall", "crash", "divergence", "node lost"


def walls(events: Sequence[ev.Event]) -> list[float]:
    """Each event's wall time, never going back (an event without one, or an earlier one, takes its predecessor's):
    what the time keys bisect."""
    out: list[float] = []
    last = 0.0
    for e in events:
        w = getattr(e, "wall", None)
        last = max(last, w) if isinstance(w, (int, float)) else last
        out.append(last)
    return out


def incidents(events: Sequence[ev.Event]) -> list[Incident]:
    """The record's incidents in order: each stall found, crash verdict, replica divergence and node lost."""
    out = []
    ws = walls(events)
    for i, e in enumerate(events):
        for kind, name in INCIDENTS:
            if isinstance(e, kind):
                out.append(Incident(i, ws[i], name))
    return out


def next_incident(found: Sequence[Incident], pos: int, forward: bool) -> Incident | None:
    """The first incident after `pos` (forward) or the last before it, wrapping around (a replay opens at its end: x
    goes to the first incident); None when the record has none."""
    if not found:
        return None
    if forward:
        return next((x for x in found if x.index > pos), found[0])
    return next((x for x in reversed(found) if x.index < pos), found[-1])


def step_event(n: int, pos: int, delta: int) -> int:
    """One event (or `delta` events) on, kept inside the record's `n` events."""
    return max(0, min(n - 1, pos + delta))


def step_seconds(ws: Sequence[float], pos: int, seconds: float) -> int:
    """The last event at most `seconds` after (or, negative, before) the event at `pos`; at least one event on when
    no event falls in that second, so the key always moves (but never past either end)."""
    if not ws:
        return 0
    target = bisect.bisect_right(ws, ws[pos] + seconds) - 1
    if seconds > 0:
        return min(len(ws) - 1, max(target, pos + 1))
    return max(0, min(target, pos - 1))


def index_at(ws: Sequence[float], wall: float) -> int:
    """The last event at or before `wall` (the first event for a time before the record)."""
    return max(0, bisect.bisect_right(ws, wall) - 1)


def parse_when(text: str, start: float, tz: dt.tzinfo | None = None) -> float:
    """The wall time a typed time means: `+12.5`, `+1:30`, `+1:02:03` from the run's `start`, or the clock time
    `HH:MM[:SS]` of the run's day (local, or `tz`; the next day's when it is before the start: a run past midnight).
    ValueError with a one-line reason otherwise."""
    text = text.strip()
    m = _SINCE.fullmatch(text)
    if m:
        h, mins, secs = m.groups()
        return start + int(h or 0) * 3600 + int(mins or 0) * 60 + float(secs)
    m = _CLOCK.fullmatch(text)
    if m:
        h, mins, secs = int(m.group(1)), int(m.group(2)), float(m.group(3) or 0)
        if h > 23 or mins > 59 or secs >= 60:
            raise ValueError(f"{text}: no time of day; type {WHEN_SYNTAX}")
        day = dt.datetime.fromtimestamp(start, tz)
        at = day.replace(hour=h, minute=mins, second=0, microsecond=0) + dt.timedelta(seconds=secs)
        if at.timestamp() < start - 12 * 3600:  # long before the start: the next day's (a run past midnight)
            at += dt.timedelta(days=1)
        return at.timestamp()
    raise ValueError(f"{text or 'nothing'}: not a time; type {WHEN_SYNTAX}")
