"""The Runs screen (`R` from the picker and the run screen): the records of the runs folder, newest first, as
`ddptui runs` lists them; enter replays a finished one or follows a live one (tui/open_record.py); space marks
records and c compares the marked ones (tui/screens/compare.py)."""
from __future__ import annotations

import time
from pathlib import Path

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.coordinate import Coordinate
from textual.screen import Screen
from textual.widgets import DataTable, Static

from ...runners.edge.runs_read import read_runs
from ...runners.evidence import runs_list as rl
from ..marks import FAILED, OK, STOPPED, WARN, mark
from ..open_record import LIVE_HERE, open_record
from ..widgets.keybar import KeyBar
from .compare import open_compare

COLUMNS = ("started", "took", "name", "ranks", "status", "record", "verdict")
NAME_COLUMN = COLUMNS.index("name")
MARKED = "✓ "  # before a marked record's name: reads without colour
STYLES = {OK: "green", FAILED: "bold red", WARN: "yellow", STOPPED: "magenta"}


def status_cell(r: rl.RunRow) -> Text:
    """The status with a marker that reads without colour (NO_COLOR, tui/marks.py): ● for a live run."""
    if r.held:
        return Text(f"● {r.status}", style="bold cyan")
    m = mark(r.status) or WARN
    return Text(f"{m} {r.status}", style=STYLES.get(m, ""))


def name_cell(r: rl.RunRow, marked: bool) -> Text | str:
    return Text(MARKED + r.name, style="bold reverse") if marked else r.name


def cells(r: rl.RunRow, root: Path, marked: bool = False) -> tuple:
    started = rl.started_text(r.started)
    folder = Path(r.path).name
    return (started[5:] if r.started else "?", rl.duration_text(r.duration), name_cell(r, marked), rl.world_text(r),
            status_cell(r), f"{root.name}/{folder}", rl.cut(r.verdict, 90))


class RunsScreen(Screen):
    BINDINGS = [
        Binding("enter", "open", "open"),
        Binding("space", "mark", "mark"),
        Binding("c", "compare", "compare"),
        Binding("g", "reload", "read again"),
        Binding("escape", "back", "back"),
        Binding("q", "app.quit_run", "quit"),
        Binding("question_mark", "app.help", "help"),
    ]

    def __init__(self, runs_root: Path) -> None:
        super().__init__()
        self.runs_root = Path(runs_root)
        self.rows: list[rl.RunRow] = []
        self.marked: dict[str, None] = {}  # the marked records' paths, in the order marked (the first is compare's A)
        self.loaded = False  # the folder was read (tests wait for it)

    def compose(self) -> ComposeResult:
        yield Static(Text(f" ddptui · runs in {self.runs_root} (newest first; enter opens)", style="bold"),
                     id="runs-head")
        yield DataTable(id="runs-table", cursor_type="row", zebra_stripes=False)
        yield Static("", id="runs-detail")
        yield KeyBar()

    def on_mount(self) -> None:
        self.query_one(DataTable).add_columns(*COLUMNS)
        self.action_reload()

    def action_reload(self) -> None:
        self.loaded = False
        self.run_worker(self._read, thread=True, exclusive=True, group="runs-list", name="ddptui-runs-list")

    def _read(self) -> None:
        rows = rl.rows_of(read_runs(self.runs_root), time.time())  # off the UI thread: 1,000 records ~0.3 s
        self.app.call_from_thread(self._show, rows)

    def _show(self, rows: list[rl.RunRow]) -> None:
        self.rows = rows
        table = self.query_one(DataTable)
        table.clear()
        here = {r.path for r in rows}
        self.marked = {p: None for p in self.marked if p in here}  # a record pruned meanwhile is no longer marked
        for i, r in enumerate(rows):
            table.add_row(*cells(r, self.runs_root, r.path in self.marked), key=str(i))
        if not rows:
            self.query_one("#runs-detail", Static).update(f"no run records in {self.runs_root}")
        table.focus()
        self.loaded = True
        self._detail(table.cursor_row)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._detail(event.cursor_row)

    def _detail(self, i: int) -> None:
        if not 0 <= i < len(self.rows):
            return
        r = self.rows[i]
        t = Text()
        t.append(f"{r.name}", style="bold")
        where = f"{r.ranks if r.ranks is not None else '?'} ranks" + (f" on {r.nodes} node(s)" if r.nodes else "")
        t.append(f"  {r.runner}, {where}, {r.status}, started {rl.started_text(r.started)}, "
                 f"took {rl.duration_text(r.duration)}  {r.path}\n")
        t.append(r.verdict)
        self.query_one("#runs-detail", Static).update(t)

    def selected(self) -> rl.RunRow | None:
        i = self.query_one(DataTable).cursor_row
        return self.rows[i] if 0 <= i < len(self.rows) else None

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.action_open()

    def _readable(self) -> rl.RunRow | None:
        """The highlighted record, unless it is none or unreadable (said)."""
        r = self.selected()
        if r is not None and r.status == "unreadable":
            self.app.notify(r.verdict, severity="warning", timeout=8, markup=False)
            return None
        return r

    def action_open(self) -> None:
        r = self._readable()
        if r is None:
            return
        app = self.app
        if getattr(app, "running", False):
            app.notify(LIVE_HERE, severity="warning", markup=False)
            return
        app.pop_screen()
        if not open_record(app, Path(r.path)):
            app.push_screen(RunsScreen(self.runs_root))

    def action_mark(self) -> None:
        """space: mark the highlighted record (or unmark it) and go to the next one."""
        table = self.query_one(DataTable)
        r = self._readable()
        if r is None:
            return
        if r.path in self.marked:
            del self.marked[r.path]
        else:
            self.marked[r.path] = None
        row = table.cursor_row
        table.update_cell_at(Coordinate(row, NAME_COLUMN), name_cell(r, r.path in self.marked), update_width=True)
        if row + 1 < len(self.rows):
            table.move_cursor(row=row + 1)

    def action_compare(self) -> None:
        """c: the Compare screen of the marked records, in the order marked (2 or more)."""
        if len(self.marked) < 2:
            self.app.notify(f"mark 2 or more records with space to compare them ({len(self.marked)} marked)",
                            severity="warning", markup=False)
            return
        open_compare(self.app, [Path(p) for p in self.marked])

    def action_back(self) -> None:
        if len(self.app.screen_stack) <= 2:  # the list is all there is (a `ddptui serve --runs-dir` tab): q leaves
            self.app.notify("q leaves", markup=False)
            return
        self.app.pop_screen()
