"""The run screen: rank grid + loss chart, timeline, stacks, collectives, crash, hints and verdict tabs, redrawn from
what changed; its search is run_search.py's, a replay's stepping run_steps.py's."""
from __future__ import annotations

from collections.abc import Iterable
from functools import partial
from pathlib import Path
from typing import TypeVar
from weakref import WeakKeyDictionary

from rich.text import Text
from textual import messages, on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Vertical
from textual.css.query import NoMatches
from textual.reactive import Reactive
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Input, Static, TabbedContent, TabPane, Tabs

from ...runners.evidence.words import clock_words
from .. import compact as compact_rules
from ..fit import chart_rows, fit
from ..gc_policy import freeze_long_lived
from ..marks import marked
from ..model import Changes, RunModel
from ..rate import fmt_rate, fmt_samples_rate, load_text, overloaded
from ..record_tables import NotARecord, export_record
from ..screenshot import record_of
from ..sizes import SHORT_BELOW, wide_columns
from ..verdicts import said
from ..widgets.banner import Banner, banner_text
from ..widgets.collectives_view import CollectivesView
from ..widgets.crash_view import CrashView
from ..widgets.hints_view import HintsView, hint_toast
from ..widgets.keybar import KeyBar
from ..widgets.loss_chart import LossChart
from ..widgets.rank_pane import RankPane
from ..widgets.rank_table import RankTable
from ..widgets.stacks_view import StacksView
from ..widgets.timeline import TimelineView
from ..widgets.verdict_view import VerdictView, verdict_shown
from .run_search import SEARCH_HINT, SearchKeys
from .run_steps import JUMP_HINT, ReplaySteps

W = TypeVar("W", bound=Widget)
REPLAY_UNLISTED = frozenset({"app.stop", "app.dump", "app.rerun", "app.detach"})
VIEWER_UNLISTED = frozenset({"app.detach"})  # a viewer of a run it did not start leaves with q; the run goes on

TAB_FOCUS = {"timeline": "#timeline-log", "stacks": "#stacks-view", "crash": "#crash-view", "hints": "#hints-view",
             "verdict": "#summary-table", "collectives": "#coll-view"}


class RanksBox(Vertical):
    """The rank grid and the loss chart; its height changes with the terminal and the banner."""

    def on_resize(self) -> None:
        if isinstance(self.screen, RunScreen):
            self.screen.fit_panes()


def head_text(model: RunModel, source_kind: str, at: str = "") -> Text:
    """The header, most needed first, since a narrow terminal cuts its end: the profile and status (a replay says so),
    the job, the time, pace and ETA (or how long no step came), an overloaded machine; then the run's shape,
    samples/s, a calm load, the record. `at`: where a stepped replay is in its record."""
    t = Text(no_wrap=True, overflow="ellipsis")
    t.append(" ddptui ", style="bold reverse")
    t.append(f" {model.profile or '…'} ", style="bold")
    state = model.finished.status if model.finished else ("live" if model.start_wall else "starting")
    job = model.job
    if job is not None and job.state == "PENDING" and not model.finished:
        state = "pending"
    t.append("· ")
    t.append(marked(state), style="bold green" if state in ("live", "ok") else "bold red" if model.finished else "")
    if source_kind == "replay":
        t.append(" · replay", style="bold yellow")
        if at:
            t.append(f" {at}", style="bold yellow")
    if job is not None:
        t.append(f" · job {job.job_id}")
        if job.state != "RUNNING":  # pending (and why), or how it ended
            t.append(f" {job.state}" + (f" ({job.reason})" if job.reason else ""), style="bold yellow")
    t.append(f" · {model.elapsed():.1f}s")
    if model.attempt:  # a restart: the pace and ETA below are this attempt's, from the step it resumed at
        resumed = model.resumed_at.get(model.attempt)
        t.append(f" · attempt {model.attempt}" + (f" from step {resumed}" if resumed is not None else ""),
                 style="bold yellow")
    pace = model.pace()
    if pace is not None:  # the rank that finishes last sets the run's pace and its time left
        t.append(f" · {fmt_rate(pace.steps_per_s)}")
        late = model.no_step_for()
        if late is not None:  # no time left can be told while no step comes; the pace decays meanwhile
            t.append(f" · no step for {clock_words(late)}", style="bold yellow")
        elif pace.eta is not None:
            t.append(f" · ETA {clock_words(pace.eta)}")
    busy = model.load is not None and model.cpus is not None and bool(model.cpus) and overloaded(model.load, model.cpus)
    if busy:  # a loaded machine slows every rank: not the model's fault, and said before the figures
        assert model.load is not None  # busy says so
        t.append(f" · {load_text(model.load, model.cpus)}", style="bold yellow")
    t.append(f" · {model.runner or '?'} · {len(model.rank_ids())} ranks")
    if model.steps:
        t.append(f" · {model.steps} steps")
    if pace is not None:
        samples = model.samples_rate()
        if samples is not None:
            t.append(f" · {fmt_samples_rate(samples)}")
    if model.load is not None and not busy:
        t.append(f" · {load_text(model.load, model.cpus)}")
    if model.run_dir:
        t.append(f" · {model.run_dir}", style="dim")
    return t


class RunScreen(SearchKeys, ReplaySteps, Screen):
    AUTO_FOCUS = None  # panes take focus once they exist; the hidden search box must never have it
    # A focus change restyles the widget that gains it and the one that loses it, and they repaint themselves;
    # Screen's own `focused` also repainted the whole screen: a second full frame on every tab switch.
    focused: Reactive[Widget | None] = Reactive(None, repaint=False)
    BINDINGS = [
        Binding("q", "app.quit_run", "quit"),
        Binding("ctrl+c", "copy_or_quit", "quit", show=False),  # as q, unless text is selected (then a copy)
        Binding("d", "app.dump", "dump stacks"),
        Binding("s", "app.stop", "stop"),
        Binding("r", "app.rerun", "rerun"),
        Binding("t", "toggle_timeline", "timeline"),
        Binding("slash", "search", "search"),
        Binding("f", "filter", "filter", show=False),
        Binding("n", "next_match", "next match", show=False),
        Binding("N", "previous_match", "previous match", show=False),
        Binding("x", "incident(True)", "next incident", show=False),
        Binding("X", "incident(False)", "previous incident", show=False),
        Binding("left_square_bracket", "step_event(-1)", "one event back", show=False),
        Binding("right_square_bracket", "step_event(1)", "one event on", show=False),
        Binding("comma", "step_seconds(-1.0)", "one second back", show=False),
        Binding("full_stop", "step_seconds(1.0)", "one second on", show=False),
        Binding("j", "jump", "jump to a time", show=False),
        Binding("z", "zoom", "zoom"),
        Binding("m", "toggle_compact", "rows/panes"),
        Binding("g", "goto_rank", "go to rank", show=False),
        Binding("k", "tab('stacks')", "stacks", show=False),
        Binding("o", "tab('collectives')", "collectives", show=False),
        Binding("c", "tab('crash')", "crash", show=False),
        Binding("h", "tab('hints')", "hints", show=False),
        Binding("v", "tab('verdict')", "verdict", show=False),
        Binding("w", "chart_window", "chart: whole run/recent", show=False),
        Binding("l", "chart_what", "chart: loss/step times", show=False),
        Binding("R", "app.runs", "runs: every record", show=False),
        Binding("e", "export", "export steps and events (CSV)", show=False),
        Binding("escape", "back", "back"),
        Binding("question_mark", "app.help", "help"),
        Binding("D", "app.detach", "detach"),  # last: where the footer is cut short, help stays in it
        *[Binding(str(i), f"focus_rank({i})", f"rank {i}", show=False) for i in range(10)],
    ]

    def __init__(self, model: RunModel, source_kind: str = "live") -> None:
        super().__init__()
        self.model = model
        self.source_kind = source_kind
        self.needle = ""
        self._auto_switched: set[str] = set()
        self._hints_seen = 0
        self._last_rank: int | None = None
        self._fitted: tuple = ()
        self.chart_pending = False  # a catch-up of the loss chart is due after the next repaint (_chart_later)
        self._layout: tuple = ()  # the panes' order (node by node: RunModel.grouped_rank_ids) and the nodes drawn
        self.compact_choice: bool | None = None  # the user's m: rows (True) or panes (False); None: tui/compact.py
        self.compact_on = False  # the ranks tab shows the compact table instead of the pane grid
        self._panes: dict[int, RankPane] = {}  # rank -> its pane, once mounted (panes stay for the screen's life)
        self._singles: dict[type, Widget] = {}
        self._tab_of: WeakKeyDictionary[Widget, TabPane | None] = WeakKeyDictionary()  # a widget's tab, once looked up

    @property
    def unlisted_actions(self) -> frozenset[str]:
        """Keys the footer leaves out: a replay has nothing live to stop, dump or rerun (pressed, each says so)."""
        return REPLAY_UNLISTED if self.source_kind == "replay" else frozenset() if self.source_kind == "live" \
            else VIEWER_UNLISTED

    def _the(self, kind: type[W]) -> W:
        """The screen's one widget of a type: composed once and never replaced, so looked up once (a query by type
        walks and matches every node on the screen, several times per model change under a flood)."""
        w = self._singles.get(kind)
        if w is None:
            w = self._singles[kind] = self.query_one(kind)
        return w  # type: ignore[return-value]  # _singles holds each widget under its own type

    def compose(self) -> ComposeResult:
        yield Static(head_text(self.model, self.source_kind), id="run-head")
        yield Banner(id="banner")
        yield Input(placeholder=SEARCH_HINT, id="search", disabled=True)  # disabled while closed: never focused unseen
        yield Input(placeholder="filter log lines (substring) — enter keeps it, escape clears", id="filter",
                    disabled=True)
        jump = Input(placeholder=JUMP_HINT, id="jump", disabled=True)
        jump.display = False
        yield jump
        goto = Input(placeholder="go to rank: its number, enter", id="goto", disabled=True, restrict=r"[0-9]*")
        goto.display = False
        yield goto
        with TabbedContent(initial="ranks", id="tabs"):
            with TabPane("Ranks", id="ranks"):
                with RanksBox(id="ranks-box"):
                    yield Grid(id="rank-grid")
                    table = RankTable(id="rank-table")
                    table.display = False  # the pane grid until tui/compact.py or the user's m says rows
                    yield table
                    yield LossChart(self.model, id="loss")
            with TabPane("Timeline", id="timeline"):
                yield TimelineView(id="timeline-log")
            with TabPane("Stacks", id="stacks"):
                yield StacksView(id="stacks-view")
            with TabPane("Collectives", id="collectives"):
                yield CollectivesView(id="coll-view")
            with TabPane("Crash", id="crash"):
                yield CrashView(id="crash-view")
            with TabPane("Hints", id="hints"):
                yield HintsView(id="hints-view")
            with TabPane("Verdict", id="verdict"):
                yield VerdictView(id="verdict-view")
        yield KeyBar()

    def on_mount(self) -> None:
        self.show()

    @on(messages.Update)
    def _unseen_repaint(self, message: messages.Update) -> None:
        """A widget of a hidden tab is drawn when its tab is shown (its refresh marked its lines stale already), as
        Textual leaves out a widget whose own display is off: a repaint now is a frame nobody sees, and the key that
        hid the tab waited for it (the focus leaving the timeline restyled it after that key's frame: ~17 ms more)."""
        widget = message.widget
        if widget not in self._tab_of:
            self._tab_of[widget] = next((n for n in widget.ancestors if isinstance(n, TabPane)), None)
        tab = self._tab_of[widget]
        if tab is not None and not tab.display:
            message.stop()
            message.prevent_default()

    # -- redraw from the model ------------------------------------------------------------------------
    def on_model_changed(self, msg) -> None:
        """The app folded events into the model (tui/redraw.py says how often this comes under a flood)."""
        self.show(msg.changes)

    def show(self, c: Changes | None = None) -> None:
        """Redraw what changed in the model; only the visible tab's widgets (None: all it shows, e.g. on a new tab)."""
        m = self.model
        at = self.cursor.words() if self.cursor is not None else ""
        self.query_one("#run-head", Static).update(head_text(m, self.source_kind, at), layout=False)
        if c is None or c.run:
            self._the(Banner).state = banner_text(m)
            self._choose_view()
            if not self.compact_on:
                self._ensure_panes()
            self._auto_switch()
            self._notify_hints()
        tab = self._the(TabbedContent).active
        if tab == "ranks":
            panes: Iterable[RankPane]
            if self.compact_on:
                panes = []
                self._the(RankTable).show(m, None if c is None or c.run or c.coll else c.ranks)
            elif c is None or c.run:
                panes = self._panes.values()
            else:
                panes = [self._panes[r] for r in c.ranks if r in self._panes]
            for pane in panes:
                pane.show(m, self.needle, self.search)
            chart = self._the(LossChart)
            if chart.display and c is not None and c.loss:  # no room for it now (fit_panes): drawn when it comes back
                chart.points = chart.version()
            elif chart.display and c is None and chart.points != chart.version():
                self._chart_later()  # shown again with newer losses
        elif tab == "timeline":
            if c is None or c.lines:
                self._the(TimelineView).show(m, self.needle)
        elif tab == "stacks":
            self._the(StacksView).shown = (m.stacks, m.stacks_verdict())
        elif tab == "collectives":
            if c is None or c.coll or c.run:
                self._the(CollectivesView).show(m)
        elif tab == "crash":
            self._the(CrashView).crash = m.crash
        elif tab == "hints":
            self._the(HintsView).hints = (tuple(m.hints), m.start_wall, tuple((v.title, v.fix) for v in said(m) if v.fix))
        elif tab == "verdict":
            self._the(VerdictView).shown = verdict_shown(m)

    def _ensure_panes(self) -> None:
        grid = self.query_one("#rank-grid", Grid)
        want = self.model.grouped_rank_ids()
        missing = [r for r in want if r not in self._panes]
        if missing:
            fresh = [RankPane(r) for r in missing]
            self._panes.update((p.rank, p) for p in fresh)
            grid.mount(*fresh)
            self.call_after_refresh(freeze_long_lived)  # the grid is built: full collections skip it (gc_policy.py)
            if self.focused is None:
                self.call_after_refresh(self.focus_rank_pane, None)
            n = len(want)
            grid.set_class(n > 4, "-many")
            grid.set_class(n > 9, "-lots")
        groups = self.model.nodes()
        layout = (tuple(want), tuple((k, tuple(rs)) for k, rs in groups.items()))
        if missing or layout != self._layout:
            self._layout = layout
            self._group_panes(grid, want, [rs for k, rs in groups.items() if k])
            grid.styles.grid_size_columns = self.grid_columns()
            self.fit_panes()

    def _group_panes(self, grid: Grid, order: list[int], placed: list[list[int]]) -> None:
        """Panes in the grid's order (node by node); every other node's panes marked, so the groups read apart."""
        panes = {p.rank: p for p in grid.query_children(RankPane)}
        for i, r in enumerate(order):
            if grid.children[i] is not panes[r]:
                grid.move_child(panes[r], before=i)
        alt = {r for i, rs in enumerate(placed) if i % 2 for r in rs} if len(placed) > 1 else set()
        for r, p in panes.items():
            p.set_class(r in alt, "-node-alt")

    def _choose_view(self) -> bool:
        """Compact table or pane grid (tui/compact.py, or the user's m); True when it changed."""
        n = len(self.model.rank_ids())
        rows = self._the(RanksBox).size.height
        cols = self.grid_columns() if n <= compact_rules.COMPACT_ABOVE else 1  # nodes() costs ms at 1,024 ranks
        on = compact_rules.want_compact(n, rows, -(-n // cols) if n else 0)
        if self.compact_choice is not None:
            on = self.compact_choice
        if n > compact_rules.GRID_MAX:
            on = True
        if on == self.compact_on:
            return False
        rank = self.focused_rank()
        self.compact_on = on
        self.query_one("#rank-grid", Grid).display = not on
        table = self._the(RankTable)
        table.display = on
        self._fitted = ()
        if on:
            table.show(self.model)
            self.call_after_refresh(freeze_long_lived)  # the table and every rank's view are built (gc_policy.py)
        else:
            self._ensure_panes()
            for pane in self._panes.values():  # panes kept from before, or mounted now: drawn as they mount
                pane.show(self.model, self.needle, self.search)
        self.fit_panes()
        on_tab = self._the(TabbedContent).active == "ranks"
        if on_tab and (rank is not None or not isinstance(self.focused, (RankPane, RankTable, Input))):
            self.call_after_refresh(self.focus_rank_pane, rank)  # the rank in focus stays in focus in the other view
        return True

    def grid_columns(self) -> int:
        """The model's columns (by rank count, by node), more on a wide terminal (tui/sizes.py)."""
        groups = self.model.nodes()
        return wide_columns(self.model.columns(), len(self.model.rank_ids()), self.size.width,
                            grouped=len(groups) > 1 and "" not in groups)

    def fit_panes(self) -> None:
        """Share the ranks tab's rows so every pane has room for its newest line (tui/fit.py)."""
        rows = self._the(RanksBox).size.height
        n = len(self.model.rank_ids())
        if rows <= 0:
            return  # the tab is hidden: fitted again when it shows (its size changes then)
        if self._choose_view():
            return  # fitted for the view it now shows
        cols = 1 if self.compact_on else self.grid_columns()
        if self.compact_on:
            f = fit(rows, 0, compact_rules.compact_chart(rows, chart_rows(n, rows), n))
        else:
            f = fit(rows, -(-n // cols) if n else 0, chart_rows(n, rows))
        if (f, n, cols) == self._fitted:
            return  # setting the same styles again still costs a relayout of every pane
        self._fitted = (f, n, cols)
        self.query_one("#rank-grid", Grid).styles.grid_size_columns = cols  # the terminal's width can change them
        chart = self._the(LossChart)
        chart.display = f.chart > 0
        if f.chart:
            chart.styles.height = f.chart
            if chart.points != chart.version():  # losses came while it was hidden
                self._chart_later()
        grid = self.query_one("#rank-grid", Grid)
        grid.styles.grid_rows = str(f.row) if f.row else None  # None: the rows share the grid's height
        grid.styles.overflow_y = "auto" if f.row else "hidden"
        for pane in self._panes.values():
            pane.show_bar(f.bars)

    def _chart_later(self) -> None:
        """Draw the chart's newer losses after the next repaint: the key that showed the grid is answered first
        (plotext's drawing is the dashboard's costliest paint), and the chart catches up a frame later."""
        if not self.chart_pending:
            self.chart_pending = True
            self.call_after_refresh(self._chart_catch_up)

    def _chart_catch_up(self) -> None:
        self.chart_pending = False
        try:
            chart = self._the(LossChart)
        except NoMatches:  # the screen went (a rerun replaced it) before the repaint
            return
        if chart.display and chart.points != chart.version() and self.app.chart_due():  # type: ignore[attr-defined]
            chart.points = chart.version()  # else chart_due() has it drawn when the chart's cap allows

    def _auto_switch(self) -> None:
        """Bring the troubleshooting view forward once, when its verdict arrives and the user is on the grid."""
        m = self.model
        tabs = self._the(TabbedContent)
        for name, present in (("crash", m.crash), ("stacks", m.stall and m.hang), ("verdict", m.finished)):
            if present is not None and name not in self._auto_switched:
                self._auto_switched.add(name)
                if tabs.active == "ranks" and not (name == "verdict" and (m.crash or m.stall)):
                    self.action_tab(name)
                return

    def _notify_hints(self) -> None:
        short = self.size.height < SHORT_BELOW
        for h in self.model.hints[self._hints_seen:]:
            message, title = hint_toast(h, short)
            self.notify(message, title=title, severity="warning", timeout=8, markup=False)
        self._hints_seen = len(self.model.hints)

    # -- actions --------------------------------------------------------------------------------------
    def action_tab(self, name: str) -> None:
        tabs = self._the(TabbedContent)
        if tabs.active == "ranks" and name != "ranks":
            self._last_rank = self.focused_rank()
        tabs.active = name
        self._underline_now()
        # Focus must move into the new tab: TabbedContent follows focus back to a hidden pane otherwise.
        if name == "ranks":
            self.focus_rank_pane(self._last_rank)
        else:  # the tab opens at its top: focus must not scroll it by a region laid out before the tab showed
            self.query_one(TAB_FOCUS[name]).focus(scroll_visible=False)
        self.show()

    def _underline_now(self) -> None:
        """Put the tab underline under the active tab in the frame that shows the tab: Textual's Tabs moves it after
        the next repaint, a frame of its own (its later move finds it in place and repaints nothing)."""
        strip = self._the(Tabs)
        try:
            tab = strip.query_one("#tabs-list > Tab.-active")
        except NoMatches:
            return
        underline = strip.query_one("Underline")
        underline.highlight_start, underline.highlight_end = tab.virtual_region.shrink(tab.styles.gutter).column_span  # type: ignore[attr-defined]

    def action_chart_window(self) -> None:
        """w: the chart shows the recent window or the whole run (thinned)."""
        self._the(LossChart).toggle_window()
        if self._the(TabbedContent).active != "ranks":
            self.action_tab("ranks")

    def action_chart_what(self) -> None:
        """l: the chart shows the losses or each rank's step times (the straggler view)."""
        self._the(LossChart).toggle_what()
        if self._the(TabbedContent).active != "ranks":
            self.action_tab("ranks")

    def action_export(self) -> None:
        """e: the record's steps per rank and its events as CSV into RUN/export/ (export_record, in a thread: a long
        run's record takes a second or two); where they went, said."""
        run_dir = record_of(self.app)
        if not run_dir:
            self.notify("no run record yet to export", severity="warning")
            return
        self.run_worker(partial(self._export, Path(run_dir)), thread=True, name="export")

    def _export(self, run_dir: Path) -> None:
        try:
            steps, events, run = export_record(run_dir, "csv")
        except (NotARecord, OSError) as e:
            self.app.call_from_thread(self.notify, f"export failed: {e}", severity="error", timeout=10, markup=False)
            return
        lacked = f"\n(what the record holds: {'; '.join(run.problems)})" if run.problems else ""
        self.app.call_from_thread(self.notify, f"steps: {steps}\nevents: {events}{lacked}", title="exported",
                                  timeout=10, markup=False)

    def action_toggle_timeline(self) -> None:
        tabs = self._the(TabbedContent)
        self.action_tab("ranks" if tabs.active == "timeline" else "timeline")

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.disabled = False
        box.add_class("-open")
        box.focus()

    @on(Input.Changed, "#filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.needle = event.value
        self.show()

    @on(Input.Submitted, "#filter")
    def _filter_done(self, event: Input.Submitted) -> None:
        self.focus_rank_pane(None)

    @on(Input.Changed, "#search")
    def _search_changed(self, event: Input.Changed) -> None:
        self.search_typed(event.value)

    @on(Input.Submitted, "#search")
    def _search_done(self, event: Input.Submitted) -> None:
        self.search_entered()

    @on(Input.Submitted, "#jump")
    def _jump_done(self, event: Input.Submitted) -> None:
        self.jump_entered(event.input)

    def action_focus_rank(self, rank: int) -> None:
        if rank not in self.model.rank_ids():
            self.notify(f"no rank {rank} in this run", severity="warning")
            return
        if self._the(TabbedContent).active != "ranks":
            self.action_tab("ranks")
        self.focus_rank_pane(rank)

    def focus_rank_pane(self, rank: int | None) -> None:
        if self.compact_on:
            table = self._the(RankTable)
            table.focus()
            if rank is not None:
                table.go_to(rank)
            return
        panes = list(self.query(RankPane))
        for p in panes:
            if rank is None or p.rank == rank:
                p.focus()
                return
        if rank is not None:
            self.focus_rank_pane(None)

    def focused_rank(self) -> int | None:
        f = self.focused
        if isinstance(f, RankTable):
            return f.cursor_rank
        return f.rank if isinstance(f, RankPane) else None

    def action_copy_or_quit(self) -> None:
        """Ctrl-C: the text selected with the mouse is copied (Textual's way); with none, it asks as q does."""
        if self.get_selected_text():
            self.action_copy_text()
        else:
            self.app.action_quit_run()  # type: ignore[attr-defined]  # DdpApp's

    def action_zoom(self) -> None:
        from .zoom import ZoomScreen
        rank = self.focused_rank()
        if rank is None:
            ids = self.model.rank_ids()
            if not ids:
                return
            rank = ids[0]
        self.app.push_screen(ZoomScreen(self.model, rank, self.needle))

    def action_toggle_compact(self) -> None:
        n = len(self.model.rank_ids())
        if self.compact_on and n > compact_rules.GRID_MAX:
            self.notify(f"{n} ranks: panes only up to {compact_rules.GRID_MAX} ranks; z or enter opens one",
                        severity="warning")
            return
        self.compact_choice = not self.compact_on
        if self._the(TabbedContent).active != "ranks":
            self.action_tab("ranks")
        self._choose_view()

    def action_goto_rank(self) -> None:
        box = self.query_one("#goto", Input)
        box.disabled = False
        box.display = True
        box.value = ""
        box.focus()

    def _close_goto(self) -> None:
        box = self.query_one("#goto", Input)
        box.value = ""
        box.display = False
        box.disabled = True

    @on(Input.Submitted, "#goto")
    def _goto_done(self, event: Input.Submitted) -> None:
        rank, why = compact_rules.goto_rank(event.value, self.model.rank_ids())
        self._close_goto()
        if rank is None:
            self.notify(why, severity="warning")
            self.focus_rank_pane(self._last_rank)
            return
        self.action_focus_rank(rank)

    def on_rank_table_open(self, msg: RankTable.Open) -> None:
        from .zoom import ZoomScreen
        self.app.push_screen(ZoomScreen(self.model, msg.rank, self.needle))

    def action_back(self) -> None:
        goto = self.query_one("#goto", Input)
        if goto.has_focus:
            self._close_goto()
            self.focus_rank_pane(None)
            return
        if self.query_one("#jump", Input).has_focus:
            self.close_jump()
            return
        search = self.search_box()
        if search.has_focus or search.has_class("-open"):
            self.close_search()
            return
        box = self.query_one("#filter", Input)
        if box.has_focus or box.has_class("-open"):
            box.value = ""
            box.remove_class("-open")
            box.disabled = True
            self.needle = ""
            self.focus_rank_pane(None)
            self.show()
            return
        tabs = self._the(TabbedContent)
        if tabs.active != "ranks":
            self.action_tab("ranks")
            return
        self.app.back_to_picker()  # type: ignore[attr-defined]  # tui/app.py's, which imports this screen

