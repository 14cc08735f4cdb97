"""A record opened in the dashboard by its path, whichever screen asks (the Runs screen, compare, export): a live
run's record is followed (FollowSource: q leaves, the run goes on), a finished or dead one replayed (ReplaySource)."""
from __future__ import annotations

from pathlib import Path

from ..runners.edge import control
from .follow import FollowSource
from .replay import ReplaySource

LIVE_HERE = "a run is still live here: stop it (s) or detach it (D) first; in a viewer, leave it (q)"
FOLLOWED = ("live", "busy")  # an engine holds the record: follow what it writes
REPLAYED = ("finished", "dead", "copy")  # nothing writes it any more: replay what is there


def source_for(run_dir: Path) -> tuple[FollowSource | ReplaySource | None, str]:
    """The source that shows the record, and what the record is in one line (control.decide's); no source for a
    folder that is no record or another user's live run."""
    state = control.state_of(Path(run_dir))
    if state.state in FOLLOWED:
        return FollowSource(Path(run_dir)), state.line
    if state.state in REPLAYED:
        return ReplaySource(Path(run_dir)), state.line
    return None, state.line


def open_record(app, run_dir: Path) -> bool:
    """Show the record in `app` (tui/app.py's DdpApp) on its run screen; a notification says why not."""
    source, line = source_for(Path(run_dir))
    if source is None:
        app.notify(line, severity="warning", timeout=8, markup=False)
        return False
    if app.running:
        app.notify(LIVE_HERE, severity="warning", markup=False)
        return False
    app.start_source(source)
    return True
