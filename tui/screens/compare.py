"""The Compare screen: two or more run records' loss and step-time curves overlaid, and `ddptui compare`'s table
(`t`); `open_compare(app, paths)` opens it on any screen of the dashboard."""
from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Container, VerticalScroll
from textual.screen import Screen
from textual.widgets import Static

from .. import compare_table
from ..nocolor import readable_filters
from ..record_tables import NotARecord, read_run
from ..run_series import RunSeries
from ..sizes import NARROW_BELOW  # the two charts one above the other
from ..widgets.compare_chart import CompareChart
from ..widgets.keybar import KeyBar


class CompareScreen(Screen):
    """The records are read in a thread (a long run's takes a second or two); until then the screen says so."""

    BINDINGS = [
        Binding("escape", "close", "back"),
        Binding("q", "close", "close"),
        Binding("t", "toggle_table", "table/charts"),
    ]
    DEFAULT_CSS = """
    CompareScreen #compare-head { height: auto; max-height: 6; padding: 0 1; }
    CompareScreen #compare-charts { height: 1fr; layout: horizontal; }
    CompareScreen.-narrow #compare-charts { layout: vertical; }
    CompareScreen CompareChart { width: 1fr; height: 1fr; }
    CompareScreen #compare-loss { margin-right: 2; }
    CompareScreen.-narrow #compare-loss { margin-right: 0; }
    CompareScreen #compare-table { height: 1fr; padding: 0 1; display: none; }
    CompareScreen.-table #compare-table { display: block; }
    CompareScreen.-table #compare-charts { display: none; }
    """

    def __init__(self, paths: list[Path]) -> None:
        super().__init__()
        self.paths = [Path(p) for p in paths]
        self.runs: list[RunSeries] = []
        self.comparison: compare_table.Comparison | None = None
        self.error = ""  # a path that is no record, in one line
        self.loaded = False

    def compose(self) -> ComposeResult:
        yield Static(f"reading {len(self.paths)} records…", id="compare-head")
        with Container(id="compare-charts"):
            yield CompareChart("loss", id="compare-loss")
            yield CompareChart("step time", id="compare-steps")
        with VerticalScroll(id="compare-table"):
            yield Static("", id="compare-table-text")
        yield KeyBar()

    def on_mount(self) -> None:
        self.set_class(self.app.size.width < NARROW_BELOW, "-narrow")
        self.run_worker(self._read, thread=True, exclusive=True, name="compare-read")

    def on_resize(self, event) -> None:
        self.set_class(event.size.width < NARROW_BELOW, "-narrow")

    def _read(self) -> None:
        try:
            runs = [read_run(p) for p in self.paths]
        except NotARecord as e:
            self.app.call_from_thread(self._failed, str(e))
            return
        comparison = compare_table.compare(runs)
        self.app.call_from_thread(self._show, runs, comparison)

    def _failed(self, line: str) -> None:
        self.error = line
        self.loaded = True
        self.query_one("#compare-head", Static).update(Text(f"cannot compare: {line}", style="bold red"))

    def _show(self, runs: list[RunSeries], comparison: compare_table.Comparison) -> None:
        self.runs, self.comparison = runs, comparison
        lines = compare_table.table_lines(comparison, width=max(40, self.app.size.width - 2))
        head = Text(no_wrap=True, overflow="ellipsis")
        legend = lines[:len(runs)]
        for i, line in enumerate(legend):
            head.append(line, style="bold" if i == 0 else "")
            if i < len(legend) - 1:
                head.append("\n")
        for note in comparison.notes:
            head.append(f"\nnote: {note}", style="dim")
        self.query_one("#compare-head", Static).update(head)
        self.query_one("#compare-table-text", Static).update(Text("\n".join(lines[len(runs) + 1:]), no_wrap=True))
        for chart in self.query(CompareChart):
            chart.runs = runs
            chart.redraw()
        self.loaded = True

    def action_toggle_table(self) -> None:
        self.toggle_class("-table")

    def action_close(self) -> None:
        if len(self.app.screen_stack) > 2:
            self.app.pop_screen()
        else:  # `ddptui compare A B`: the screen is all there is
            self.app.exit(0)


def open_compare(app: App, paths: list[Path]) -> CompareScreen:
    """Open the Compare screen of these records over whatever the app shows (the Runs screen's way in)."""
    screen = CompareScreen(paths)
    app.push_screen(screen)
    return screen


class CompareApp(App):
    """`ddptui compare A B` on a terminal: the Compare screen alone, in the dashboard's styles and NO_COLOR."""

    CSS_PATH = Path(__file__).resolve().parents[1] / "app.tcss"
    TITLE = "ddptui compare"

    def __init__(self, paths: list[Path]) -> None:
        super().__init__()
        self.paths = paths

    def get_line_filters(self):
        """Textual's NO_COLOR greys, with text kept readable on its background, as the dashboard's."""
        return readable_filters(super().get_line_filters())

    def on_mount(self) -> None:
        open_compare(self, self.paths)


def run_compare_app(paths: list[Path]) -> int:
    """`ddptui compare` on a terminal (the records were read once already: each is a record)."""
    CompareApp(paths).run()
    return 0
