"""The bench's figures in words: min / median / max of repeated measurements, and how each is printed."""
from __future__ import annotations

import statistics


def mmm(xs):
    """{'min', 'median', 'max', 'n'} of the numbers in xs (None where empty)."""
    xs = [x for x in xs if x is not None]
    if not xs:
        return {"min": None, "median": None, "max": None, "n": 0}
    return {"min": min(xs), "median": statistics.median(xs), "max": max(xs), "n": len(xs)}


def fmt(v, digits=2, unit=""):
    if v is None:
        return "-"
    if isinstance(v, float) and abs(v) >= 10_000:
        return f"{v:,.0f}{unit}"
    return f"{v:.{digits}f}{unit}"


def fmt3(d, digits=2, unit=""):
    if not d or d.get("n", 0) == 0:
        return "-"
    if d["n"] == 1:
        return fmt(d["median"], digits, unit)
    return f"{fmt(d['min'], digits)} / {fmt(d['median'], digits)} / {fmt(d['max'], digits)}{unit}"
