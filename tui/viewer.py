"""One browser tab of `ddptui serve` (textual-serve starts this per tab): a viewer of a record, followed while its engine
runs, replayed once it ended; it never launches a run and stops one only after `s` and a yes."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..runners.edge import control
from .app import DdpApp, run_dashboard
from .follow import FollowSource
from .replay import ReplaySource
from .screens.confirm import ConfirmQuit

STOP_QUESTION = "Stop every rank of this run? Its engine stops it for everyone watching."


def source_for(run_dir: Path) -> FollowSource | ReplaySource | str:
    """What a tab shows of RUN_DIR now: its engine's record followed (live), the record replayed (finished, or its
    engine died: replay says the record is incomplete), else the one line that says why not."""
    state = control.state_of(run_dir)
    if state.state == "live":
        return FollowSource(run_dir)
    if state.state in ("finished", "dead"):
        return ReplaySource(run_dir)
    return state.line


class ViewerApp(DdpApp):
    """The dashboard on one record with nothing to launch: no picker, r follows or replays again, q leaves."""

    def action_stop(self) -> None:
        if self.running and getattr(self.source, "kind", "") == "follow":
            self.push_screen(ConfirmQuit(STOP_QUESTION, "Stop the run (y)"), self._confirmed_stop_run)
            return
        super().action_stop()

    def _confirmed_stop_run(self, yes: bool | None) -> None:
        if yes and self.running:
            self.notify(self.source.stop_run(), markup=False)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="ddptui-viewer", description=__doc__)
    p.add_argument("run_dir")
    args = p.parse_args(argv)
    source = source_for(Path(args.run_dir))
    if isinstance(source, str):
        print(f"ddptui: {source}", file=sys.stderr)
        return 2
    app = ViewerApp(source=source)
    run_dashboard(app)
    return 0


if __name__ == "__main__":
    sys.exit(main())
