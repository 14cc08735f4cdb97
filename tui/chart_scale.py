"""The loss chart's axis decisions, kept apart from drawing: linear or log scale, even ticks, compact numbers."""
from __future__ import annotations

import math

LOG_RATIO = 20.0  # losses spanning more than this factor read as a flat line at 0 on a linear axis
STEPS = (1, 2, 5)  # tick steps: 1, 2 or 5 times a power of ten


def choose_scale(lo: float, hi: float) -> str:
    """"log" when the positive losses lo..hi span more than LOG_RATIO; "linear" otherwise (any loss <= 0, or none)."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo <= 0 or hi < lo:
        return "linear"
    return "log" if hi / lo > LOG_RATIO else "linear"


def _step_candidates(raw: float):
    """1-2-5 steps from the one at or below `raw` upwards."""
    k = math.floor(math.log10(raw)) if raw > 0 else 0
    while True:
        for m in STEPS:
            yield m, k
        k += 1


def linear_ticks(lo: float, hi: float, max_ticks: int, integer: bool = False, extend: bool = True) -> list[float]:
    """Evenly spaced ticks on a 1-2-5 step, at most max_ticks of them (3 at least when extending).

    extend: the first and last tick enclose lo..hi (the axis is drawn from the first to the last tick); otherwise
    only the ticks inside lo..hi. integer: the step is a whole number (steps of training).
    """
    max_ticks = max(3 if extend else 2, max_ticks)  # two ticks cannot enclose a range that straddles a tick
    if hi < lo:
        lo, hi = hi, lo
    if hi == lo and not extend:
        return [lo] if not integer or lo == int(lo) else []
    if hi == lo:  # one value: a tick on it and one step around it
        pad = abs(lo) * 0.1 or 1.0
        lo, hi = lo - pad, hi + pad
    raw = (hi - lo) / (max_ticks - 1)
    for m, k in _step_candidates(raw / 10):
        step = m * 10.0 ** k
        if integer and step < 1:
            continue
        first, last = (math.floor(lo / step), math.ceil(hi / step)) if extend else (math.ceil(lo / step), math.floor(hi / step))
        if last - first + 1 <= max_ticks:
            digits = max(0, -k) + 1
            return [round(i * step, digits) for i in range(first, last + 1)]
    raise AssertionError("unreachable: steps grow without bound")


def log_ticks(lo: float, hi: float, max_ticks: int) -> tuple[list[float], tuple[float, float]]:
    """Ticks on a log axis for lo..hi (both > 0) and the axis' bounds: 1-2-5 within the decades when there is room
    for them, else every decade (every n-th when they are too many) between the decades enclosing lo..hi."""
    max_ticks = max(2, max_ticks)
    e0, e1 = math.floor(math.log10(lo) + 1e-12), math.ceil(math.log10(hi) - 1e-12)
    if e1 == e0:
        e1 += 1
    dense = [m * 10.0 ** e for e in range(e0, e1 + 1) for m in STEPS]
    bottom = max(t for t in dense if t <= lo * (1 + 1e-9))
    top = min(t for t in dense if t >= hi * (1 - 1e-9) and t > bottom)
    dense = [t for t in dense if bottom <= t <= top]
    if len(dense) <= max_ticks:
        return [float(f"{t:.1e}") for t in dense], (bottom, top)
    stride = 1
    while True:  # the smallest stride whose multiples inside e0..e1 are few enough: 1e-9, 1e-6, 0.001 read best
        ticks = [10.0 ** e for e in range(e0, e1 + 1) if e % stride == 0]
        if len(ticks) <= max_ticks:
            break
        stride += 1
    if len(ticks) >= 2:
        return ticks, (10.0 ** e0, 10.0 ** e1)
    stride = max(1, math.ceil((e1 - e0) / (max_ticks - 1)))
    top = e0 + stride * math.ceil((e1 - e0) / stride)  # too few of those: from the bottom decade up, every stride
    return [10.0 ** e for e in range(e0, top + 1, stride)], (10.0 ** e0, 10.0 ** top)


def _clean_exp(s: str) -> str:
    """'3.6e-011' / '1.2e+05' -> '3.6e-11' / '1.2e5'."""
    mant, _, exp = s.partition("e")
    sign = "-" if exp.startswith("-") else ""
    return f"{mant}e{sign}{exp.lstrip('+-').lstrip('0') or '0'}"


def fmt_num(v: float, sig: int = 3) -> str:
    """A loss as few characters as reads well: 17.9, 0.012, 3.6e-11, 1234, 1.2e5."""
    if v == 0:
        return "0"
    if not math.isfinite(v):
        return str(v)
    a = abs(v)
    if a < 1e-3 or a >= 1e5:
        return _sci(v, sig - 1)
    if a >= 10 ** sig:
        return f"{v:.0f}"
    return f"{v:.{sig}g}"


def _sci(v: float, sig: int, strip: bool = True) -> str:
    """Scientific notation with sig significant digits (trailing zeros dropped when strip): 3.6e-11, 1e-9."""
    s = f"{v:.{max(0, sig - 1)}e}"
    mant, _, exp = s.partition("e")
    if strip and "." in mant:
        mant = mant.rstrip("0").rstrip(".")
    return _clean_exp(f"{mant}e{exp}")


def tick_labels(ticks: list[float], scale: str) -> list[str]:
    """Labels for ticks from linear_ticks / log_ticks: as many decimals as the step needs, the same for all."""
    if not ticks:
        return []
    if scale == "log" or len(ticks) == 1:
        return [fmt_num(t, 2) for t in ticks]
    step = min(abs(b - a) for a, b in zip(ticks, ticks[1:], strict=False))
    k = math.floor(math.log10(step) + 1e-9)
    big = max(abs(t) for t in ticks)
    if big >= 1e5 or step < 1e-3:
        sig = max(1, math.floor(math.log10(big) + 1e-9) - k + 1)
        # the same digits for all, unless that is wider than the axis: then zeros dropped (-1e9 beside -9.99999e8),
        # or whole numbers where the step is (999995150 beside 999995200: 8 digits in scientific notation)
        choices = [["0" if t == 0 else _sci(t, sig, strip=strip) for t in ticks] for strip in (False, True)]
        if step >= 1:
            choices.append([f"{t:.0f}" for t in ticks])
        return next((c for c in choices if max(map(len, c)) <= 10), min(choices, key=lambda c: max(map(len, c))))
    d = max(0, -k)
    return [f"{t:.{d}f}" for t in ticks]


def step_label(step: int | float) -> str:
    """A training step for the x axis: 1200, 45000, 150k, 1.5M."""
    s = int(round(step))
    if abs(s) < 100_000:
        return str(s)
    for div, suffix in ((1_000_000, "M"), (1_000, "k")):
        if abs(s) >= div:
            q = s / div
            return f"{q:.3g}{suffix}"
    return str(s)


def segment_offsets(spans: list[tuple[float, float]]) -> list[float]:
    """Where each attempt's steps go on the x axis: attempts side by side, oldest first, so one that resumed from
    step 0 or from a checkpoint is drawn after the one before it (x = step + its offset), never over it. spans: each
    attempt's (first, last) step. An attempt that resumed past where the one before ended keeps its steps' place."""
    out: list[float] = []
    end = -math.inf
    for first, last in spans:
        off = max(out[-1] if out else 0.0, end + 1 - first)
        out.append(off)
        end = last + off
    return out


def segmented_ticks(spans: list[tuple[float, float]], offsets: list[float], width: int, label_w: int) -> tuple[list, list]:
    """x ticks (positions on the axis) and their labels (the steps) for attempts laid side by side: each attempt's
    first step (where it resumed), then its share of even ticks by its width; none closer than a label's width to
    the one before (an attempt's first step wins over the tick before it)."""
    x0, x1 = spans[0][0] + offsets[0], spans[-1][1] + offsets[-1]
    gap = label_w * max(x1 - x0, 1) / max(width - 10, 1)
    total = max(10, (width - 10) // max(8, label_w))
    ticks: list[tuple[float, float]] = []  # (x, step)
    for (first, last), off in zip(spans, offsets, strict=True):
        while ticks and first + off - ticks[-1][0] < gap:
            ticks.pop()
        ticks.append((first + off, first))
        share = max(2, round(total * (last - first + 1) / max(x1 - x0 + 1, 1)))
        for t in linear_ticks(first, last, share, integer=True, extend=False):
            if t + off - ticks[-1][0] >= gap:
                ticks.append((t + off, t))
    return [x for x, _ in ticks], [step_label(t) for _, t in ticks]
