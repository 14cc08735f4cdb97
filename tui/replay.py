"""A finished run's record fed to a front end (the console or the dashboard): one reading of it, headless."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from ..runners import events as ev
from ..runners.edge.record import replay_events


class Replay:
    """One pass over a record: its events in time order, `chunk` at a time, up to `until` seconds after the run
    started. `problems` says what the record lacked or could not be read (runners.edge.record.replay_events)."""

    def __init__(self, run_dir: Path, until: float | None = None, chunk: int = 500) -> None:
        self.run_dir, self.until, self.chunk = Path(run_dir), until, chunk
        self.problems: list[str] = []
        self.finished: ev.RunFinished | None = None  # the record's end, once read

    def batches(self, stop: threading.Event | None = None, say_problems: bool = False) -> Iterator[list]:
        """The record's events in batches. With `say_problems`, a record read to its end with problems ends in a
        launcher line that says them, and one that never finished in an "incomplete" RunFinished (a dashboard must
        not show it live)."""
        batch: list = []
        start = last = None
        for e in replay_events(self.run_dir, self.problems):
            if stop is not None and stop.is_set():
                break
            if isinstance(e, ev.RunStarted):
                start = e.wall
            if self.until is not None and start is not None and e.wall - start > self.until:  # type: ignore[attr-defined]
                break
            if isinstance(e, ev.RunFinished):
                self.finished = e
            last = getattr(e, "wall", last)
            batch.append(e)
            if len(batch) >= self.chunk:
                yield batch
                batch = []
        else:
            if say_problems and self.problems:
                wall = last if last is not None else time.time()
                batch.append(ev.LogLines(None, "err", wall, 0.0,
                                         ("ddptui: replay: " + "; ".join(self.problems) + "; replayed what is there",)))
                if self.finished is None:
                    batch.append(ev.RunFinished("incomplete", 1, "", wall, {}))
        if batch:
            yield batch


class ReplaySource:
    """The dashboard's source for a record (`ddptui replay RUN_DIR`): its events through the same path as a live
    run's; ``until`` cuts it N seconds after the start."""

    kind = "replay"

    def __init__(self, run_dir: Path, until: float | None = None, chunk: int = 500) -> None:
        self.run_dir, self.until, self.chunk = Path(run_dir), until, chunk
        self._stop = threading.Event()
        self.emit: Callable[[list], None] = lambda batch: None
        self.problems: list[str] = []  # what the record lacks or could not be read
        self.events: list = []  # every event emitted, in order: what a replay's stepping keys fold (tui/rewind.py)

    def prepare(self, emit) -> None:
        self.emit = emit

    def run(self) -> int:
        replay = Replay(self.run_dir, self.until, self.chunk)
        self.problems = replay.problems
        for batch in replay.batches(self._stop, say_problems=True):
            self.events.extend(batch)
            self.emit(batch)
        return replay.finished.exit_code if replay.finished is not None else 0

    def request_stop(self) -> None:
        self._stop.set()

    def request_dump(self) -> bool:
        return False

    def again(self) -> ReplaySource:
        return ReplaySource(self.run_dir, self.until, self.chunk)
