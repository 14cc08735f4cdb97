"""Live loss of every rank, one series per rank, with the spread across ranks in the title."""
from __future__ import annotations

from textual.reactive import reactive
from textual_plotext import PlotextPlot

from ddptui.tui.model import RunModel

POINT_BUDGET = 1000  # points over all series: plotext's braille drawing is the cost


def thin(points: list, n: int) -> list:
    """Every k-th point plus the last, so long runs stay cheap to draw."""
    if len(points) <= n:
        return points
    k = len(points) / n
    out = [points[int(i * k)] for i in range(n)]
    out.append(points[-1])
    return out


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


class LossChart(PlotextPlot):
    """Draws ``model``'s losses whenever ``points`` (the model's loss_version) moves."""

    points: reactive[int] = reactive(-1, repaint=False, init=False)

    def __init__(self, model: RunModel | None = None, **kw) -> None:
        super().__init__(**kw)
        self.model = model if model is not None else RunModel()

    def watch_points(self) -> None:
        model = self.model
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        plt.xlabel("step")
        any_series = False
        per_series = max(30, POINT_BUDGET // max(1, len(model.ranks)))
        for r in sorted(model.ranks):
            pts = thin(list(model.ranks[r].losses), per_series)
            if pts:
                plt.plot([p[0] for p in pts], [p[1] for p in pts], label=f"r{r}" if len(model.ranks) <= 8 else None,
                         marker="braille")
                any_series = True
        sp = spread(model)
        if sp:
            lo, hi, step = sp
            plt.title(f"loss · {len(model.ranks)} ranks · spread at step {step}: {hi - lo:.3g} (min {lo:.4g}, max {hi:.4g})")
        else:
            plt.title("loss (no loss reported yet)")
        if not any_series:
            plt.plot([0], [0], marker=" ")
        self.refresh()
