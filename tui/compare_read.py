"""The records `ddptui compare` puts side by side, read and reduced to their figures: one process a record when
several are large (a 100,000-step record is ~40 MB of events; reading one is a core's second)."""
from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from .compare_table import RunFigures, run_figures
from .record_tables import read_run

LARGE_BYTES = 16_000_000  # events.jsonl at least this big (~80,000 Progress events, ~0.35 s to read): worth a process of its
# own (a fork, and the figures pickled back: ~0.1 s of CPU)


def read_figures(path: str | Path) -> tuple[RunFigures, list[str]]:
    """One record's figures and what it lacked or could not be read (record_tables.NotARecord for no record)."""
    run = read_run(path)
    return run_figures(run), run.problems


def _size(path: str | Path) -> int:
    try:
        return (Path(path) / "events.jsonl").stat().st_size
    except OSError:
        return 0


def read_all(paths: list[str], large_bytes: int = LARGE_BYTES) -> list[tuple[RunFigures, list[str]]]:
    """Each record's read_figures, in order: in processes of their own (forked, at most one a core) when two or more
    records are large and the machine has two cores or more, else one after the other. NotARecord as read_run."""
    workers = min(sum(_size(p) >= large_bytes for p in paths), os.cpu_count() or 1)
    if workers < 2 or "fork" not in multiprocessing.get_all_start_methods():
        return [read_figures(p) for p in paths]
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        return list(pool.map(read_figures, paths))
