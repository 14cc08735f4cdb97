"""The Textual front end: picks a profile, runs the engine in a thread worker, folds its batches into the model and tells the screens what changed."""
from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from textual import work
from textual.app import App
from textual.binding import Binding
from textual.events import Key
from textual.message import Message
from textual.worker import Worker, WorkerState

from ..runners import events as ev
from .attach_words import attach_command
from .gc_policy import COLLECT_PERIOD, BetweenFrames
from .model import Changes, RunModel
from .nocolor import readable_filters
from .palette import ScreenActions
from .redraw import RedrawCap
from .replay import ReplaySource
from .sizes import size_classes

if TYPE_CHECKING:
    from textual.timer import Timer

    from ..runners.attach.session import AttachSession
    from ..runners.session import Session

JOIN_SECONDS = 60.0  # teardown is TERM → deadline → KILL per group; this only guards against a wedged engine


# -- event sources: the one thing that runs outside the UI thread -----------------------------------

class Source(Protocol):
    """What the app runs in its engine worker: a live run, an attached job or a replayed record."""

    kind: str

    def prepare(self, emit: Callable[[list], None]) -> None: ...
    def run(self) -> int: ...
    def request_stop(self) -> None: ...
    def request_dump(self) -> bool: ...
    def again(self) -> Any: ...


class _SessionSource:
    """What a launched and an attached run share: an engine session built in prepare(), run in the worker."""

    session: Session | AttachSession | None = None

    def run(self) -> int:
        assert self.session is not None, "prepare() builds the session before the worker runs it"
        return self.session.run()

    def request_stop(self) -> None:
        if self.session is not None:
            self.session.request_stop()

    def request_dump(self) -> bool:
        if self.session is not None:
            self.session.request_dump()
            return True
        return False


class LiveSource(_SessionSource):
    """A real run: runners.session.Session, built on the UI thread, run() in the engine's thread worker."""

    kind = "live"

    def __init__(self, profile, runs_root: Path) -> None:
        self.profile, self.runs_root = profile, Path(runs_root)

    def prepare(self, emit: Callable[[list], None]) -> None:
        from ..runners.session import Session
        self.session = Session(self.profile, runs_root=self.runs_root, emit=emit)

    def again(self) -> LiveSource:
        return LiveSource(self.profile, self.runs_root)


class AttachSource(_SessionSource):
    """A job ddptui did not launch (runners.attach.session.AttachSession, watching until it ends): q detaches, s asks
    and then stops the job through its own launcher, never its ranks one by one."""

    kind = "attach"

    def __init__(self, job, runs_root: Path, stall_after: float, stack_every: float, pyspy: str | None = None) -> None:
        self.job, self.runs_root = job, Path(runs_root)
        self.stall_after, self.stack_every, self.pyspy = stall_after, stack_every, pyspy
        self.session: AttachSession | None = None

    def prepare(self, emit: Callable[[list], None]) -> None:
        from ..runners.attach.session import AttachSession
        self.session = AttachSession(self.job, self.runs_root, emit, watch=True, stall_after=self.stall_after,
                                     stack_every=self.stack_every, pyspy=self.pyspy)

    def stop_words(self) -> tuple[str, bool]:
        """What stopping the job would do, and whether ddptui can do it at all."""
        from ..runners.attach.session import stop_words
        said, how = stop_words(self.job)
        return said, how is not None

    def stop_job(self) -> str:
        return self.session.stop_job() if self.session is not None else "not attached"

    def again(self) -> AttachSource:
        """The job found again from what the user asked (a pid, a Slurm job), never its old pids: a job that has ended
        raises NotAJob, whose words say why."""
        from ..runners.attach.find import find_job, find_slurm_job
        job = find_slurm_job(self.job.slurm_job) if self.job.kind == "slurm" else find_job(int(self.job.asked))
        return AttachSource(job, self.runs_root, self.stall_after, self.stack_every, self.pyspy)


# -- the app --------------------------------------------------------------------------------------

class DaemonThreads(concurrent.futures.ThreadPoolExecutor):
    """The loop's default executor while the dashboard runs, which is where Textual runs thread workers: daemon
    threads nobody joins, so an engine that never returns cannot keep ddptui from exiting (a ThreadPoolExecutor's
    threads are joined by asyncio.run and again at interpreter exit, without a time limit)."""

    def submit(self, fn, /, *args, **kwargs) -> concurrent.futures.Future:
        f: concurrent.futures.Future = concurrent.futures.Future()

        def run() -> None:
            if not f.set_running_or_notify_cancel():
                return
            try:
                f.set_result(fn(*args, **kwargs))
            except BaseException as exc:  # noqa: BLE001 - handed to whoever awaits the future
                f.set_exception(exc)
        threading.Thread(target=run, name="ddptui-worker", daemon=True).start()
        return f

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        pass  # nothing to join: DdpApp.shutdown() waits for the engine, at most JOIN_SECONDS


class EventsArrived(Message):
    """A batch from the engine's thread; one still waiting in the queue is folded into the next (can_replace)."""

    def __init__(self, source, batch: Sequence[ev.Event]) -> None:
        super().__init__()
        self.source, self.batches = source, [batch]

    def can_replace(self, message: Message) -> bool:
        # Textual asks the message it is about to handle whether the next one in the queue may stand for both:
        # the next one takes this one's batches in front of its own, so nothing is lost and order is kept.
        if isinstance(message, EventsArrived) and message.source is self.source:
            message.batches[:0] = self.batches
            return True
        return False


class ModelChanged(Message, bubble=False):
    """Posted to the screens showing the model, at most as often as tui/redraw.py allows; pending ones merge."""

    def __init__(self, changes: Changes) -> None:
        super().__init__()
        self.changes = changes

    def can_replace(self, message: Message) -> bool:
        if isinstance(message, ModelChanged):
            message.changes.merge(self.changes)
            return True
        return False


class DdpApp(App):
    CSS_PATH = Path(__file__).with_name("app.tcss")  # not relative: a subclass elsewhere (tests) finds it too
    TITLE = "ddptui"
    COMMANDS = App.COMMANDS | {ScreenActions}  # the palette: Textual's commands and the screen's keys (tui/palette.py)
    BINDINGS = [Binding("ctrl+q", "quit_run", "quit", show=False, priority=True),
                Binding("p", "screenshot", "screenshot", show=False)]

    def __init__(self, source: Source | None = None, picker_extra: Path | None = None, runs_root: Path = Path("runs"),
                 show_picker: bool | None = None) -> None:
        super().__init__()
        self.runs_root = Path(runs_root)
        self.picker_extra = picker_extra
        self.first_source = source
        self.show_picker = source is None if show_picker is None else show_picker
        self.source: Any = None  # the Source shown (live, attach or replay: each with its own extras), None before one
        self.model: RunModel | None = None
        self.worker: Worker | None = None  # the engine's thread worker of the current run
        self.engine_done = threading.Event()  # set when the current run's run() returned (its thread is done)
        self._live = False  # a run started and the UI has not yet heard that it ended
        self.run_code: int | None = None
        self.run_error: str | None = None
        self.runs_started = 0
        self._pace = RedrawCap()
        self._pace_timer: Timer | None = None
        self._pace_at = 0.0  # when the pending timer fires
        self._quitting = False
        self.collector = BetweenFrames()  # Python's collections made between frames (tui/gc_policy.py)
        # No animations: a tab's underline slid for 0.3 s after every switch, 17 more repaints of the screen per key
        # (the widgets already scroll without animating).
        self.animation_level = "none"
        self.detached_run: Path | None = None  # the record of the run D let go on without the dashboard

    def get_line_filters(self):
        """Textual's NO_COLOR greys, with text kept readable on its background (tui/nocolor.py)."""
        return readable_filters(super().get_line_filters())

    async def on_event(self, event) -> None:
        if isinstance(event, Key):
            self.collector.key_pressed()  # the key's repaint before any collection owed (tui/gc_policy.py)
        await super().on_event(event)

    def on_resize(self, event) -> None:
        self.update_classes(size_classes(event.size.width, event.size.height))  # app.tcss: 80x24 .. 220x60

    def on_mount(self) -> None:
        asyncio.get_running_loop().set_default_executor(DaemonThreads())
        self.collector.hold()
        self.set_interval(COLLECT_PERIOD, self.collector.due, name="collector")
        if self.show_picker:
            from .screens.picker import PickerScreen
            self.push_screen(PickerScreen(self.picker_extra))
        if self.first_source is not None:
            self.start_source(self.first_source)

    # -- starting runs ------------------------------------------------------------------------------
    def start_run(self, profile) -> None:
        """A profile launched from the picker: its engine a process of its own (tui/held.py), started as `ddptui PATH
        --runs-dir RUNS --set K=V...` from the picker's path and fields; one known by no path runs in this process."""
        from .screens.picker import PickerScreen
        picker = next((s for s in self.screen_stack if isinstance(s, PickerScreen)), None)
        path = picker.selected_path() if picker is not None else None
        if picker is None or path is None:
            self.start_source(LiveSource(profile, self.runs_root))
            return
        from .held import HeldSource
        sets = [x for o in picker.overrides() for x in ("--set", o)]
        self.start_source(HeldSource([str(path), "--runs-dir", str(self.runs_root), *sets]))

    def start_source(self, source: Source) -> None:
        from .screens.run import RunScreen
        if self.running:
            self.notify("a run is still live: stop it first (s)", severity="warning")
            return
        self.source, self.model = source, RunModel()
        self.run_code = self.run_error = None
        if self._pace_timer is not None:
            self._pace_timer.stop()
            self._pace_timer = None
        self._pace = RedrawCap()
        try:
            def emit(batch: list, src: Source = source) -> None:
                self.post_message(EventsArrived(src, batch))
            source.prepare(emit)
        except Exception as exc:  # noqa: BLE001 - shown to the user, the app stays usable
            self.notify(f"cannot start: {exc}", severity="error", timeout=15, markup=False)
            self.source = None
            return
        screen = RunScreen(self.model, source.kind)
        if self.screen_stack and type(self.screen).__name__ == "RunScreen":
            self.switch_screen(screen)
        else:
            self.push_screen(screen)
        self.runs_started += 1
        self.engine_done = threading.Event()
        self._live = True
        self.worker = self._run_engine(source, self.engine_done)

    @work(thread=True, exclusive=True, exit_on_error=False, group="engine", name="ddptui-engine")
    def _run_engine(self, source, done: threading.Event) -> int:
        """The engine's loop, off the UI thread; what it returns or raises arrives as Worker.StateChanged."""
        try:
            return source.run()
        finally:
            done.set()

    @property
    def running(self) -> bool:
        """The run has not ended, as far as the UI heard (its end arrives as Worker.StateChanged)."""
        return self._live

    @property
    def drawn(self) -> bool:
        """Every change folded into the model has been told to the screens (nothing held back by tui/redraw.py, no
        chart catch-up waiting for the next repaint: RunScreen._chart_later)."""
        return self._pace_timer is None and (self.model is None or not self.model.changes) and not any(
            getattr(s, "chart_pending", False) for s in self.screen_stack)

    def on_events_arrived(self, msg: EventsArrived) -> None:
        if msg.source is not self.source or self.model is None:
            return
        for batch in msg.batches:
            if batch:
                self.model.apply(batch)
        self._publish()

    def _publish(self, final: bool = False) -> None:
        """Tell the screens what changed, at most as often as tui/redraw.py says; the rest goes out when due."""
        if self.model is None:
            return
        now = time.monotonic()
        out, wait = self._pace.due(self.model.changes, now, final)
        if out:
            for screen in self.screen_stack:
                if getattr(screen, "model", None) is self.model:
                    screen.post_message(ModelChanged(out.copy()))
        at = None if wait is None else now + wait
        if self._pace_timer is not None and (at is None or at < self._pace_at):
            self._pace_timer.stop()  # nothing held back any more, or what is held is due sooner (panes, not the chart)
            self._pace_timer = None
        if at is not None and wait is not None and self._pace_timer is None:
            self._pace_timer, self._pace_at = self.set_timer(wait, self._publish_due), at

    def chart_due(self) -> bool:
        """The loss chart shows again with older losses than the model's: True when it may be drawn now (a key
        redraws at once), else it is told when its cap allows."""
        if self.model is None or self._pace.chart_now(time.monotonic()):
            return True
        self.model.changes.loss = True
        self._publish()
        return False

    def _publish_due(self) -> None:
        self._pace_timer = None
        self._publish()

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker is not self.worker or not event.worker.is_finished:
            return
        w = event.worker
        self._live = False
        if w.state == WorkerState.SUCCESS:
            self.run_code = w.result
        elif w.state == WorkerState.ERROR:
            err = w.error
            assert err is not None, "a worker in ERROR state holds its exception"
            self.run_error = "".join(traceback.format_exception(type(err), err, err.__traceback__))
            self.notify(self.run_error.strip().splitlines()[-1], title="engine error", severity="error", timeout=30,
                        markup=False)
        self._publish(final=True)  # the run's batches came before this message: its end is drawn at once
        if self._quitting:
            self.exit(return_code=self.run_code or 0)
            return
        self._drop_moot_question()

    def _drop_moot_question(self) -> None:
        """The run ended while a question about stopping it was open (q pressed in its last moments): nothing is left
        to stop, so the question goes, and the dashboard stays on the run's end."""
        from .screens.confirm import ConfirmQuit
        stack = self.screen_stack  # (empty while the app is closing)
        if stack and isinstance(stack[-1], ConfirmQuit):
            stack[-1].dismiss(False)
            self.notify("the run has ended: nothing to stop (q leaves)", markup=False)

    # -- actions ------------------------------------------------------------------------------------
    async def action_quit(self) -> None:
        """Textual's Quit (the command palette's): as q, so a live run asks before every rank is stopped."""
        self.action_quit_run()

    def action_quit_run(self) -> None:
        if self._quitting:
            return
        if self.running and getattr(self.source, "kind", "") == "live":
            if self.model is not None and self.model.finished is not None:
                self._exit_once_run_returns()  # the run has ended (its summary is drawn): its engine is only closing
                return
            from .screens.confirm import ConfirmQuit
            if not isinstance(self.screen, ConfirmQuit):
                self.push_screen(ConfirmQuit(), self._confirmed_quit)
            return
        self._stop_and_exit()

    def _confirmed_quit(self, yes: bool | None) -> None:
        if yes:
            self._stop_and_exit()

    def _stop_and_exit(self) -> None:
        """Stop every rank and leave once run() has returned (on_worker_state_changed), or at once when nothing runs."""
        if not self.running:
            self.exit(return_code=self.run_code or 0)
            return
        self.source.request_stop()
        kind = getattr(self.source, "kind", "")
        self.notify("detaching; the job runs on…" if kind == "attach" else "leaving; the run goes on…"
                    if kind == "follow" else "stopping every rank…", timeout=30)
        self._exit_once_run_returns()

    def _exit_once_run_returns(self) -> None:
        """Leave when run() has returned (on_worker_state_changed), or after JOIN_SECONDS if the engine is wedged."""
        self._quitting = True
        self.set_timer(JOIN_SECONDS, lambda: self.exit(return_code=1))

    def leave_on_signal(self, why: str) -> None:
        """SIGHUP (the terminal closed) or SIGTERM: stop the run as `q` does and leave once it ended
        (tui/app_signals.py has already asked the engine to stop, and bounds the wait)."""
        self._stop_and_exit()

    def action_stop(self) -> None:
        if self.running and getattr(self.source, "kind", "") == "attach":  # not ddptui's job: ask, then its launcher
            from .screens.confirm_stop_job import ConfirmStopJob
            what, can = self.source.stop_words()
            self.push_screen(ConfirmStopJob(what, can), self._confirmed_stop_job)
            return
        if self.running and getattr(self.source, "kind", "") == "follow":  # another process's engine: asked
            self.notify(self.source.stop_run(), markup=False)
            return
        if self.running:
            self.source.request_stop()
            self.notify("stopping every rank…")
        else:
            self.notify("no live run to stop")

    def _confirmed_stop_job(self, yes: bool | None) -> None:
        if yes:
            self.notify(self.source.stop_job(), timeout=10, markup=False)

    def action_detach(self) -> None:
        """D: leave the dashboard, the run goes on (its engine is a process of its own); the terminal then says how
        to come back (run_app)."""
        detach = getattr(self.source, "detach", None)
        if not self.running:
            self.notify("no live run to detach", severity="warning")
            return
        if detach is None:
            self.notify("this run's engine runs inside the dashboard: it cannot be detached (q stops it)"
                        if getattr(self.source, "kind", "") == "live" else "q leaves; the run goes on",
                        severity="warning")
            return
        run_dir = detach()
        if run_dir is None:
            self.notify("the run is starting or stopping: nothing to detach", severity="warning")
            return
        self.detached_run = run_dir
        self.exit(return_code=0)

    def get_system_commands(self, screen):
        yield from super().get_system_commands(screen)
        if self.running and getattr(self.source, "detach", None) is not None:
            from textual.app import SystemCommand
            yield SystemCommand("Detach", "Leave the dashboard; the run goes on (ddptui attach RUN_DIR comes back)",
                                self.action_detach)

    def action_dump(self) -> None:
        if self.running and self.source.request_dump():
            self.notify("collecting the stacks of every rank…")
            from .screens.run import RunScreen
            if isinstance(self.screen, RunScreen):
                self.screen.action_tab("stacks")
        else:
            self.notify("no live processes to dump", severity="warning")

    def action_rerun(self) -> None:
        if self.source is None:
            return
        if self.running:
            self.notify("the run is still live: stop it first (s)", severity="warning")
            return
        if self.source.kind == "replay":  # replaying the record again would only draw the very same screens
            name = self.model.profile if self.model else ""
            adhoc = name == "adhoc" or name.startswith("adhoc-")  # a wrapped command's: no profile of that name
            again = f"; to run its profile again: ddptui {name}" if name and not adhoc else ""
            self.notify(f"replay of {self.source.run_dir}: r reruns live runs only{again}", severity="warning",
                        timeout=8, markup=False)
            return
        from ..runners.attach.find import NotAJob
        try:
            again = self.source.again()
        except NotAJob as e:  # an attached job that has ended: nothing to attach to again
            self.notify(f"cannot attach again: {e}", severity="warning", timeout=8, markup=False)
            return
        self.start_source(again)

    def action_screenshot(self, filename: str | None = None, path: str | None = None) -> None:
        self.deliver_screenshot(filename, path)

    def deliver_screenshot(self, filename: str | None = None, path: str | None = None,
                           time_format: str | None = None) -> str | None:
        """The `p` key and the command palette's Screenshot: an SVG into the run record (Textual's own saves into
        XDG_DOWNLOAD_DIR and fails without it), the path said in a notification."""
        from .screenshot import save
        return save(self, filename, path)

    def action_runs(self) -> None:
        """R: the Runs screen on the runs folder (a replayed or followed record's own folder's)."""
        from .screens.runs import RunsScreen
        if isinstance(self.screen, RunsScreen):
            return
        shown = getattr(self.source, "run_dir", None)
        root = Path(shown).parent if shown is not None and self.source.kind in ("replay", "follow") else self.runs_root
        self.push_screen(RunsScreen(root))

    def action_help(self) -> None:
        from .screens.help import HelpScreen
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(type(self.screen).__name__))  # the keys of the screen it is opened from

    def back_to_picker(self) -> None:
        from .screens.picker import PickerScreen
        if self.running or not any(isinstance(s, PickerScreen) for s in self.screen_stack):
            return
        while not isinstance(self.screen, PickerScreen):
            self.pop_screen()

    def on_unmount(self) -> None:
        self.collector.release()
        if self.worker is not None and not self.engine_done.is_set():
            self.source.request_stop()

    def shutdown(self, timeout: float = JOIN_SECONDS) -> None:
        """After the app has exited: make sure the engine stopped every rank and run() returned."""
        if self.worker is not None and not self.engine_done.is_set():
            self.source.request_stop()
            self.engine_done.wait(timeout)


# -- entry points (called by tui.cli) -------------------------------------------------------------

def run_dashboard(app: DdpApp) -> None:
    """app.run() with SIGHUP/SIGTERM stopping the run (tui/app_signals.py); then the engine is surely done."""
    from .app_signals import AppSignals
    signals = AppSignals(app)
    signals.install()
    try:
        app.run()
    finally:
        signals.restore()
        app.shutdown()


def run_app(profile_path, overrides: Sequence[str] = (), runs_root: Path = Path("runs"),
            engine: tuple[list[str], list[str]] | None = None) -> int:
    """Open the dashboard: the picker (None), or straight into a run of a profile path or a loaded Profile.

    engine: the command line (ARGV, COMMAND) of `ddptui` that asked for the run: its engine then runs as a process of
    its own (tui/held.py) that D leaves running; without it the engine runs in this process (LiveSource).
    A path that does not load raises ProfileError (the cli prints its one line). Returns the run's exit code.
    """
    source: Any = None
    extra = None
    if isinstance(profile_path, (str, Path)):
        from ..runners.launch.profile.load import load_profile
        profile = load_profile(profile_path, overrides)
        source = LiveSource(profile, runs_root) if engine is None else None
        extra = Path(profile_path)
    elif profile_path is not None and engine is None:  # an already loaded Profile (e.g. `ddptui -- CMD`)
        source = LiveSource(profile_path, runs_root)
    if engine is not None and profile_path is not None:
        from .held import HeldSource
        source = HeldSource(*engine)
    app = DdpApp(source=source, picker_extra=extra, runs_root=runs_root)
    run_dashboard(app)
    if app.detached_run is not None:
        pid = getattr(app.source, "engine", None)
        print("ddptui: detached; the run goes on" + (f" (its engine: pid {pid.pid})" if pid is not None else "")
              + f"\nrun: {app.detached_run}\ncome back: {attach_command(app.detached_run)}   (s there stops it; "
              "--no-ui for its console)", flush=True)
        return 0
    return app.run_code if app.run_code is not None else (app.return_code or 0)


def run_attach(job, runs_root, stall_after: float, stack_every: float, pyspy: str | None = None) -> int:
    """The dashboard on a job ddptui did not launch (`ddptui attach PID`): q detaches, the job runs on."""
    source = AttachSource(job, Path(runs_root), stall_after, stack_every, pyspy)
    app = DdpApp(source=source)
    run_dashboard(app)
    return app.run_code or 0


def run_follow(source) -> int:
    """The dashboard on a ddptui run's record another process's engine writes (`ddptui attach RUN_DIR`): q leaves,
    the run goes on; d and s go to its engine through the control channel."""
    app = DdpApp(source=source)
    run_dashboard(app)
    return app.run_code or 0


def run_replay(run_dir: str | Path) -> int:
    """Reopen a finished run from its record in the same screens."""
    source = ReplaySource(Path(run_dir))
    app = DdpApp(source=source)
    run_dashboard(app)
    return 1 if source.problems else 0  # as `ddptui replay --no-ui`: the record was incomplete or malformed
