"""The `?` help screen: the keys of the screen it was opened from (the picker's differ from the run screen's)."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

RUN_KEYS = (
    ("q", "quit (asks first while a run is live; stops every rank and waits)"),
    ("ctrl+c", "copy the text selected with the mouse; with none, quit as q does"),
    ("ctrl+p", "command palette: every key of this screen by name, and Textual's commands (theme, keys, quit)"),
    ("s", "stop the run (every rank torn down)"),
    ("D", "detach: leave the dashboard, the run goes on (`ddptui attach RUN_DIR` comes back; s there stops it)"),
    ("d", "dump the stacks of every rank now"),
    ("r", "rerun the same profile (when the run has ended; a replay says how to run it again)"),
    ("t", "toggle the merged timeline of all ranks"),
    ("/", "search log lines: text, or re:PATTERN (a regular expression); rank:N and stream:out|err|ddptui narrow it; "
          "matches marked in the panes and the timeline, enter goes to the first (escape clears)"),
    ("n / N", "next / previous match in the timeline, scrolled into view (the search box says: match 3/17)"),
    ("f", "filter log lines by substring: panes, timeline and zoom show only those (enter keeps it, escape clears)"),
    ("x / X", "replay: the next / previous incident (stall, crash, divergence, node lost); the screen as it was then"),
    ("[ ]", "replay: one event back / on"),
    (", .", "replay: one second back / on"),
    ("j", "replay: jump to a time: HH:MM:SS (the clock) or +SECONDS / +M:SS from the start, enter"),
    ("0-9", "focus that rank's pane (rank numbers, from 0)"),
    ("g", "go to rank: type its number, enter (any rank, also beyond 9)"),
    ("tab", "next pane"),
    ("m", "rows/panes: the compact table of every rank (one row each) or one pane per rank"),
    ("b", "compact table: sort by step, step time or loss (worst first), or rank"),
    ("enter", "compact table: open the highlighted rank full screen"),
    ("z", "zoom the focused rank full screen (z / escape back)"),
    ("w", "chart: the recent window or the whole run (thinned, spikes kept; the default once a long run ended)"),
    ("l", "chart: the losses or each rank's step time (the slowest ranks and the median above 8 ranks)"),
    ("k o c h v", "stacks, collectives, crash, hints, verdict tabs"),
    ("y / Y", "Stacks tab: copy the stacks of the rank at the top of the view (the culprit's when scrolled to the top) / every rank's"),
    ("p", "save a screenshot (SVG) into the run record: RUN/screenshots/"),
    ("R", "runs: every record of the runs folder; enter replays one, or follows a live one"),
    ("e", "export the run's steps per rank (loss, step time, samples/s) and events as CSV into RUN/export/"),
    ("escape", "back: close the search, clear the filter, back to the grid, back to the profile picker"),
    ("← → ⇧wheel", "scroll long lines sideways (timeline, zoom, stacks)"),
    ("mouse", "click a tab or a pane to show or focus it; the wheel scrolls"),
    ("?", "this help"),
)

PICKER_KEYS = (
    ("↑ ↓", "pick a profile in the list"),
    ("enter", "launch it (in the list or in a field)"),
    ("ctrl+l", "launch"),
    ("tab", "next field: nproc, steps, stall_after (what you type overrides the profile), then Launch"),
    ("escape", "leave a field, back to the list"),
    ("q", "quit, from the list (in a field q is typed: ctrl+q quits there)"),
    ("ctrl+q", "quit, from anywhere"),
    ("ctrl+c", "quit, as q (in a field: copy)"),
    ("p", "save a screenshot (SVG) into the runs folder (from the list)"),
    ("R", "runs: every record of the runs folder; enter replays one, or follows a live one (from the list)"),
    ("mouse", "click a profile, a field or Launch"),
    ("?", "this help (from the list)"),
)

ZOOM_KEYS = (
    ("z / escape", "back to the run screen"),
    ("q", "quit (asks first while a run is live)"),
    ("d", "dump the stacks of every rank now"),
    ("p", "save a screenshot (SVG) into the run record: RUN/screenshots/"),
    ("↑ ↓ pgup pgdn", "scroll the rank's log (scrolling up stops following the newest line)"),
    ("← → ⇧wheel", "scroll long lines sideways"),
    ("?", "this help"),
)

RUNS_KEYS = (
    ("↑ ↓", "pick a record (newest first)"),
    ("enter", "open it: a finished run replayed, a live one followed (q there leaves it running)"),
    ("space", "mark the record (or unmark it); c compares the marked ones, in the order marked"),
    ("c", "compare the marked records (2 or more): their loss and step-time curves overlaid"),
    ("g", "read the runs folder again"),
    ("escape", "back to the screen it was opened from"),
    ("q", "quit"),
    ("?", "this help"),
)

# The screen's class name -> its keys and what it is called in the title.
SCREENS = {
    "RunScreen": ("run screen", RUN_KEYS),
    "PickerScreen": ("profile picker", PICKER_KEYS),
    "ZoomScreen": ("zoomed rank", ZOOM_KEYS),
    "RunsScreen": ("runs", RUNS_KEYS),
}


def keys_for(screen_name: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """(title, keys) for the screen help was opened from; the run screen's for any other."""
    return SCREENS.get(screen_name, SCREENS["RunScreen"])


def keys_text(keys) -> str:
    width = max(len(k) for k, _ in keys)
    return "\n".join(f"{k:>{width}}  {v}" for k, v in keys)


class HelpScreen(ModalScreen):
    BINDINGS = [Binding("escape,question_mark,q", "app.pop_screen", "close")]

    def __init__(self, screen_name: str = "RunScreen") -> None:
        super().__init__()
        self.screen_name = screen_name
        self.title_text, self.keys = keys_for(screen_name)

    def compose(self) -> ComposeResult:
        with Vertical(id="help-box"):
            yield Static(f"ddptui keys: {self.title_text}", id="help-title")
            yield Static(keys_text(self.keys), id="help-keys", markup=False)
            yield Static("escape closes", classes="dim")
