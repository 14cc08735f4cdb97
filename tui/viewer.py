"""One browser tab of `ddptui serve` (textual-serve starts this per tab): a viewer of a record, followed while its engine
runs, replayed once it ended, or of a runs folder's Runs screen (`--runs-dir`), whose enter opens a record so; it
never launches a run and stops one only after `s` and a yes."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from textual.worker import Worker

from .app import DdpApp, run_dashboard
from .open_record import source_for
from .screens.confirm import ConfirmQuit
from .screens.runs import RunsScreen

STOP_QUESTION = "Stop every rank of this run? Its engine stops it for everyone watching."


class ViewerApp(DdpApp):
    """The dashboard on one record with nothing to launch: no picker, r follows or replays again, q leaves. With a
    runs folder it opens on its Runs screen; q on a record goes back to it (a followed run goes on), q there leaves."""

    def __init__(self, source=None, runs_dir: Path | None = None) -> None:
        super().__init__(source=source, runs_root=runs_dir or Path("runs"), show_picker=False)
        self.runs_dir = runs_dir
        self._back_to_runs = False  # q left a record: the Runs screen once its source's thread has ended

    def on_mount(self) -> None:
        super().on_mount()
        if self.runs_dir is not None:
            self.push_screen(RunsScreen(self.runs_dir))

    async def action_quit(self) -> None:
        """The palette's Quit leaves the tab, from any screen (asking first where q asks)."""
        super().action_quit_run()

    def action_quit_run(self) -> None:
        if self.runs_dir is None or self._quitting or isinstance(self.screen, (RunsScreen, ConfirmQuit)):
            super().action_quit_run()
            return
        if self.running:  # a followed run goes on without this tab; a replay stops
            self._back_to_runs = True
            self.source.request_stop()
            if getattr(self.source, "kind", "") == "follow":
                self.notify("leaving the record; the run goes on…", markup=False)
            return
        self.push_screen(RunsScreen(self.runs_dir))

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        super().on_worker_state_changed(event)
        if self._back_to_runs and self.runs_dir is not None and event.worker is self.worker and not self.running:
            self._back_to_runs = False
            self.push_screen(RunsScreen(self.runs_dir))

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
    p.add_argument("run_dir", nargs="?")
    p.add_argument("--runs-dir", help="a runs folder: its Runs screen")
    args = p.parse_args(argv)
    if args.runs_dir is not None:
        if not Path(args.runs_dir).is_dir():
            print(f"ddptui: {args.runs_dir}: no runs folder there", file=sys.stderr)
            return 2
        run_dashboard(ViewerApp(runs_dir=Path(args.runs_dir)))
        return 0
    if args.run_dir is None:
        p.error("give RUN_DIR or --runs-dir D")
    source, line = source_for(Path(args.run_dir))
    if source is None:
        print(f"ddptui: {line}", file=sys.stderr)
        return 2
    app = ViewerApp(source=source)
    run_dashboard(app)
    return 0


if __name__ == "__main__":
    sys.exit(main())
