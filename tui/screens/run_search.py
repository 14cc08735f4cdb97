"""The run screen's search (`/`, n, N): the query typed, its matches highlighted in the panes and the timeline, the
timeline scrolled from match to match; a query that cannot search says why in its box (tui/search.py)."""
from __future__ import annotations

from textual.widgets import Input, TabbedContent

from ..search import Query, QueryError, parse_query, step_match
from ..widgets.rank_pane import RankPane
from ..widgets.timeline import TimelineView

SEARCH_HINT = "search: text or re:PATTERN, rank:N stream:out|err|ddptui — enter, then n/N; escape clears"


class SearchKeys:
    """Mixed into RunScreen: `search` is the query highlighted (None: no search)."""

    search: Query | None = None

    def search_box(self) -> Input:
        return self.query_one("#search", Input)  # type: ignore[attr-defined]  # a Screen's

    def action_search(self) -> None:
        box = self.search_box()
        box.disabled = False
        box.add_class("-open")
        box.focus()

    def search_typed(self, value: str) -> None:
        """The box's text changed: highlight what it finds now, or say in the box why it cannot search."""
        box = self.search_box()
        try:
            self.search = parse_query(value)
        except QueryError as e:
            self.search = None
            box.border_subtitle = str(e)
            box.add_class("-bad-query")
        else:
            box.border_subtitle = ""
            box.remove_class("-bad-query")
        self.show_search()

    def search_entered(self) -> None:
        """enter: the first match (the box keeps a query that cannot search, and the focus, to be fixed)."""
        if self.search_box().has_class("-bad-query"):
            return
        if self.search is None:
            self.close_search()
            return
        self.step_match(True)

    def show_search(self) -> None:
        """Highlight the search's matches in every pane and in the timeline."""
        for pane in self.query(RankPane):  # type: ignore[attr-defined]
            pane.show(self.model, self.needle, self.search)  # type: ignore[attr-defined]
        self.query_one(TimelineView).set_search(self.search)  # type: ignore[attr-defined]

    def close_search(self) -> None:
        box = self.search_box()
        box.value = ""
        box.border_subtitle = ""
        box.remove_class("-open", "-bad-query")
        box.disabled = True
        self.search = None
        self.show_search()
        self.focus_rank_pane(None)  # type: ignore[attr-defined]

    def action_next_match(self) -> None:
        self.step_match(True)

    def action_previous_match(self) -> None:
        self.step_match(False)

    def step_match(self, forward: bool) -> None:
        """n / N: the timeline shows the next (previous) match, scrolled into view; the box says which of how many."""
        if self.search is None:
            self.notify("no search: / searches the log lines", severity="warning")  # type: ignore[attr-defined]
            return
        tabs = self.query_one(TabbedContent)  # type: ignore[attr-defined]
        shown = tabs.active == "timeline"
        if not shown:
            self.action_tab("timeline")  # type: ignore[attr-defined]
        view = self.query_one(TimelineView)  # type: ignore[attr-defined]
        found = view.search_matches()
        i = step_match(found, view.current, forward)
        box = self.search_box()
        if i is None:
            box.border_subtitle = "no match"
            return
        view.focus()
        box.border_subtitle = f"match {i + 1}/{len(found)}"
        if shown and view.size.width:
            view.go_to(found[i])
        else:  # the tab shows now: scrolled once it has its size
            view.go_to_once_shown(found[i])
