"""The Textual front end: picks a profile, runs the engine in a thread, folds its batches into the model, draws at 4 Hz."""
from __future__ import annotations

import threading
import time
import traceback
from pathlib import Path
from typing import Callable, Sequence

from textual.app import App
from textual.binding import Binding
from textual.message import Message

from ddptui.runners import events as ev
from ddptui.tui.model import RunModel

JOIN_SECONDS = 60.0  # teardown is TERM → deadline → KILL per group; this only guards against a wedged engine


# -- event sources: the one thing that runs outside the UI thread -----------------------------------

class LiveSource:
    """A real run: runners.session.Session, built on the UI thread, run() in the feed thread."""

    kind = "live"

    def __init__(self, profile, runs_root: Path) -> None:
        self.profile, self.runs_root = profile, Path(runs_root)
        self.session = None

    def prepare(self, emit: Callable[[list], None]) -> None:
        from ddptui.runners.session import Session
        self.session = Session(self.profile, runs_root=self.runs_root, emit=emit)

    def run(self) -> int:
        return self.session.run()

    def request_stop(self) -> None:
        if self.session is not None:
            self.session.request_stop()

    def request_dump(self) -> bool:
        if self.session is not None:
            self.session.request_dump()
            return True
        return False

    def again(self) -> "LiveSource":
        return LiveSource(self.profile, self.runs_root)


class ReplaySource:
    """A finished run's record fed through the same path; ``until`` cuts it N seconds after the start."""

    kind = "replay"

    def __init__(self, run_dir: Path, until: float | None = None, chunk: int = 500) -> None:
        self.run_dir, self.until, self.chunk = Path(run_dir), until, chunk
        self._stop = threading.Event()
        self.emit: Callable[[list], None] = lambda batch: None
        self.problems: list[str] = []  # what the record lacks or could not be read (runners.record.replay_events)

    def prepare(self, emit) -> None:
        self.emit = emit

    def run(self) -> int:
        from ddptui.runners.record import replay_events
        batch: list = []
        start = last = finished = None
        code = 0
        self.problems = []
        for e in replay_events(self.run_dir, self.problems):
            if self._stop.is_set():
                break
            if isinstance(e, ev.RunStarted):
                start = e.wall
            if self.until is not None and start is not None and e.wall - start > self.until:
                break
            if isinstance(e, ev.RunFinished):
                code, finished = e.exit_code, e
            last = getattr(e, "wall", last)
            batch.append(e)
            if len(batch) >= self.chunk:
                self.emit(batch)
                batch = []
        else:
            if self.problems:  # said in the launcher pane; a record that never finished must not look live
                wall = last if last is not None else time.time()
                batch.append(ev.LogLines(None, "err", wall, 0.0,
                                         ("ddptui: replay: " + "; ".join(self.problems) + "; replayed what is there",)))
                if finished is None:
                    batch.append(ev.RunFinished("incomplete", 1, "", wall, {}))
        if batch:
            self.emit(batch)
        return code

    def request_stop(self) -> None:
        self._stop.set()

    def request_dump(self) -> bool:
        return False

    def again(self) -> "ReplaySource":
        return ReplaySource(self.run_dir, self.until, self.chunk)


class SyntheticSource:
    """Load generator for the latency benchmark: N ranks × R lines/s as real events, batched every period."""

    kind = "synthetic"

    def __init__(self, ranks: int = 16, lines_per_s: int = 1000, seconds: float = 10.0, period: float = 0.02,
                 steps: int = 10_000) -> None:
        self.ranks, self.rate, self.seconds, self.period, self.steps = ranks, lines_per_s, seconds, period, steps
        self._stop = threading.Event()
        self.emit: Callable[[list], None] = lambda batch: None
        self.lines_sent = 0
        self.thread_cpu = 0.0  # CPU seconds this generator's own thread used so far (kept out of the UI's share)

    def prepare(self, emit) -> None:
        self.emit = emit

    def run(self) -> int:
        t0 = time.time()
        self.emit([ev.RunStarted("synthetic", "synthetic", "synthetic", self.ranks, self.steps, t0)]
                  + [ev.RankState(r, "running", "", t0) for r in range(self.ranks)])
        pool = [f"iteration {i:06d} forward/backward done, grad norm {i % 97 / 10:.2f}, lr 1e-3, tokens/s 12345"
                for i in range(997)]
        pool2 = pool + pool
        owed = 0.0
        k = step = 0
        last_progress = last_res = last = t0
        while not self._stop.wait(self.period):
            now = time.time()
            if now - t0 > self.seconds:
                break
            owed += self.rate * (now - last)  # by the clock: a starved thread still offers the full rate
            last = now
            n = int(owed)
            owed -= n
            mono = time.monotonic()
            batch: list = []
            start = k % len(pool)
            lines = tuple((pool2[start:start + n] if n <= len(pool) else pool * (n // len(pool) + 1))[:n])
            for r in range(self.ranks):
                batch.append(ev.LogLines(r, "out", now, mono, lines))
            k += n
            self.lines_sent += n * self.ranks
            if now - last_progress >= 0.1:
                step += 1
                last_progress = now
                batch += [ev.Progress(r, step, 2.0 / (1 + step * 0.01) + r * 0.001, now, "hook") for r in range(self.ranks)]
            if now - last_res >= 1.0:
                last_res = now
                batch.append(ev.Resources({r: 99.0 for r in range(self.ranks)}, {r: 300 << 20 for r in range(self.ranks)}, now))
            self.emit(batch)
            self.thread_cpu = time.thread_time()
        self.emit([ev.RunFinished("stopped" if self._stop.is_set() else "ok", 0, "", time.time())])
        return 0

    def request_stop(self) -> None:
        self._stop.set()

    def request_dump(self) -> bool:
        return False

    def again(self) -> "SyntheticSource":
        return SyntheticSource(self.ranks, self.rate, self.seconds, self.period, self.steps)


# -- the app --------------------------------------------------------------------------------------

class EventsArrived(Message):
    """Posted from the feed thread at most once until the UI drains the pending events (coalescing)."""


class RunEnded(Message):
    def __init__(self, source, code: int | None, error: str | None) -> None:
        super().__init__()
        self.source, self.code, self.error = source, code, error


class DdpApp(App):
    CSS_PATH = "app.tcss"
    TITLE = "ddptui"
    BINDINGS = [Binding("ctrl+q", "quit_run", "quit", show=False, priority=True)]

    def __init__(self, source=None, picker_extra: Path | None = None, runs_root: Path = Path("runs"),
                 show_picker: bool | None = None) -> None:
        super().__init__()
        self.runs_root = Path(runs_root)
        self.picker_extra = picker_extra
        self.first_source = source
        self.show_picker = source is None if show_picker is None else show_picker
        self.source = None
        self.model: RunModel | None = None
        self.thread: threading.Thread | None = None
        self.run_code: int | None = None
        self.run_error: str | None = None
        self.runs_started = 0
        self._pending: list = []
        self._posted = False
        self._lock = threading.Lock()
        self._quitting = False

    def on_mount(self) -> None:
        if self.show_picker:
            from ddptui.tui.screens.picker import PickerScreen
            self.push_screen(PickerScreen(self.picker_extra))
        if self.first_source is not None:
            self.start_source(self.first_source)

    # -- starting runs ------------------------------------------------------------------------------
    def start_run(self, profile) -> None:
        self.start_source(LiveSource(profile, self.runs_root))

    def start_source(self, source) -> None:
        from ddptui.tui.screens.run import RunScreen
        if self.running:
            self.notify("a run is still live: stop it first (s)", severity="warning")
            return
        self.source, self.model = source, RunModel()
        self.run_code = self.run_error = None
        with self._lock:
            self._pending, self._posted = [], False
        try:
            source.prepare(lambda batch, src=source: self._emit(src, batch))
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
        self.thread = threading.Thread(target=self._feed, args=(source,), name="ddptui-feed", daemon=True)
        self.thread.start()

    @property
    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def _feed(self, source) -> None:
        code, error = None, None
        try:
            code = source.run()
        except BaseException:  # noqa: BLE001 - reported in the UI; the thread must always say it ended
            error = traceback.format_exc()
        self.post_message(RunEnded(source, code, error))

    def _emit(self, source, batch: Sequence[ev.Event]) -> None:
        """Feed thread: queue the batch; post one wake-up unless one is already pending."""
        if source is not self.source:
            return
        with self._lock:
            self._pending.extend(batch)
            if self._posted:
                return
            self._posted = True
        self.post_message(EventsArrived())

    def on_events_arrived(self, _: EventsArrived) -> None:
        with self._lock:
            batch, self._pending, self._posted = self._pending, [], False
        if self.model is not None and batch:
            self.model.apply(batch)

    def on_run_ended(self, msg: RunEnded) -> None:
        if msg.source is not self.source:
            return
        self.on_events_arrived(EventsArrived())
        self.run_code, self.run_error = msg.code, msg.error
        if msg.error:
            self.notify(msg.error.strip().splitlines()[-1], title="engine error", severity="error", timeout=30,
                        markup=False)
        if self._quitting:
            self.exit(return_code=msg.code or 0)

    # -- actions ------------------------------------------------------------------------------------
    def action_quit_run(self) -> None:
        if self._quitting:
            return
        if self.running and getattr(self.source, "kind", "") == "live":
            from ddptui.tui.screens.confirm import ConfirmQuit
            if not isinstance(self.screen, ConfirmQuit):
                self.push_screen(ConfirmQuit(), self._confirmed_quit)
            return
        self._stop_and_exit()

    def _confirmed_quit(self, yes: bool | None) -> None:
        if yes:
            self._stop_and_exit()

    def _stop_and_exit(self) -> None:
        """Stop every rank and leave once run() has returned (on_run_ended), or at once when nothing runs."""
        if not self.running:
            self.exit(return_code=self.run_code or 0)
            return
        self._quitting = True
        self.source.request_stop()
        self.notify("stopping every rank…", timeout=30)
        self.set_timer(JOIN_SECONDS, lambda: self.exit(return_code=1))

    def action_stop(self) -> None:
        if self.running:
            self.source.request_stop()
            self.notify("stopping every rank…")
        else:
            self.notify("no live run to stop")

    def action_dump(self) -> None:
        if self.running and self.source.request_dump():
            self.notify("collecting the stacks of every rank…")
            from ddptui.tui.screens.run import RunScreen
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
        self.start_source(self.source.again())

    def action_help(self) -> None:
        from ddptui.tui.screens.help import HelpScreen
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def back_to_picker(self) -> None:
        from ddptui.tui.screens.picker import PickerScreen
        if self.running or not any(isinstance(s, PickerScreen) for s in self.screen_stack):
            return
        while not isinstance(self.screen, PickerScreen):
            self.pop_screen()

    def on_unmount(self) -> None:
        if self.running:
            self.source.request_stop()

    def shutdown(self, timeout: float = JOIN_SECONDS) -> None:
        """After the app has exited: make sure the engine stopped every rank and run() returned."""
        if self.thread is not None and self.thread.is_alive():
            self.source.request_stop()
            self.thread.join(timeout)


# -- entry points (called by tui.cli) -------------------------------------------------------------

def run_app(profile_path, overrides: Sequence[str] = (), runs_root: Path = Path("runs")) -> int:
    """Open the dashboard: the picker (None), or straight into a run of a profile path or a loaded Profile.

    A path that does not load raises ProfileError (the cli prints its one line). Returns the run's exit code.
    """
    source = None
    extra = None
    if isinstance(profile_path, (str, Path)):
        from ddptui.runners.profile import load_profile
        source = LiveSource(load_profile(profile_path, overrides), runs_root)
        extra = Path(profile_path)
    elif profile_path is not None:  # an already loaded Profile (e.g. `ddptui -- CMD`)
        source = LiveSource(profile_path, runs_root)
    app = DdpApp(source=source, picker_extra=extra, runs_root=runs_root)
    try:
        app.run()
    finally:
        app.shutdown()
    return app.run_code if app.run_code is not None else (app.return_code or 0)


def run_replay(run_dir: str | Path) -> int:
    """Reopen a finished run from its record in the same screens."""
    source = ReplaySource(Path(run_dir))
    app = DdpApp(source=source)
    try:
        app.run()
    finally:
        app.shutdown()
    return 1 if source.problems else 0  # as `ddptui replay --no-ui`: the record was incomplete or malformed


# -- benchmark: keypress → repaint latency under load ---------------------------------------------

async def _measure(ranks: int, rate: int, seconds: float, presses: int, size: tuple[int, int]) -> dict:
    import asyncio

    from textual import events as tev
    source = SyntheticSource(ranks=ranks, lines_per_s=rate, seconds=seconds + 30)
    app = DdpApp(source=source)
    lat: list[float] = []
    async with app.run_test(size=size) as pilot:
        await pilot.pause(1.0)  # let the load build up
        t_start = time.perf_counter()
        cpu0, gen0 = time.process_time(), source.thread_cpu
        lines0 = app.model.lines_seen
        for i in range(presses):
            screen = app.screen
            tabs = screen.query_one("#tabs")
            want = "ranks" if tabs.active == "timeline" else "timeline"
            done = asyncio.Event()
            t0 = time.perf_counter()
            app._driver.send_message(tev.Key("t", "t"))
            while tabs.active != want:
                await asyncio.sleep(0.0005)
            screen.call_after_refresh(done.set)
            await done.wait()
            lat.append(time.perf_counter() - t0)
            await asyncio.sleep(max(0.0, seconds / presses - lat[-1]))
        elapsed = time.perf_counter() - t_start
        ui_cpu = (time.process_time() - cpu0) - (source.thread_cpu - gen0)
        lines = app.model.lines_seen - lines0
        source.request_stop()
    app.shutdown(10)
    lat.sort()
    return {
        "ranks": ranks, "lines_per_s_per_rank": rate, "presses": presses,
        "p50_ms": round(lat[len(lat) // 2] * 1000, 1), "p95_ms": round(lat[int(len(lat) * 0.95) - 1] * 1000, 1),
        "max_ms": round(lat[-1] * 1000, 1),
        "lines_per_s_absorbed": round(lines / elapsed), "lines_per_s_offered": ranks * rate,
        "ui_cpu_percent": round(100 * ui_cpu / elapsed, 1),  # of one core, the load generator's thread left out
    }


def measure_latency(ranks: int = 16, rate: int = 1000, seconds: float = 6.0, presses: int = 30,
                    size: tuple[int, int] = (160, 50)) -> dict:
    """Keypress (t: toggle timeline) → next repaint, in ms, while ranks × rate log lines/s stream in."""
    import asyncio
    return asyncio.run(_measure(ranks, rate, seconds, presses, size))


if __name__ == "__main__":
    import json
    import sys
    args = [int(a) for a in sys.argv[1:3]]
    print(json.dumps(measure_latency(*args)))
