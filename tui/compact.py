"""The compact per-rank view's decisions, pure: when it replaces the pane grid, which ranks come first, what a row says."""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..runners.evidence.words import cell_seconds
from . import marks
from .fit import fit

if TYPE_CHECKING:
    from .model import RankView, RunModel

COMPACT_ABOVE = 16  # more ranks than this: one row per rank instead of one pane per rank
GRID_MAX = 128  # the pane grid is never built for more ranks (1,024 panes would take seconds to mount)
TABLE_MIN = 5  # rows the compact table keeps before the loss chart gives its rows up
SORT_KEYS = ("rank", "step", "step_time", "loss")
SORT_WORDS = {"rank": "rank", "step": "step (lowest first)", "step_time": "step time (slowest first)",
              "loss": "loss (highest first)"}

# Why a rank is on top, worst first; the words are the row's marker (text, never colour alone). ROOT: the failed rank
# the crash verdict names as the root cause (or failed with it), above the ranks that failed after it.
ROOT, FAILED, STALLED, BEHIND, SLOW, OTHER = range(6)
MARKS = {ROOT: "✗", FAILED: "✗", STALLED: "⚠", BEHIND: "<", SLOW: "⚠", OTHER: " "}  # tui/marks.py's, and < behind


def want_compact(ranks: int, box_rows: int, grid_rows: int) -> bool:
    """Automatic choice: compact above COMPACT_ABOVE ranks, or when the pane grid would have to scroll because its
    panes cannot keep even their newest line in `box_rows` (tui/fit.py's arithmetic, the chart hidden)."""
    if ranks > COMPACT_ABOVE:
        return True
    if box_rows <= 0 or grid_rows <= 0:
        return False
    return fit(box_rows, grid_rows, 0).row is not None


def compact_chart(box_rows: int, chart: int, ranks: int) -> int:
    """Rows of the loss chart above the compact table: `chart` when the table keeps TABLE_MIN rows (and a header)
    or all its ranks, else 0 (hidden)."""
    need = 1 + min(ranks, TABLE_MIN)
    return chart if box_rows - chart >= need else 0


@dataclass(frozen=True)
class Facts:
    """What sorting needs of one rank."""

    rank: int
    trouble: int  # ROOT ... OTHER
    step: int | None = None
    step_time: float | None = None
    loss: float | None = None


def trouble(rv: RankView, stalled: frozenset | set, laggards: frozenset | set, root: frozenset | set = frozenset()
            ) -> int:
    s = rv.status
    if s in ("failed", "killed") or (s == "exited" and rv.returncode):
        return ROOT if rv.rank in root else FAILED
    if s == "stalled" or rv.rank in stalled:
        return STALLED
    if rv.rank in laggards:
        return BEHIND
    if s == "slow":
        return SLOW
    return OTHER


def facts(rv: RankView, stalled, laggards, root=frozenset()) -> Facts:
    return Facts(rv.rank, trouble(rv, stalled, laggards, root), rv.step, rv.step_time, rv.loss)


def root_ranks(model: RunModel) -> frozenset:
    """The crash verdict's root cause and the ranks that failed with it."""
    c = model.crash
    if c is None or c.root_rank is None:
        return frozenset()
    return frozenset((c.root_rank, *c.together))


def _key(f: Facts, by: str) -> tuple:
    v: tuple[float, ...]
    # Within a trouble group the user's key puts the worst first; a rank without the value comes after those with it.
    if by == "step":
        v = (f.step is None, f.step if f.step is not None else 0)
    elif by == "step_time":
        v = (f.step_time is None, -(f.step_time or 0.0))
    elif by == "loss":
        x = f.loss
        if x is None:
            v = (2, 0.0)
        elif math.isnan(x):
            v = (0, 0.0)  # a NaN loss is the worst there is
        else:
            v = (1, -x)
    else:
        v = ()
    return (f.trouble, *v, f.rank)


def order(rows: Iterable[Facts], by: str = "rank") -> list[int]:
    """Ranks top to bottom: the crash's root cause, the other failed, stalled, behind in collectives
    (RunModel.laggards), slow, then the rest; within each, by the user's key (SORT_KEYS, worst first), then by rank."""
    if by not in SORT_KEYS:
        raise ValueError(f"unknown sort key {by!r}")
    return [f.rank for f in sorted(rows, key=lambda f: _key(f, by))]


def next_sort(by: str) -> str:
    return SORT_KEYS[(SORT_KEYS.index(by) + 1) % len(SORT_KEYS)]


def model_order(model: RunModel, by: str = "rank") -> list[int]:
    stalled = frozenset(model.stall.stalled) if model.stall is not None else frozenset()
    lag, root = frozenset(model.laggards), root_ranks(model)
    return order((facts(model.rank(r), stalled, lag, root) for r in model.rank_ids()), by)


# -- what a row says ------------------------------------------------------------------------------

COLUMNS = ("", "rank", "node", "status", "step", "step time", "loss", "cpu", "rss", "last line")
SORT_COLUMN = {"rank": "rank", "step": "step", "step_time": "step time", "loss": "loss"}  # the header marks it


def status_words(rv: RankView, why: int) -> str:
    b = rv.badge()
    said = _trouble_words(b, why)
    past = rv.past(short=True)  # a rank that was slow or stalled and went on (exited ok): its cell says so too
    return said + (f" · {past}" if past and said == b and not b.startswith("failed") else "")


def _trouble_words(b: str, why: int) -> str:
    if why == ROOT:
        return f"{b} · root cause"
    if why == BEHIND:
        return f"{b} · BEHIND"
    if why == STALLED and not b.startswith("stalled"):
        return f"{b} · STALLED"
    return b


def progress_words(rv: RankView, steps: int | None) -> str:
    if rv.step is None:
        return rv.phase or "-"
    return f"{rv.step}/{steps}" if steps else str(rv.step)


def step_time_words(t: float | None) -> str:
    return "-" if t is None else cell_seconds(t)


def loss_words(x: float | None) -> str:
    if x is None:
        return "-"
    if math.isnan(x) or math.isinf(x):
        return str(x)
    return f"{x:.4g}"


def row_cells(rv: RankView, why: int, steps: int | None, where: str, human_bytes) -> tuple[str, ...]:
    """The row's cells in COLUMNS order (the last line raw: the widget cleans and cuts it)."""
    # a running rank with no line of its own says what is known of it instead ("output not readable")
    last = rv.lines[-1][2] if rv.lines else f"({rv.detail})" if rv.detail and rv.status == "running" else ""
    return (marks.mark(rv.badge()) or MARKS[why], str(rv.rank), where or "-", status_words(rv, why), progress_words(rv, steps),
            step_time_words(rv.step_time), loss_words(rv.loss),
            f"{rv.cpu:.0f}%" if rv.cpu is not None else "-", human_bytes(rv.rss), last)


def goto_rank(text: str, ids: Iterable[int]) -> tuple[int | None, str]:
    """The `g` box's answer: (rank, "") or (None, why not)."""
    t = text.strip()
    if not t.isdigit():
        return None, f"not a rank number: {t!r}" if t else "no rank given"
    r = int(t)
    if r not in set(ids):
        return None, f"no rank {r} in this run"
    return r, ""
