"""A requeued Slurm job's attempts, as the engine in the job tells them: each run of the batch script is one attempt
of one record (attempt K from SLURM_RESTART_COUNT); what summary.json's `attempts` holds after each of them."""
from __future__ import annotations

from collections.abc import Sequence

from .. import events as ev


def started(attempt: int, job_id: str | None, wall: float) -> ev.AttemptStarted:
    """Attempt 0 has no why; a later one was started again by Slurm's requeue."""
    return ev.AttemptStarted(attempt, f"Slurm requeued job {job_id}" if attempt else "", wall)


def verdict_of(summary: dict) -> str:
    """The one line an attempt ended on: the hang's or the crash's verdict, the replicas', else its status."""
    for key in ("hang", "crash", "replica"):
        part = summary.get(key) or {}
        if part.get("text") and (key != "replica" or part.get("status") not in (None, "identical")):
            return str(part["text"])
    return "trained to the end" if summary.get("status") == "ok" else str(summary.get("status", ""))


def ended(attempt: int, summary: dict, wall: float) -> ev.AttemptEnded:
    stacks = summary.get("stacks") or []
    return ev.AttemptEnded(attempt, str(summary.get("status", "")), verdict_of(summary), wall,
                           str(stacks[-1]) if stacks else "")


def timeline(earlier: Sequence[dict], start: ev.AttemptStarted, end: ev.AttemptEnded) -> list[dict]:
    """summary.json's `attempts`: the earlier attempts as the record's last summary kept them (an attempt that left
    no summary, its engine killed, is not there), then this one; one entry per attempt number."""
    this = {"attempt": start.attempt, "why": start.why, "began": start.wall, "ended": end.wall,
            "status": end.status, "verdict": end.verdict, "stacks": end.stacks}
    kept = [dict(a) for a in earlier if isinstance(a, dict) and a.get("attempt") != start.attempt]
    return sorted(kept + [this], key=lambda a: a.get("attempt", 0))
