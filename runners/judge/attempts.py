"""A run's attempts, the one way its attempt timeline is built: the verdict each attempt ends with, fresh rank tracks
for the next, summary.json's `attempts`.

Two kinds of restart make attempts. torchrun's elastic agent (`--max-restarts N`) restarts every rank after a
failure: new pids, new rank files (`attempt_<n>/`), `TORCHELASTIC_RESTART_COUNT` in each rank, which its hello
reports as `attempt`. A failure with restarts left is not the run's end: it ends the attempt, with its own verdict
(the crash verdict's root cause, or the hang read from the stacks taken before the restart), and the first hello of
the next attempt begins it. Slurm's requeue runs the batch script again: the engine in the job (one per attempt)
begins attempt K (SLURM_RESTART_COUNT) of the same record, after the earlier attempts that the record's last summary
kept (`requeued`)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .. import events as ev
from ..evidence.hints import RESTART_STALE_STORE, STALE_STORE_NEEDLE
from ..evidence.launcher_log import TorchrunLog
from ..evidence.words import ranks_text
from .conclusion import Conclusion
from .ingest import Ingest
from .job_follow import JobFollow
from .rank_track import RankTrack
from .run_state import EndAttempt, RunState
from .watch import Watch


class Attempts:
    """The attempts of a run whose launcher may restart its ranks (RunnerTraits.max_restarts > 0); with none, a run is
    one attempt and nothing here says anything."""

    def __init__(self, state: RunState, end: Conclusion, watch: Watch, ingest: Ingest, job: JobFollow) -> None:
        self.s = state
        self.end = end
        self.watch = watch
        self.ingest = ingest
        self.job = job
        self.history: list[dict[str, Any]] = []  # the attempts that ended, as summary.json keeps them
        self.began = state.wall  # wall time the current attempt began
        self.why = ""  # why it began ("" for attempt 0)
        self.folders: list[str] = []  # stacks folders taken during the current attempt
        self.requeue = False  # the engine of one attempt of a requeued Slurm job (`requeued`)
        self.open = False  # the current attempt began and has not ended

    @property
    def restarts(self) -> bool:
        """The launcher may restart the ranks within this engine's run (torchrun's --max-restarts)."""
        return self.s.max_restarts > 0

    @property
    def follows(self) -> bool:
        return self.restarts or self.requeue

    @property
    def stacks_attempt(self) -> int | None:
        """The attempt that names the stacks folders taken now (stacks/NN-attemptK-why/), None for a run of one
        attempt (and a batch job's first, not requeued yet)."""
        return self.s.attempt if self.restarts or self.s.attempt else None

    def begin(self) -> None:
        """The run starts: attempt 0 begins (said only when the launcher may restart)."""
        self.began = self.s.wall
        if self.follows:
            self.open = True
            self.s.emit(ev.AttemptStarted(0, "", self.s.wall))

    def requeued(self, attempt: int, job_id: str | None, earlier: Sequence[Any]) -> None:
        """This engine runs attempt `attempt` of a ddptui batch job (each run of the batch script: one attempt; a later
        one was started again by Slurm's requeue); `earlier`: the attempts the record's last summary kept (an attempt
        whose engine was killed left none)."""
        s = self.s
        self.requeue, self.open = True, True
        s.attempt, self.began = attempt, s.wall
        self.why = f"Slurm requeued job {job_id}" if attempt else ""
        self.history = [dict(a) for a in earlier if isinstance(a, dict) and a.get("attempt") != attempt]
        s.emit(ev.AttemptStarted(attempt, self.why, s.wall))
        if attempt:
            s.say(f"ddptui: {self.why}: attempt {attempt} of this record")

    def stacks_taken(self, folder: str | None) -> None:
        if folder:
            self.folders.append(folder)

    # ---- a hang with restarts left -------------------------------------------------------------------
    def end_hung(self) -> bool:
        """on_stall: stop, the stacks taken: with restarts left, end this attempt's ranks (not their launcher) so that
        torchrun restarts them as the next attempt; True when it asked for that (else the run is torn down)."""
        s = self.s
        if not s.restart_expected or s.ending_attempt:
            return False
        pids = tuple(sorted({t.pid for t in s.tracks.values() if t.pid and t.alive}))
        if not pids:
            return False
        s.ending_attempt = True
        s.say(f"ddptui: on_stall=stop with {s.restarts_left} of {s.max_restarts} torchrun restart(s) left: stacks "
              f"taken, ending attempt {s.attempt}'s ranks so that torchrun restarts them")
        s.emit(EndAttempt(s.attempt, pids))
        return True

    # ---- the next attempt ----------------------------------------------------------------------------
    def hello(self, attempt: Any) -> None:
        """A rank's hello named its attempt: one past the current begins the next (the current one ends first)."""
        s = self.s
        if not self.restarts or not isinstance(attempt, int) or isinstance(attempt, bool) or attempt <= s.attempt:
            return
        ended = max((t.exit_wall for t in s.tracks.values() if t.exit_wall is not None), default=s.wall)
        self._ended(self.verdict(), min(ended, s.wall))
        restart = s.launcher_log.restart
        left = s.max_restarts - attempt
        if restart is not None:
            self.why = (f"torchrun restarted every rank after its worker group {restart.state.lower()} "
                        f"({left} of {s.max_restarts} restart(s) left)")
        else:
            self.why = f"torchrun restarted every rank ({left} of {s.max_restarts} restart(s) left)"
        self._fresh(attempt)
        s.emit(ev.AttemptStarted(attempt, self.why, s.wall))
        for t in s.tracks.values():
            s.set_status(t, ev.RankStatus.STARTING, f"attempt {attempt}")

    def verdict(self) -> dict[str, Any]:
        """How the current attempt ended, from what it left: a hang read from its stacks, else its crash verdict
        (the root cause with its evidence), else ok."""
        s = self.s
        out: dict[str, Any] = {"stacks": s.hang.path if s.hang is not None and s.hang.path else
                               (self.folders[-1] if self.folders else "")}
        if s.hang is not None or s.stall_info is not None:
            text = s.hang.text if s.hang is not None else str(s.stall_info.get("reason", "stalled"))  # type: ignore[union-attr]
            if s.ending_attempt:
                text += "; ddptui ended its ranks for torchrun to restart them (on_stall: stop)"
            return {**out, "status": "stalled", "verdict": text}
        crash = self.end.crash_verdict({}, {})
        if crash is not None:
            return {**out, "status": "failed", "verdict": crash.text,
                    "crash": crash.fields_json("root_rank", "victims", "exit", "excerpt")}
        failed = [t.rank for t in s.tracks.values() if t.status == ev.RankStatus.FAILED]
        if failed:
            return {**out, "status": "failed", "verdict": f"{ranks_text(failed)} failed"}
        return {**out, "status": "ok", "verdict": ""}

    def _ended(self, verdict: dict[str, Any], wall: float) -> None:
        s = self.s
        if s.attempt > 0 and verdict["status"] == "failed" and STALE_STORE_NEEDLE in verdict["verdict"]:
            s.raise_hint(RESTART_STALE_STORE.code, (verdict.get("crash") or {}).get("root_rank"), verdict["verdict"])
        entry = {"attempt": s.attempt, "began": self.began, "ended": wall, "why": self.why, **verdict}
        self.history = sorted(self.history + [entry], key=lambda a: a.get("attempt", 0))
        self.open = False
        s.emit(ev.AttemptEnded(s.attempt, verdict["status"], verdict["verdict"], wall, verdict["stacks"]))

    def _fresh(self, attempt: int) -> None:
        """The run state of a new attempt: fresh rank tracks, no verdict, no failure, a new launcher log."""
        s = self.s
        s.attempt = attempt
        s.tracks = {r: RankTrack(r, s.mono, last_progress=s.mono, steps_total=s.profile.steps) for r in s.tracks}
        s.crash = s.hang = s.replica = s.own_exit = None
        s.stall_info = s.slow_info = None
        s.first_failure = None
        s.first_digests = {}
        log, s.launcher_log = s.launcher_log, TorchrunLog()
        s.launcher_log.now = log.now
        self.began, self.folders, s.ending_attempt, self.open = s.wall, [], False, True
        self.watch.new_attempt()
        self.ingest.new_attempt()
        self.job.new_attempt()

    # ---- the run's end -------------------------------------------------------------------------------
    def conclude(self, status: str) -> None:
        """The run ended with `status` (also one that ended before its ranks started): its last attempt ends with the
        run's verdicts, once."""
        s = self.s
        if not self.open:
            return
        stacks = s.hang.path if s.hang is not None and s.hang.path else (self.folders[-1] if self.folders else "")
        text = s.crash.text if s.crash is not None else s.hang.text if s.hang is not None else \
            s.replica.text if s.replica is not None and s.replica.status == "differ" else ""
        verdict: dict[str, Any] = {"status": status, "verdict": text, "stacks": stacks}
        if s.crash is not None:
            verdict["crash"] = s.crash.fields_json("root_rank", "victims", "exit", "excerpt")
        self._ended(verdict, s.wall)

    def summary(self) -> dict[str, Any]:
        """summary.json's `attempts` (each attempt: began, ended, why, status, verdict, stacks) and `restarts`."""
        if not self.follows:
            return {}
        if not self.restarts:
            return {"attempts": self.history}
        return {"attempts": self.history, "restarts": self.s.attempt, "max_restarts": self.s.max_restarts}
