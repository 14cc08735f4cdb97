"""Live loss of every rank (or min/median/max over many ranks), its legend beside the curves, the spread in the title."""
from __future__ import annotations

import math
from dataclasses import dataclass

from rich.style import Style
from rich.text import Text
from textual.reactive import reactive
from textual_plotext import PlotextPlot

from ..chart_scale import (
    choose_scale,
    fmt_num,
    linear_ticks,
    log_ticks,
    segment_offsets,
    segmented_ticks,
    step_label,
    tick_labels,
)
from ..history import extremes
from ..model import RunModel

POINT_BUDGET = 1000  # points over all series: plotext's braille drawing is the cost
RANK_SERIES = 8  # up to this many ranks get a curve each; more are drawn as min / median / max over the ranks
SUMMARY_BINS = 250  # step bins of the min / median / max curves
SUMMARY_POINTS = 64_000  # rank-points read for them: fewer bins above 256 ranks (1,024 ranks: 62 bins, ~40 ms)
LEGEND_MIN_PLOT = 40  # columns the plot keeps before the legend column is dropped
# Distinct on a dark and a light background; RGB, so the legend (rich) and the curves (plotext) show the same colour.
PALETTE = ((86, 156, 245), (245, 166, 35), (87, 209, 99), (242, 92, 84),
           (180, 142, 240), (63, 208, 212), (240, 125, 200), (212, 212, 90))
SUMMARY_COLORS = {"max": (242, 92, 84), "median": (86, 156, 245), "min": (87, 209, 99)}
# Without colour (NO_COLOR) every curve is the same grey: each gets its own mark instead, in the plot and the legend.
MARKS = ("o", "+", "x", "*", "#", "%", "@", "=")
SUMMARY_MARKS = {"max": "^", "median": "o", "min": "v"}


@dataclass(frozen=True)
class Series:
    name: str  # "r3", or "max" / "median" / "min" over the ranks
    color: tuple[int, int, int]
    xs: list
    ys: list
    last: float | None  # the newest value it shows, for the legend


@dataclass(frozen=True)
class ChartData:
    """What the chart draws, decided from the model without drawing (chart_data, step_chart_data)."""
    series: tuple[Series, ...] = ()  # a rank's (or a summary's) curve is one Series per attempt, under one name
    lo: float = math.nan  # smallest and largest finite value drawn
    hi: float = math.nan
    scale: str = "linear"
    steps: str = ""  # which steps are drawn, in words
    kept: str = ""  # "" or how many points of each rank the model keeps, when older ones may be gone
    thinned: str = ""  # "" or how the points were thinned / summarised
    spread: str = ""  # the spread across ranks at the newest common step, in words
    ranks: int = 0
    summary: bool = False  # the curves are min / median / max over `ranks` ranks
    not_finite: int = 0  # NaN / inf values in the window, not drawn
    what: str = "loss"  # "loss", or "step time" (the straggler view)
    whole: bool = False  # the whole run, thinned, rather than the recent window
    spans: tuple = ()  # ((first step, last step, x offset), ...) per attempt, oldest first, when more than one
    breaks: tuple = ()  # x where each attempt after the first begins: a vertical line each
    attempts: str = ""  # "" or the attempts drawn, in words
    hint: str = ""  # "" or the key to the other window ("w: whole run" when the recent window lost older points)
    stragglers: int = 0  # the step-time view of many ranks: the slowest this many, each a curve, and the median


@dataclass(frozen=True)
class Axes:
    """The axes one redraw used: the scale, y ticks (values, labels, bounds) and x ticks."""
    scale: str
    yticks: list
    ylabels: list
    ylim: tuple[float, float]
    xticks: list
    xlabels: list


def thin(points: list, n: int) -> tuple[list, int]:
    """Every k-th point plus the last, at most about n, so long runs stay cheap to draw; and k."""
    if len(points) <= n:
        return points, 1
    k = math.ceil(len(points) / n)
    out = points[::k]
    if out[-1] is not points[-1]:
        out.append(points[-1])
    return out, k


def squeeze(points: list, n: int) -> list:
    """About n of the points, each stretch's first, lowest, highest and last kept (a spike stays drawn)."""
    return extremes(points, n)


def spread(model: RunModel) -> tuple[float, float, int] | None:
    """(min, max, step) of the losses at the latest step every reporting rank has reached."""
    series = [rv.losses for rv in model.ranks.values() if rv.losses]
    if not series:
        return None
    step = min(s[-1][0] for s in series)
    vals = []
    for s in series:
        for st, v in reversed(s):
            if st <= step:
                vals.append(v)
                break
    return (min(vals), max(vals), step) if vals else None


def _finite(pts: list) -> tuple[list, list, int]:
    xs, ys = [], []
    for s, v in pts:
        if math.isfinite(v):
            xs.append(s)
            ys.append(v)
    return xs, ys, len(pts) - len(xs)


def _summary(sampled: list[list], x0: float, x1: float, bins: int) -> tuple[Series, ...]:
    """min / median / max over the ranks, per step bin, of each rank's newest loss in the bin (points thinned)."""
    width = max(1.0, (x1 - x0 + 1) / bins)
    vals: dict[int, list] = {}
    at: dict[int, int] = {}
    for pts in sampled:  # each rank's points come in step order: the last one in a bin is its newest there
        prev: int | None = None
        last: tuple[int, float] = (0, 0.0)  # read only once prev is set, which sets it too
        for s, v in pts:
            if not math.isfinite(v):
                continue
            b = int((s - x0) / width)
            if b != prev and prev is not None:
                vals.setdefault(prev, []).append(last[1])
                at[prev] = max(at.get(prev, last[0]), last[0])
            prev, last = b, (s, v)
        if prev is not None:
            vals.setdefault(prev, []).append(last[1])
            at[prev] = max(at.get(prev, last[0]), last[0])
    order = sorted(vals)
    xs = [at[b] for b in order]
    cols: dict[str, list[float]] = {"max": [], "median": [], "min": []}
    for b in order:
        v = sorted(vals[b])
        cols["max"].append(v[-1])
        cols["median"].append(v[len(v) // 2])
        cols["min"].append(v[0])
    return tuple(Series(name, SUMMARY_COLORS[name], xs, ys, ys[-1] if ys else None) for name, ys in cols.items())


Segments = list  # [(attempt, [(step, value), ...]), ...], oldest attempt first


def _segments(model: RunModel, attr: str, whole: bool) -> dict[int, Segments]:
    """rank -> its series (`attr`: loss_series / step_series) by attempt: the recent window or the whole run."""
    out = {}
    for r, rv in model.ranks.items():
        s = getattr(rv, attr)
        segs = s.whole_segments() if whole else s.recent_segments()
        if segs:
            out[r] = segs
    return out


@dataclass(frozen=True)
class Layout:
    """Where each attempt's steps go on the x axis (chart_scale.segment_offsets)."""
    offsets: dict  # attempt -> x offset
    spans: tuple  # ((first step, last step, offset), ...) oldest first
    breaks: tuple  # x where each later attempt begins

    def place(self, attempt: int, pts: list) -> list:
        off = self.offsets[attempt]
        return pts if not off else [(x + off, y) for x, y in pts]


def layout(per_rank: dict[int, Segments]) -> Layout:
    """Attempts side by side on the x axis, each over the steps its ranks reported in it."""
    rng: dict[int, list] = {}
    for segs in per_rank.values():
        for a, pts in segs:
            lo, hi = min(pts[0][0], pts[-1][0]), max(pts[0][0], pts[-1][0])
            if a in rng:
                rng[a][0], rng[a][1] = min(rng[a][0], lo), max(rng[a][1], hi)
            else:
                rng[a] = [lo, hi]
    order = sorted(rng)
    spans = [(rng[a][0], rng[a][1]) for a in order]
    offs = segment_offsets(spans)
    breaks = tuple((spans[i - 1][1] + offs[i - 1] + spans[i][0] + offs[i]) / 2 for i in range(1, len(order)))
    return Layout(dict(zip(order, offs, strict=True)), tuple((a, b, o) for (a, b), o in zip(spans, offs, strict=True)),
                  breaks)


def _attempts_text(lay: Layout) -> str:
    """'2 attempts (attempt 1 from step 500)' when more than one attempt is drawn."""
    if len(lay.spans) < 2:
        return ""
    newest = max(lay.offsets)
    first = lay.spans[-1][0]
    return f"{len(lay.spans)} attempts (attempt {newest} from step {step_label(first)})"


def _hint(model: RunModel, attr: str, whole: bool) -> str:
    if whole:
        return "w: recent"
    return "w: whole run" if any(getattr(rv, attr).dropped() for rv in model.ranks.values()) else ""


def whole_differs(model: RunModel, what: str = "loss") -> bool:
    """The recent window lost a rank's older points: the whole run shows more than it."""
    attr = "loss_series" if what == "loss" else "step_series"
    return any(getattr(rv, attr).dropped() for rv in model.ranks.values())


def _thin_segments(segs: Segments, n: int, whole: bool) -> tuple[Segments, int]:
    """A rank's segments with about n points over them all (each its share); and the recent window's k."""
    total = sum(len(p) for _, p in segs) or 1
    out, every = [], 1
    for a, pts in segs:
        share = max(2, n * len(pts) // total)
        if whole:
            out.append((a, squeeze(pts, share)))
        else:
            kept, k = thin(pts, share)
            every = max(every, k)
            out.append((a, kept))
    return out, every


def _rank_curves(r: int, color, segs: Segments, lay: Layout) -> tuple[list[Series], int]:
    """One rank's curve, a Series per attempt (no line joins two attempts); the NaN/inf not drawn."""
    out, bad_all, last = [], 0, None
    for a, pts in segs:
        xs, ys, bad = _finite(lay.place(a, pts))
        bad_all += bad
        if xs:
            last = ys[-1]
            out.append((xs, ys))
    return [Series(f"r{r}", color, xs, ys, last) for xs, ys in out], bad_all


def _summaries(sampled: dict[int, list], lay: Layout, bins: int, names=("max", "median", "min")) -> list[Series]:
    """min / median / max (those of `names`) per attempt, each attempt its share of the bins by its width."""
    total = sum(hi - lo + 1 for lo, hi, _ in lay.spans) or 1
    out = []
    for (lo, hi, off), a in zip(lay.spans, sorted(lay.offsets), strict=True):
        if not sampled.get(a):
            continue
        n = max(8, bins * (hi - lo + 1) // total)
        out += [s for s in _summary(sampled[a], lo + off, hi + off, n) if s.name in names and s.xs]
    return out


def _bounds(series) -> tuple[float, float]:
    ys_all = [v for s in series for v in s.ys]
    return (min(ys_all), max(ys_all)) if ys_all else (math.nan, math.nan)


def _steps_text(lay: Layout, model: RunModel) -> str:
    x0, x1 = lay.spans[0][0], lay.spans[-1][1]
    if len(lay.spans) > 1:
        text = "steps " + " | ".join(f"{step_label(a)}–{step_label(b)}" for a, b, _ in lay.spans)
    else:
        text = f"steps {step_label(x0)}–{step_label(x1)}"
    return text + (f" of {step_label(model.steps)}" if model.steps else "")


def chart_data(model: RunModel, budget: int = POINT_BUDGET, columns: int | None = None,
               whole: bool = False) -> ChartData:
    """The loss curves to draw, the scale for them and what the title says about the window shown.

    columns: the chart's width in cells, when known: a series gets no more points than the two braille dots of
    a cell across it can show. whole: the whole run (thinned, spikes kept) rather than the recent window.
    """
    per_rank = _segments(model, "loss_series", whole)
    ranks = sorted(per_rank)
    hint = _hint(model, "loss_series", whole)
    if not ranks:
        return ChartData(ranks=len(model.ranks), whole=whole, hint=hint)
    lay = layout(per_rank)
    summary = len(ranks) > RANK_SERIES
    dots = 2 * columns if columns else budget
    bins = max(30, min(SUMMARY_BINS, dots, SUMMARY_POINTS // len(ranks)))
    per_series = max(30, min(budget // len(ranks), dots)) if not summary else bins
    series: list[Series] = []
    sampled: dict[int, list] = {}
    not_finite, every, full = 0, 1, 0  # full: ranks whose window holds only their newest points
    for i, r in enumerate(ranks):
        losses = model.ranks[r].losses
        if not whole and losses.maxlen is not None and len(losses) >= losses.maxlen:
            full = losses.maxlen
        segs, k = _thin_segments(per_rank[r], per_series, whole)
        every = max(every, k)
        if summary:
            for a, pts in segs:
                sampled.setdefault(a, []).append(lay.place(a, pts))
                not_finite += sum(1 for _, v in pts if not math.isfinite(v))
            continue
        curves, bad = _rank_curves(r, PALETTE[i % len(PALETTE)], segs, lay)
        series += curves
        not_finite += bad
    if summary:
        series = _summaries(sampled, lay, bins)
    if whole:
        not_finite = sum(model.ranks[r].loss_series.not_finite() for r in ranks)
    lo, hi = _bounds(series)
    kept = f"each rank's last {full} points" if full else ""
    how = f"min/median/max of {len(ranks)} ranks" if summary else f"every {_ordinal(every)} point" if every > 1 else ""
    if whole:
        how = ", ".join(p for p in (how if summary else "", "lows and highs kept") if p)
    sp = spread(model)
    spread_text = ""
    if sp and len(ranks) > 1:
        a, b, step = sp
        spread_text = f"spread at step {step_label(step)}: {fmt_num(b - a)} ({fmt_num(a)}–{fmt_num(b)})"
    return ChartData(tuple(series), lo, hi, choose_scale(lo, hi), _steps_text(lay, model), kept, how, spread_text,
                     len(ranks), summary, not_finite, "loss", whole, lay.spans if len(lay.spans) > 1 else (),
                     lay.breaks, _attempts_text(lay), hint)


STRAGGLERS = 3  # the step-time view of more than RANK_SERIES ranks: the slowest this many, each a curve, and the median
STRAGGLER_COLORS = (PALETTE[3], PALETTE[1], PALETTE[4])


def slowest(per_rank: dict[int, Segments], k: int) -> list[int]:
    """The k ranks whose steps took longest on average over the points shown, slowest first."""
    def mean(segs: Segments) -> float:
        ys = [y for _, pts in segs for _, y in pts if math.isfinite(y)]
        return sum(ys) / len(ys) if ys else -math.inf
    return sorted(per_rank, key=lambda r: (-mean(per_rank[r]), r))[:k]


def step_chart_data(model: RunModel, budget: int = POINT_BUDGET, columns: int | None = None,
                    whole: bool = False) -> ChartData:
    """The straggler view: each rank's step time over the steps (the engine's, Progress.step_time), or above
    RANK_SERIES ranks the STRAGGLERS slowest ranks' and the median over every rank."""
    per_rank = _segments(model, "step_series", whole)
    ranks = sorted(per_rank)
    hint = _hint(model, "step_series", whole)
    if not ranks:
        return ChartData(ranks=len(model.ranks), what="step time", whole=whole, hint=hint)
    lay = layout(per_rank)
    many = len(ranks) > RANK_SERIES
    dots = 2 * columns if columns else budget
    bins = max(30, min(SUMMARY_BINS, dots, SUMMARY_POINTS // len(ranks)))
    drawn = slowest(per_rank, STRAGGLERS) if many else ranks
    per_series = max(30, min(budget // (len(drawn) + many), dots))
    series: list[Series] = []
    every = 1
    for i, r in enumerate(drawn):
        segs, k = _thin_segments(per_rank[r], per_series, whole)
        every = max(every, k)
        color = STRAGGLER_COLORS[i % len(STRAGGLER_COLORS)] if many else PALETTE[ranks.index(r) % len(PALETTE)]
        series += _rank_curves(r, color, segs, lay)[0]
    if many:
        sampled: dict[int, list] = {}
        for r in ranks:
            for a, pts in _thin_segments(per_rank[r], bins, whole)[0]:
                sampled.setdefault(a, []).append(lay.place(a, pts))
        series += _summaries(sampled, lay, bins, names=("median",))
    lo, hi = _bounds(series)
    how = f"the {len(drawn)} slowest of {len(ranks)} ranks and the median" if many else ""
    how = ", ".join(p for p in (how, "lows and highs kept" if whole else f"every {_ordinal(every)} point"
                                if every > 1 else "") if p)
    return ChartData(tuple(series), lo, hi, choose_scale(lo, hi), _steps_text(lay, model), "", how, "", len(ranks),
                     False, 0, "step time", whole, lay.spans if len(lay.spans) > 1 else (), lay.breaks,
                     _attempts_text(lay), hint, len(drawn) if many else 0)


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def title_text(data: ChartData, width: int) -> str:
    """The title line: what is drawn and how, its parts dropped from the least useful while it is too wide."""
    what = data.what + (", whole run" if data.whole else "")
    if not data.series:
        told = "no loss reported yet" if data.what == "loss" else "no step timed yet"
        return f"{what} ({told})" + (f" · {data.hint}" if data.hint else "")
    head = what + (", log scale" if data.scale == "log" else "") + (" (s)" if data.what == "step time" else "")
    nan = f"{data.not_finite} NaN/inf not drawn" if data.not_finite else ""
    # (the lower, the longer it stays; its place; text): what the curves are stays longest
    parts = [(0, 0, head), (1, 1, data.steps), (5, 2, f"({data.kept})" if data.kept else ""), (2, 3, data.thinned),
             (1.5, 4, data.attempts), (4, 5, data.spread), (3, 6, nan), (4.5, 7, data.hint)]
    parts = [p for p in parts if p[2]]
    while len(parts) > 1 and len(_joined(parts)) > width - 4:  # plotext leaves out a title any longer
        parts.remove(max(parts))
    return _joined(parts)


def _joined(parts: list) -> str:
    out = ""
    for _, _, text in sorted(parts, key=lambda p: p[1]):
        out += (" " if text.startswith("(") else " · ") + text if out else text
    return out


def axes_for(data: ChartData, width: int, height: int) -> Axes:
    """Even ticks for a plot of width x height cells: about one y tick every other canvas row, x labels 10 apart."""
    canvas_rows = height - 4  # title, the frame's two lines, the x tick labels
    y_ticks = max(2, min(8, canvas_rows // 2 + 1))
    lo, hi = data.lo, data.hi
    if data.scale == "log":
        yt, ylim = log_ticks(lo, hi, y_ticks)
    else:
        yt = linear_ticks(lo, hi, y_ticks)
        ylim = (yt[0], yt[-1])
    xs = [x for s in data.series for x in (s.xs[0], s.xs[-1])]
    x0, x1 = min(xs), max(xs)
    label_w = max(len(step_label(x0)), len(step_label(x1))) + 4
    if data.spans:  # attempts side by side: each its own steps
        xt, xl = segmented_ticks([(a, b) for a, b, _ in data.spans], [o for _, _, o in data.spans], width, label_w)
        return Axes(data.scale, yt, tick_labels(yt, data.scale), ylim, xt, xl)
    xt = linear_ticks(x0, x1, max(2, min(12, (width - 10) // max(8, label_w))), integer=True, extend=False) \
        if x1 > x0 else [x0]
    return Axes(data.scale, yt, tick_labels(yt, data.scale), ylim, xt, [step_label(x) for x in xt])


def marks(data: ChartData) -> dict[str, str]:
    """Each series' own plot mark for a chart drawn without colour."""
    if data.summary:
        return {s.name: SUMMARY_MARKS.get(s.name, "o") for s in data.series}
    names = list(dict.fromkeys(s.name for s in data.series))
    return {n: MARKS[i % len(MARKS)] for i, n in enumerate(names)}


def legend_entries(data: ChartData) -> list[Series]:
    """One entry a name (a curve drawn in several attempts is one entry), with its newest value."""
    by_name: dict[str, Series] = {}
    for s in data.series:
        by_name[s.name] = s if s.last is not None or s.name not in by_name else by_name[s.name]
    return list(by_name.values())


def legend_lines(data: ChartData, rows: int, mono: bool = False) -> list[Text]:
    """The legend column: a coloured line (`mono`: the series' mark) and the series' name and newest value, one
    series a row."""
    out = []
    mark = marks(data) if mono else {}
    entries = legend_entries(data)
    if data.summary:
        entries.sort(key=lambda s: ("max", "median", "min").index(s.name))
    many = data.summary or data.stragglers
    room = rows - (1 if many else 0)
    shown = entries if len(entries) <= room else entries[:max(0, room - 1)]
    wide = max((len(s.name) for s in entries), default=3)
    for s in shown:
        t = Text(f"{mark[s.name] * 2} " if mono else "━━ ", style=Style(color=f"rgb{s.color}", bold=True))
        t.append(s.name.ljust(6 if data.summary else max(3, wide)))
        if s.last is not None:
            t.append(" " + fmt_num(s.last), style="dim" if not data.summary else "")
        out.append(t)
    if len(shown) < len(entries):
        out.append(Text(f"+{len(entries) - len(shown)} more", style="dim"))
    if many:
        out.append(Text(f"of {data.ranks} ranks", style="dim"))
    return out


BREAK_COLOR = (150, 150, 150)  # the line where an attempt begins


def draw(plt, data: ChartData, width: int, height: int, mono: bool = False) -> Axes | None:
    """Set up plotext's figure `plt` (cleared) to draw `data` at width x height (`mono`: each series with its own
    mark, not colour); the axes it chose."""
    plt.clear_data()
    plt.clear_figure()
    plt.title(title_text(data, width))
    if not data.series:
        plt.plot([0], [0], marker=" ")
        return None
    axes = axes_for(data, width, height)
    mark = marks(data) if mono else {}
    for x in data.breaks:  # an attempt begins: drawn first, the curves over it
        plt.vline(x, BREAK_COLOR)
    for s in data.series:
        plt.plot(s.xs, s.ys, marker=mark.get(s.name, "braille"), color=s.color)
    if axes.scale == "log":
        plt.yscale("log")
        plt.ylim(math.log10(axes.ylim[0]), math.log10(axes.ylim[1]))  # plotext takes log-scale limits as logs
    else:
        plt.ylim(*axes.ylim)
    plt.yticks(axes.yticks, axes.ylabels)
    plt.xticks(axes.xticks, axes.xlabels)
    return axes


class LossChart(PlotextPlot):
    """Draws ``model``'s losses (or, `what` "step time", each rank's step times: the straggler view) whenever
    ``points`` (the model's loss_version, or step_version: `version()`) moves: the recent window, or the whole run thinned (`w`; the default once
    a run whose window lost older points has ended)."""

    points: reactive[int] = reactive(-1, repaint=False, init=False)

    def __init__(self, model: RunModel | None = None, **kw) -> None:
        super().__init__(**kw)
        self.model = model if model is not None else RunModel()
        self.data = ChartData()
        self.axes: Axes | None = None  # the axes of the last redraw
        self.legend: list[Text] = []  # the legend column of the last redraw ([] when there was no room for it)
        self.whole: bool | None = None  # the user's choice of window (w); None: showing_whole() decides
        self.what = "loss"  # or "step time" (l)

    def version(self) -> int:
        """The model's count of what this view draws: the screen sets `points` to it when it moved."""
        return self.model.loss_version if self.what == "loss" else self.model.step_version

    def showing_whole(self) -> bool:
        """The whole run when the user chose it, else once the run ended and the recent window lost older points."""
        if self.whole is not None:
            return self.whole
        return self.model.finished is not None and whole_differs(self.model, self.what)

    def toggle_window(self) -> None:
        """w: the recent window <-> the whole run."""
        self.whole = not self.showing_whole()
        self.redraw()

    def toggle_what(self) -> None:
        """l: the losses <-> each rank's step times."""
        self.what = "step time" if self.what == "loss" else "loss"
        self.redraw()

    def watch_points(self) -> None:
        self.redraw()

    def redraw(self) -> None:
        make = chart_data if self.what == "loss" else step_chart_data
        self.data = make(self.model, columns=self.size.width or None, whole=self.showing_whole())
        self.refresh()

    def render(self):
        # plotext applies the log scale to its data in place while building: the figure is set up anew each time.
        width, height = self.size.width, self.size.height
        mono = self.app.no_color
        legend = legend_lines(self.data, max(0, height - 4), mono)
        legend_w = max((t.cell_len for t in legend), default=0) + 2
        if not legend or width - legend_w < LEGEND_MIN_PLOT:
            legend, legend_w = [], 0
        self.legend = legend
        plot_w = width - legend_w
        plt = self._plot
        self.axes = draw(plt, self.data, plot_w, height, mono)
        plt.plotsize(plot_w, height)
        plt._set_size(plot_w, height)  # as PlotextPlot.render does (textual-plotext issue 5)
        plt.theme(self._get_plotext_theme_name(self.app.theme))
        text = Text.from_ansi(plt.build())
        if not legend:
            return text
        rows = text.split("\n", allow_blank=True)
        out = Text(no_wrap=True)
        for i, row in enumerate(rows[:height]):
            row.truncate(plot_w, pad=True)
            out.append_text(row)
            entry = i - 2  # the legend starts on the canvas' first row (under the title and the frame's top line)
            if 0 <= entry < len(legend):
                out.append("  ")
                out.append_text(legend[entry])
            if i < min(len(rows), height) - 1:
                out.append("\n")
        return out
