"""The dashboard under Textual's pilot: scripted event sources, waiting for what it draws, what the screen shows."""
from __future__ import annotations

import asyncio
import functools
import threading
import time

from tests.support.wait import Deadline

SIZE = (160, 50)


def aio(fn):
    """Run an async test body in a fresh event loop (no asyncio plugin in this venv)."""
    @functools.wraps(fn)
    def wrapper(*a, **kw):
        return asyncio.run(fn(*a, **kw))
    return wrapper


class ScriptSource:
    """Emits the given batches; with hold=True it then waits like a live run until request_stop()."""

    def __init__(self, batches, kind="replay", hold=False) -> None:
        self.batches, self.kind, self.hold = batches, kind, hold
        self.stopped = threading.Event()
        self.dumps = 0
        self.emit = None
        self.emitted = False  # every batch was posted

    def prepare(self, emit):
        self.emit = emit

    def run(self):
        for b in self.batches:
            self.emit(b)
        self.emitted = True
        if self.hold:
            self.stopped.wait(30)
            self.emit([])
        return 0

    def request_stop(self):
        self.stopped.set()

    def request_dump(self):
        self.dumps += 1
        return True

    def again(self):
        return ScriptSource(self.batches, self.kind, self.hold)


async def until(pilot, cond, limit: float = 10.0, what: str = "", step: float = 0.01, stop_if=None) -> None:
    """Wait until cond() holds (the app's state, polled as the app runs), then until the screens handled what they
    were told; fails after `limit` seconds, with what the screen shows, instead of guessing how long drawing takes."""
    deadline = Deadline(limit, what or repr(cond), seen=lambda: "the screen:\n" + screen_text(pilot.app),
                        stop_if=stop_if)
    while not (got := cond()):
        deadline.check(got)
        await pilot.pause(step)
    if pilot.app.is_running:  # (an app that left has nothing more to draw)
        await pilot.pause()  # the screen and its widgets processed every pending message, then the CPU went idle


async def settle(pilot, app, limit: float = 10.0) -> None:
    """The run's batches are folded and drawn: a script that ends, ended (its end handled by the UI); one that holds
    like a live run emitted everything it had."""
    held = getattr(app.source, "hold", False)
    await until(pilot, lambda: app.worker is not None and app.drawn and (
        (held and app.source.emitted) or not app.running), limit, "the run's events to be drawn")


async def steady(pilot, limit: float = 10.0) -> None:
    """The screen drew the same, text and styles, twice in a row: Textual's own work after the app's (a table's size
    taken on idle, a scroll after a refresh) is done before a snapshot is taken."""
    shots: list[list] = []

    def same_twice() -> bool:
        shots.append([list(strip) for strip in pilot.app.screen._compositor.render_strips()])
        return len(shots) > 1 and shots[-1] == shots[-2]

    await until(pilot, same_twice, limit, "the screen to stop changing", step=0.05)


def screen_text(app) -> str:
    """What the terminal shows now: the compositor's current strips, as the driver would write them."""
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


class GatedSource:
    """Emits one batch per stage; stage i > 0 waits until the test calls release(i), as a live run would."""

    kind = "live"

    def __init__(self, stages) -> None:
        self.stages = stages
        self.go = [threading.Event() for _ in stages]
        self.emit = None

    def prepare(self, emit):
        self.emit = emit

    def run(self):
        for i, stage in enumerate(self.stages):
            if i and not self.go[i].wait(30):
                return 1
            self.emit(stage(time.time()))
        return 0

    def release(self, i):
        self.go[i].set()

    def request_stop(self):
        for g in self.go:
            g.set()

    def request_dump(self):
        return False

    def again(self):
        return GatedSource(self.stages)


def long_line(rank: int, n: int) -> str:
    return f"r{rank}-line{n:04d} " + "loss 0.1234 grad 5.678 " * 12  # wider than any pane: cropped, never wrapped


def pane_run(ranks: int):
    """60 lines per rank, 10 more while the ranks tab shows, then the ranks exit and the run ends ok."""
    from ddptui.runners import events as ev

    def first(t):
        return ([ev.RunStarted("/tmp/panes", "panes", "torchrun", ranks, 70, t)]
                + [ev.RankState(r, "running", "", t) for r in range(ranks)]
                + [ev.LogLines(r, "out", t, 0.0, tuple(long_line(r, n) for n in range(60))) for r in range(ranks)]
                + [ev.Progress(r, 60, 0.5, t, "parsed") for r in range(ranks)])

    def more(t):
        return ([ev.LogLines(r, "out", t, 0.0, tuple(long_line(r, n) for n in range(60, 70))) for r in range(ranks)]
                + [ev.Progress(r, 70, 0.4, t, "parsed") for r in range(ranks)])

    def end(t):
        return ([ev.RankState(r, "exited", "exit 0", t) for r in range(ranks)]
                + [ev.ProcessExited(f"rank{r}", (r,), 0, None, t) for r in range(ranks)]
                + [ev.ReplicaVerdict("identical", f"all {ranks} ranks hold byte-identical weights (6 parameters)",
                                     None, (), (), {}, t),
                   ev.RunFinished("ok", 0, "", t)])
    return [first, more, end]


async def on_screen(pilot, app, found, limit: float = 5.0, what: str = "the screen to show it"):
    """found(screen text) once it is truthy (the test fails with the screen after `limit`): called once the app drew
    what it was told, it only gives Textual's own refresh (layout, compositor) its turns."""
    deadline = Deadline(limit, what, seen=lambda: "the screen:\n" + screen_text(app))
    while not (got := found(screen_text(app))):
        deadline.check(got)
        await pilot.pause(0.01)
    return got


BRAILLE = range(0x2800, 0x2900)


# -- on the run screen -------------------------------------------------------------------------------------------
def canvas_cells(lines: list[str]) -> list[str]:
    """What lies inside the plot's frame on each row (between the y axis and the right edge of the frame)."""
    top = next(i for i, ln in enumerate(lines) if "┌" in ln)
    bottom = next(i for i, ln in enumerate(lines) if "└" in ln)
    left, right = lines[top].index("┌"), lines[top].index("┐")
    return [ln[left + 1:right] for ln in lines[top + 1:bottom]]
