"""`ddptui export`'s two tables of a record, in shapes pandas loads as they are: the steps (one row per rank and step:
loss, step time, samples, samples/s) and the events (one row each), written as CSV or a JSON array of records: pure
(they write to the stream they are given)."""
from __future__ import annotations

import csv
import json
import math
from typing import IO, Any

from .run_series import RunSeries

STEP_COLUMNS = ("rank", "attempt", "step", "wall", "t", "loss", "step_time_s", "samples", "samples_per_s")
EVENT_COLUMNS = ("wall", "t", "kind", "rank", "text", "fields")
FORMATS = ("csv", "json")


def step_rows(run: RunSeries) -> list[tuple]:
    """One row per rank, attempt and step the record holds, in that order: the loss the rank reported for the step;
    the read time, the engine's step time and the samples of the Progress event that reached it (None where the
    record holds only the loss: the engine reads several steps at once), samples/s from those two; t: seconds since
    the run started."""
    start = run.started
    out: list[tuple] = []
    for r in sorted(run.ranks):
        rs = run.ranks[r]
        at: dict[tuple[int, int], int] = {}
        for i, (a, s) in enumerate(zip(rs.attempts, rs.steps, strict=True)):
            at[(a, s)] = i
        loss: dict[tuple[int, int], float] = {}
        for a, s, v in zip(rs.loss_attempts, rs.loss_steps, rs.loss_values, strict=True):
            loss[(a, s)] = v
        for a, s in sorted(at.keys() | loss.keys()):
            got = at.get((a, s))
            wall: float | None = None
            st: float | None = None
            samples: int | None = None
            rate: float | None = None
            t: float | None = None
            if got is not None:
                wall, st, samples = rs.walls[got], rs.step_times[got], rs.samples[got]
                rate = samples / st if samples and st else None
                t = wall - start if start is not None else None
            out.append((r, a, s, wall, t, loss.get((a, s)), st, samples, rate))
    return out


def event_rows(run: RunSeries) -> list[tuple]:
    """Every event of the record but the steps (Progress: the steps table), in record order: its wall time, t, kind,
    rank (None for the run's own), its words (`text`, else `reason`, else `status`, else ""), and all its fields."""
    start = run.started
    out = []
    for e in run.others:
        d = e.to_json()
        wall = d.get("wall")
        t = wall - start if isinstance(wall, (int, float)) and start is not None else None
        rank = d.get("rank")
        text = next((d[k] for k in ("text", "reason", "status", "title") if isinstance(d.get(k), str) and d[k]), "")
        fields = {k: v for k, v in d.items() if k not in ("kind", "wall")}
        out.append((wall, t, e.kind, rank if isinstance(rank, int) else None, text, fields))
    return out


def _plain(v: Any) -> Any:
    """A JSON value without NaN / inf, at any depth (JSON has none: null)."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


def write(rows: list[tuple], columns: tuple[str, ...], fmt: str, out: IO[str]) -> None:
    """rows as CSV (a header line, empty cells for none, nested values as JSON text) or as a JSON array of
    records (null for none and for NaN / inf)."""
    if fmt == "csv":
        w = csv.writer(out, lineterminator="\n")
        w.writerow(columns)
        for row in rows:
            w.writerow(["" if v is None else json.dumps(_plain(v), default=str) if isinstance(v, (dict, list)) else v
                        for v in row])
        return
    out.write("[")
    for i, row in enumerate(rows):
        out.write(",\n" if i else "\n")
        out.write(json.dumps({c: _plain(v) for c, v in zip(columns, row, strict=True)}, default=str,
                             allow_nan=False))
    out.write("\n]\n")
