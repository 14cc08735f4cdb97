"""Live loss of every rank (or min/median/max over many ranks), its legend beside the curves, the spread in the title."""
from __future__ import annotations

import math
from dataclasses import dataclass

from rich.style import Style
from rich.text import Text
from textual.reactive import reactive
from textual_plotext import PlotextPlot

from ..chart_scale import choose_scale, fmt_num, linear_ticks, log_ticks, step_label, tick_labels
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
    last: float | None  # the newest loss it shows, for the legend


@dataclass(frozen=True)
class ChartData:
    """What the chart draws, decided from the model without drawing (chart_data)."""
    series: tuple[Series, ...] = ()
    lo: float = math.nan  # smallest and largest finite loss drawn
    hi: float = math.nan
    scale: str = "linear"
    steps: str = ""  # which steps are drawn, in words
    kept: str = ""  # "" or how many points of each rank the model keeps, when older ones may be gone
    thinned: str = ""  # "" or how the points were thinned / summarised
    spread: str = ""  # the spread across ranks at the newest common step, in words
    ranks: int = 0
    summary: bool = False  # the curves are min / median / max over `ranks` ranks
    not_finite: int = 0  # NaN / inf losses in the window, not drawn


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


def chart_data(model: RunModel, budget: int = POINT_BUDGET, columns: int | None = None) -> ChartData:
    """The curves to draw, the scale for them and what the title says about the window shown.

    columns: the chart's width in cells, when known: a series gets no more points than the two braille dots of
    a cell across it can show.
    """
    ranks = sorted(r for r, rv in model.ranks.items() if rv.losses)
    if not ranks:
        return ChartData(ranks=len(model.ranks))
    summary = len(ranks) > RANK_SERIES
    dots = 2 * columns if columns else budget
    bins = max(30, min(SUMMARY_BINS, dots, SUMMARY_POINTS // len(ranks)))
    per_series = max(30, min(budget // len(ranks), dots)) if not summary else bins
    series, sampled, not_finite, every = [], [], 0, 1
    full = 0  # ranks whose window holds only their newest points (older ones were dropped)
    x0, x1 = math.inf, -math.inf
    for i, r in enumerate(ranks):
        losses = model.ranks[r].losses
        if losses.maxlen is not None and len(losses) >= losses.maxlen:
            full = losses.maxlen
        pts, k = thin(list(losses), per_series)
        every = max(every, k)
        x0, x1 = min(x0, pts[0][0]), max(x1, pts[-1][0])
        if summary:
            sampled.append(pts)
            not_finite += sum(1 for _, v in pts if not math.isfinite(v))
            continue
        xs, ys, bad = _finite(pts)
        not_finite += bad
        if xs:
            series.append(Series(f"r{r}", PALETTE[i % len(PALETTE)], xs, ys, ys[-1]))
    if summary:
        series = [s for s in _summary(sampled, x0, x1, bins) if s.xs]
    ys_all = [v for s in series for v in s.ys]
    lo, hi = (min(ys_all), max(ys_all)) if ys_all else (math.nan, math.nan)
    steps = f"steps {step_label(x0)}–{step_label(x1)}" + (f" of {step_label(model.steps)}" if model.steps else "")
    kept = f"each rank's last {full} points" if full else ""
    thinned = f"min/median/max of {len(ranks)} ranks" if summary else f"every {_ordinal(every)} point" if every > 1 else ""
    sp = spread(model)
    spread_text = ""
    if sp and len(ranks) > 1:
        a, b, step = sp
        spread_text = f"spread at step {step_label(step)}: {fmt_num(b - a)} ({fmt_num(a)}–{fmt_num(b)})"
    return ChartData(tuple(series), lo, hi, choose_scale(lo, hi), steps, kept, thinned, spread_text, len(ranks),
                     summary, not_finite)


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def title_text(data: ChartData, width: int) -> str:
    """The title line: what is drawn and how, its parts dropped from the least useful while it is too wide."""
    if not data.series:
        return "loss (no loss reported yet)"
    head = "loss, log scale" if data.scale == "log" else "loss"
    nan = f"{data.not_finite} NaN/inf not drawn" if data.not_finite else ""
    # (the lower, the longer it stays; its place; text): what the curves are stays longest
    parts = [(0, 0, head), (1, 1, data.steps), (5, 2, f"({data.kept})" if data.kept else ""), (2, 3, data.thinned),
             (4, 4, data.spread), (3, 5, nan)]
    parts = [p for p in parts if p[2]]
    while len(parts) > 1 and len(_joined(parts)) > width - 2:
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
    xt = linear_ticks(x0, x1, max(2, min(12, (width - 10) // max(8, label_w))), integer=True, extend=False) \
        if x1 > x0 else [x0]
    return Axes(data.scale, yt, tick_labels(yt, data.scale), ylim, xt, [step_label(x) for x in xt])


def marks(data: ChartData) -> dict[str, str]:
    """Each series' own plot mark for a chart drawn without colour."""
    if data.summary:
        return {s.name: SUMMARY_MARKS.get(s.name, "o") for s in data.series}
    return {s.name: MARKS[i % len(MARKS)] for i, s in enumerate(data.series)}


def legend_lines(data: ChartData, rows: int, mono: bool = False) -> list[Text]:
    """The legend column: a coloured line (`mono`: the series' mark) and the series' name and newest loss, one series
    a row."""
    out = []
    mark = marks(data) if mono else {}
    entries = list(data.series)
    if data.summary:
        entries.sort(key=lambda s: ("max", "median", "min").index(s.name))
    room = rows - (1 if data.summary else 0)
    shown = entries if len(entries) <= room else entries[:max(0, room - 1)]
    for s in shown:
        t = Text(f"{mark[s.name] * 2} " if mono else "━━ ", style=Style(color=f"rgb{s.color}", bold=True))
        t.append(s.name.ljust(6 if data.summary else 3))
        if s.last is not None:
            t.append(" " + fmt_num(s.last), style="dim" if not data.summary else "")
        out.append(t)
    if len(shown) < len(entries):
        out.append(Text(f"+{len(entries) - len(shown)} more", style="dim"))
    if data.summary:
        out.append(Text(f"of {data.ranks} ranks", style="dim"))
    return out


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
    """Draws ``model``'s losses whenever ``points`` (the model's loss_version) moves."""

    points: reactive[int] = reactive(-1, repaint=False, init=False)

    def __init__(self, model: RunModel | None = None, **kw) -> None:
        super().__init__(**kw)
        self.model = model if model is not None else RunModel()
        self.data = ChartData()
        self.axes: Axes | None = None  # the axes of the last redraw
        self.legend: list[Text] = []  # the legend column of the last redraw ([] when there was no room for it)

    def watch_points(self) -> None:
        self.data = chart_data(self.model, columns=self.size.width or None)
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
