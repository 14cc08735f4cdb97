"""A synthetic engine for the dashboard's benchmarks and tests: real events at a chosen load, with no ranks behind them."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable

from ..runners import events as ev


class SyntheticSource:
    """Load generator for the latency benchmark: N ranks × R lines/s as real events, batched every period; with
    `collectives`, each rank's Flight Recorder numbers as the engine sends them (every rank every 2 s, a quarter of
    the ranks each 0.5 s, and rank 1 falling behind now and then)."""

    kind = "synthetic"

    def __init__(self, ranks: int = 16, lines_per_s: int = 1000, seconds: float = 10.0, period: float = 0.02,
                 steps: int = 10_000, collectives: bool = True) -> None:
        self.ranks, self.rate, self.seconds, self.period, self.steps = ranks, lines_per_s, seconds, period, steps
        self.collectives = collectives
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
        last_progress = last_res = last_coll = last = t0
        quarter = 0
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
            if lines:  # at a few lines/s per rank most periods bring none
                batch += [ev.LogLines(r, "out", now, mono, lines) for r in range(self.ranks)]
            k += n
            self.lines_sent += n * self.ranks
            if now - last_progress >= 0.1:
                step += 1
                last_progress = now
                # as the engine's (runners/judge/ingest.py): the step's loss point, samples and step time
                batch += [ev.Progress(r, step, loss, now, "hook", ((step, loss),), 64, 0.1)
                          for r in range(self.ranks) for loss in (2.0 / (1 + step * 0.01) + r * 0.001,)]
            if now - last_res >= 1.0:
                last_res = now
                batch.append(ev.Resources({r: 99.0 for r in range(self.ranks)}, {r: 300 << 20 for r in range(self.ranks)}, now))
            if self.collectives and now - last_coll >= 0.5:
                last_coll, quarter = now, quarter + 1
                batch.append(self._collectives(quarter, now))
            self.emit(batch)
            self.thread_cpu = time.thread_time()
        self.emit([ev.RunFinished("stopped" if self._stop.is_set() else "ok", 0, "", time.time())])
        return 0

    def _collectives(self, quarter: int, now: float) -> ev.CollectiveProgress:
        seq = 10 * quarter
        stuck = quarter % 8 >= 4  # for 2 s of every 4 s the others wait in #seq for rank 1
        members = list(range(self.ranks))
        by_rank = {}
        for r in range(quarter % 4, self.ranks, 4):
            behind = stuck and r == 1
            fr = None
            if stuck and not behind:
                fr = {"seq": seq, "op": "all_reduce", "sizes": [[1024]], "dtypes": ["Float"]}
            by_rank[r] = {"0": {"desc": "default_pg", "ranks": members, "enqueued": seq - 1 if behind else seq,
                                "completed": seq - 1, "frontier": fr}}
        return ev.CollectiveProgress(by_rank, (1,) if stuck and self.ranks > 1 else (), now)

    def request_stop(self) -> None:
        self._stop.set()

    def request_dump(self) -> bool:
        return False

    def again(self) -> SyntheticSource:
        return SyntheticSource(self.ranks, self.rate, self.seconds, self.period, self.steps, self.collectives)
