"""The run's Slurm job followed for the run loop: Slurm's answers handed to the judge, who cancelled the job, and at
teardown one scancel and a bounded wait for its end (never a signal to a process on a node)."""
from __future__ import annotations

import time
from collections.abc import Callable

from ..evidence import slurm_state
from ..judge.judge import Judge, TearDown
from .clock import now
from .slurm_job import GONE_DEADLINE, SlurmJobWatch


class SlurmFollow:
    """`carry_out`: the run loop's (emits the judge's outputs, returns the teardown they ask for); `say`: a line of
    ddptui's in the launcher's pane and log."""

    def __init__(self, watch: SlurmJobWatch, judge: Judge, carry_out: Callable[[list], TearDown | None],
                 say: Callable[[str], None]) -> None:
        self.watch, self.judge = watch, judge
        self._carry_out, self._say = carry_out, say
        self.waited = False  # teardown scancelled the job and waited for its end already
        self.end: TearDown | None = None  # what Slurm's answer about the job asked for (NODE_FAIL: a teardown)

    @property
    def job_id(self) -> str | None:
        return self.watch.job_id

    def poll(self) -> str | None:
        """Ask Slurm about the job and tell the judge; returns its state (None: not known)."""
        info = self.watch.poll()
        if info is None:
            return None
        nodes = self.watch.hostnames(info.nodelist)
        down = self.watch.down_nodes(nodes) if info.state in slurm_state.NODE_FAILED else ()
        self.end = self._carry_out(self.judge.job_info(info, nodes, down, now=now())) or self.end
        self.ask_canceller()
        return info.state

    def ask_canceller(self) -> None:
        """Slurm cancelled the job and ddptui did not: who asked, from what Slurm recorded (slurmctld's log)."""
        if self.judge.job.wants_canceller:
            requests, where = self.watch.kill_requests()
            self._carry_out(self.judge.job_canceller(requests, where, now=now()))

    def end_state(self, bound: float = 10.0) -> None:
        """How Slurm ended the job, for the summary: srun (its own job) has returned; it may still be COMPLETING."""
        end = time.monotonic() + bound
        while self.watch.job_id is not None and time.monotonic() < end:
            last = self.watch.last
            if last is not None and last.state in slurm_state.ENDED:
                return
            if self.poll() is None:
                return  # Slurm no longer knows it (or cannot be asked): what was said last stands
            time.sleep(0.3)

    def cancel(self, procs: list, hurry: Callable[[], bool]) -> None:
        """scancel the job (or step) unless it is over, then wait (bounded) until sbatch/srun (`procs`) exit and Slurm
        holds no process or node of it; `hurry`: stop waiting (asked again to stop)."""
        w = self.watch
        if self.waited:
            return  # one scancel and one bounded wait per run: `run`'s final sweep comes here again
        running = any(pr.returncode is None and pr.poll() is None for pr in procs)
        if not running and (w.job_id is None or w.gone()):
            return
        self.waited = True
        if self.judge.job.outside():  # Slurm is ending it already (someone's scancel): no scancel of ddptui's
            what = f"job {w.job_id}"
            self._say(f"ddptui: Slurm is ending {what} already (not ddptui's scancel): waiting for its end")
        else:
            self.judge.job_cancelling(now=now())
            what = w.cancel()
            self._say(f"ddptui: scancel {what}")
        t0 = time.monotonic()
        lost = set(self.judge.job.lost)
        left, held = [], None
        while not hurry():
            left = [pr.spec.name for pr in procs if pr.poll() is None]
            if not left:
                held = w.held_on()
                if held is not None and set(held) <= lost:
                    break
            if time.monotonic() - t0 >= GONE_DEADLINE:
                break
            time.sleep(0.2)
        waited = time.monotonic() - t0
        why_down = w.slurmd_timeout() if not left and held else None
        self._say(slurm_state.released_words(what, waited, left, held, lost, why_down)
                  + (f" ({w.error})" if w.error and (left or held is None) else ""))
        self.poll()
