"""A rank's series (loss, step time) over the whole run in bounded memory, split into the run's attempts: pure."""
from __future__ import annotations

import math
from array import array
from collections import deque
from itertools import islice

# One bucket: how many points it holds, then its first, lowest, highest and last point, each (x, y).
N, FIRST, LOW, HIGH, LAST = 0, 1, 3, 5, 7
WIDE = 9  # doubles a bucket takes


class Thinned:
    """The whole of one series in at most `cap` buckets of `width` consecutive points each: every bucket keeps its
    first, lowest, highest and last point, so the series' first and last points and every spike survive however
    long the run. When the buckets are full, neighbours merge pairwise and `width` doubles. Points are folded in a
    bucket's worth at a time (min / max over a slice: the cost per point is C's). NaN / inf points are counted
    (`not_finite`), not kept."""

    __slots__ = ("cap", "width", "data", "not_finite", "count")

    def __init__(self, cap: int = 256) -> None:
        self.cap = max(2, cap)
        self.width = 1
        self.data = array("d")  # WIDE doubles per bucket
        self.not_finite = 0
        self.count = 0  # finite points ever added

    def __len__(self) -> int:
        return len(self.data) // WIDE

    def add(self, x: float, y: float) -> None:
        self.extend(((x, y),))

    def extend(self, points) -> None:
        pts = [p for p in points if math.isfinite(p[1])]
        self.not_finite += len(points) - len(pts)
        self.count += len(pts)
        i, n = 0, len(pts)
        while i < n:
            d = self.data
            held = int(d[-WIDE + N]) if d else self.width
            if held < self.width:  # room in the newest bucket
                chunk = pts[i:i + self.width - held]
                self._into_last(chunk)
            elif len(self) >= self.cap:
                self._halve()
                continue
            else:
                chunk = pts[i:i + self.width]
                lo, hi = min(chunk, key=_y), max(chunk, key=_y)
                d.extend((len(chunk), *chunk[0], *lo, *hi, *chunk[-1]))
            i += len(chunk)

    def _into_last(self, chunk: list) -> None:
        d, b = self.data, len(self.data) - WIDE
        d[b + N] += len(chunk)
        lo, hi = min(chunk, key=_y), max(chunk, key=_y)
        if lo[1] < d[b + LOW + 1]:
            d[b + LOW], d[b + LOW + 1] = lo
        if hi[1] > d[b + HIGH + 1]:
            d[b + HIGH], d[b + HIGH + 1] = hi
        d[b + LAST], d[b + LAST + 1] = chunk[-1]

    def _halve(self) -> None:
        """Merge neighbouring buckets pairwise; the width doubles (a lone last bucket keeps filling)."""
        d, out = self.data, array("d")
        n = len(self)
        for i in range(0, n - 1, 2):
            a, b = i * WIDE, (i + 1) * WIDE
            lo = a if d[a + LOW + 1] <= d[b + LOW + 1] else b
            hi = a if d[a + HIGH + 1] >= d[b + HIGH + 1] else b
            out.extend((d[a + N] + d[b + N], d[a + FIRST], d[a + FIRST + 1], d[lo + LOW], d[lo + LOW + 1],
                        d[hi + HIGH], d[hi + HIGH + 1], d[b + LAST], d[b + LAST + 1]))
        if n % 2:
            out.extend(d[(n - 1) * WIDE:n * WIDE])
        self.data = out
        self.width *= 2

    def points(self) -> list[tuple[float, float]]:
        """The kept points in order: each bucket's first, lowest, highest and last (each once), by x within it."""
        d, out = self.data.tolist(), []
        for b in range(0, len(d), WIDE):
            out += _four((int(d[b + FIRST]), d[b + FIRST + 1]), (int(d[b + LOW]), d[b + LOW + 1]),
                         (int(d[b + HIGH]), d[b + HIGH + 1]), (int(d[b + LAST]), d[b + LAST + 1]))
        return out


def _four(first: tuple, lo: tuple, hi: tuple, last: tuple) -> list:
    """A stretch's first, lowest, highest and last point in x order, each once."""
    mid = (lo, hi) if lo[0] <= hi[0] else (hi, lo)
    out = [first]
    for p in (*mid, last):
        if p != out[-1]:
            out.append(p)
    return out


def extremes(points: list, n: int) -> list:
    """About n of the points: each of n / 4 stretches' first, lowest, highest and last (a spike stays drawn)."""
    if len(points) <= n:
        return points
    width = -(-len(points) // max(1, n // 4))
    out: list = []
    for i in range(0, len(points), width):
        chunk = points[i:i + width]
        out += _four(chunk[0], min(chunk, key=_y), max(chunk, key=_y), chunk[-1])
    return out


def _y(p: tuple) -> float:
    return p[1]


class Segmented:
    """One rank's series for the chart: the recent window (`recent`: every point, the newest `maxlen`; the deque the
    model already keeps) and the whole run, both split where an attempt of the run began. The whole run is the
    recent window's points plus, thinned (`Thinned`), those it let go: a point is folded in only when the window
    is about to drop it, half a window at a time, so keeping the whole run costs next to nothing a point."""

    __slots__ = ("recent", "cap", "count", "folded", "starts", "whole")

    def __init__(self, recent: deque, cap: int = 256) -> None:
        self.recent = recent
        self.cap = cap
        self.count = 0  # points ever added: the recent window holds the newest len(recent) of them
        self.folded = 0  # points folded into `whole` (the oldest ones, in order)
        self.starts: list[tuple[int, int]] = []  # (attempt, count before its first point), oldest first
        self.whole: list[Thinned] = []  # each attempt's folded points, as `starts`

    def add(self, points, attempt: int = 0) -> None:
        """Append points [(x, y), ...] (a list or tuple) of `attempt` (the run's attempt they came in)."""
        if not points:
            return
        if not self.starts or self.starts[-1][0] != attempt:
            self.starts.append((attempt, self.count))
            self.whole.append(Thinned(self.cap))
        keep = self.recent.maxlen
        if keep is not None and self.count + len(points) - self.folded > keep:  # the window would drop unfolded points
            self._fold(max(self.count + len(points) - keep, self.count - keep // 2), points)
        self.recent.extend(points)
        self.count += len(points)

    def _fold(self, upto: int, points) -> None:
        """Fold every point up to count `upto` (some of them perhaps among `points`, not added yet) into `whole`."""
        window = list(self.recent)
        base = self.count - len(window)  # the count of the window's oldest point
        for i, (_, at) in enumerate(self.starts):
            end = self.starts[i + 1][1] if i + 1 < len(self.starts) else self.count + len(points)
            lo, hi = max(at, self.folded), min(end, upto)
            if hi <= lo:
                continue
            chunk = [window[c - base] for c in range(lo, min(hi, self.count))]
            if hi > self.count:
                chunk += list(points[:hi - self.count])
            self.whole[i].extend(chunk)
        self.folded = max(self.folded, upto)

    def _split(self, pts: list, first: int) -> list[tuple[int, int, list]]:
        """(index, attempt, points) per attempt of `pts`, whose oldest is count `first`."""
        out = []
        last = first + len(pts)
        for i, (attempt, at) in enumerate(self.starts):
            end = self.starts[i + 1][1] if i + 1 < len(self.starts) else last
            lo, hi = max(at, first) - first, min(end, last) - first
            if hi > lo:
                out.append((i, attempt, pts if hi - lo == len(pts) else pts[lo:hi]))
        return out

    def recent_segments(self) -> list[tuple[int, list]]:
        """The recent window as (attempt, points) per attempt it spans, oldest first."""
        pts = list(self.recent)
        if not self.starts:  # points added to the deque around this class (not through add)
            return [(0, pts)] if pts else []
        return [(a, p) for _, a, p in self._split(pts, self.count - len(pts))]

    def whole_segments(self) -> list[tuple[int, list]]:
        """The whole run, as (attempt, points) per attempt, oldest first: the folded points thinned, then those of
        the recent window not folded yet."""
        pts = list(self.recent)
        base = self.count - len(pts)
        fresh = {i: p for i, _, p in self._split(pts[self.folded - base:], self.folded)}
        out = []
        for i, (attempt, _) in enumerate(self.starts):
            seg = self.whole[i].points() + fresh.get(i, [])
            if seg:
                out.append((attempt, seg))
        return out

    def not_finite(self) -> int:
        """NaN / inf points of the whole run."""
        unfolded = islice(self.recent, self.folded - (self.count - len(self.recent)), None)
        return sum(t.not_finite for t in self.whole) + sum(1 for _, y in unfolded if not math.isfinite(y))

    def dropped(self) -> bool:
        """The recent window no longer holds every point: the whole run differs from it."""
        return self.count > len(self.recent)
