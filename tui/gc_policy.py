"""When Python's garbage collector may run in the dashboard: between frames on a timer of its own, never over the long-lived screen."""
from __future__ import annotations

import gc
import time

COLLECT_PERIOD = 0.1  # s between the dashboard's looks at what the collector is owed (DdpApp's timer)
YOUNG_PER_MIDDLE = 100  # young collections per middle one (Python's default: 10)
KEY_FRAME = 0.15  # s after a key during which a collection owed waits: the key's repaint comes first
MAX_WAITS = 5  # looks in a row a collection owed may wait (keys held down): then it is made all the same


def freeze_long_lived() -> None:
    """Collect what is garbage now (a previous run's screen, at most once per run start), then move every object
    still alive into the permanent generation (gc.freeze): a full collection under a 16-rank flood walked ~100,000
    of Textual's long-lived objects, 60-90 ms inside whichever frame it fell (the p95 of a key press), ~30 ms after;
    at 1,024 ranks (the compact view, its model) 86,000 objects, 50 ms, then nothing."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()


class BetweenFrames:
    """Python's automatic collections held off while the dashboard runs; the collections they would have made are
    made by `due()`, which the app calls from a timer of its own, between the handling of keys and paints.

    Left automatic, collections fell inside the key presses they were set off by (16 ranks x 10 lines/s: a young
    one in about every press, and every tenth of them a middle one, 12-40 ms: it walked ~50,000 objects, 26,000 of
    them the caches of the strips the panes keep until their next repaint, alive until then and freed by their
    reference counts, never by the collector). Here the young collection is made when Python's threshold says,
    at most every COLLECT_PERIOD, between frames; a middle one every YOUNG_PER_MIDDLE young ones, not every
    tenth, since what survives a young collection in the dashboard is the frame's strips (no cycles) and the
    model's lines; full ones every gc.get_threshold()[2] middle ones, as Python does. Garbage cycles of a paint
    live at most a COLLECT_PERIOD longer than with automatic collections."""

    def __init__(self) -> None:
        self.holding = False  # automatic collections are off because of us (and we turn them on again)
        self.made = [0, 0, 0]  # collections made per generation (tests, the bench)
        self.quiet_until = 0.0  # time.monotonic() before which a collection owed waits (a key's frame)
        self.waited = 0  # looks in a row at which a collection owed waited

    def key_pressed(self, now: float | None = None) -> None:
        """A key came: its repaint is 30-100 ms of work; a collection (2-15 ms) made inside it delays it."""
        self.quiet_until = (time.monotonic() if now is None else now) + KEY_FRAME

    def hold(self) -> None:
        """Turn automatic collections off; a pause someone else made (gc.disable before us) is left theirs."""
        if gc.isenabled():
            gc.disable()
            self.holding = True

    def release(self) -> None:
        if self.holding:
            self.holding = False
            gc.enable()

    def due(self, now: float | None = None) -> int | None:
        """Make the collection that is due now, if any; its generation, else None. Within KEY_FRAME of a key it
        waits for a later look, at most MAX_WAITS looks in a row."""
        if not self.holding:
            return None
        t0, t1, t2 = gc.get_threshold()
        gen = owed_generation(gc.get_count(), (t0, max(t1, YOUNG_PER_MIDDLE), t2))
        if gen is not None and self.waited < MAX_WAITS \
                and (time.monotonic() if now is None else now) < self.quiet_until:
            self.waited += 1
            return None
        self.waited = 0
        if gen is not None:
            gc.collect(gen)
            self.made[gen] += 1
        return gen


def owed_generation(count: tuple[int, int, int], threshold: tuple[int, int, int]) -> int | None:
    """The generation a collection at these counts collects: the oldest whose count passed its threshold (as
    CPython's collect_generations picks it), or None while the youngest has not passed its own."""
    if threshold[0] <= 0 or count[0] <= threshold[0]:
        return None  # a threshold of 0: automatic collection turned off by the user (gc.set_threshold(0))
    for gen in (2, 1):
        if count[gen] > threshold[gen]:
            return gen
    return 0
