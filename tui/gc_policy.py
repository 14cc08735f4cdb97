"""When Python's garbage collector may run in the dashboard: never inside a paint, never over the long-lived screen."""
from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


def freeze_long_lived() -> None:
    """Collect what is garbage now (a previous run's screen, at most once per run start), then move every object
    still alive into the permanent generation (gc.freeze): a full collection under a 16-rank flood walked ~100,000
    of Textual's long-lived objects, 60-90 ms inside whichever frame it fell (the p95 of a key press), ~30 ms after;
    at 1,024 ranks (the compact view, its model) 86,000 objects, 50 ms, then nothing."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()


@contextmanager
def no_collection() -> Iterator[None]:
    """Hold automatic collections off while a frame is composed and written (as Textual's own PAUSE_GC_ON_SCROLL
    does during a scroll): a paint allocates thousands of strips and segments, which set off young collections, and
    now and then a full one, 10-30 ms inside the frame a key press waits for. What the paint allocated is counted
    all the same: the collection it is due runs right after the frame is out."""
    if not gc.isenabled():  # someone else holds it off (a nested paint, a scroll): theirs to enable again
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
