"""Ranks that ended with an exit status of the program's own (sys.exit(3) after its own check): said as its choice,
with its last words, never as a crash that failed first."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from .crash import RankEvidence, ended_by, last_output, own_exit_kinds
from .words import ranks_text


@dataclass(frozen=True)
class OwnExit:
    text: str
    ranks: tuple[int, ...]  # the ranks that chose their exit status
    codes: dict[int, int] = field(default_factory=dict)  # rank -> its exit status
    outcomes: dict[int, tuple[str, str]] = field(default_factory=dict)  # rank -> (status, words), as crash.Verdict's

    def to_dict(self) -> dict:
        return {"text": self.text, "ranks": list(self.ranks), "codes": dict(self.codes),
                "outcomes": {r: words for r, (_, words) in sorted(self.outcomes.items())}}


def _at(steps: set) -> str:
    known = sorted(s for s in steps if s is not None)
    if not known:
        return "before a first step"
    return f"at step {known[0]}" if len(known) == 1 else f"at steps {known[0]}-{known[-1]}"


def decide(ranks: list[RankEvidence], said: dict[int, str] | None = None) -> OwnExit | None:
    """The ranks' ends in words when no rank failed on its own but some chose a non-zero exit status
    (crash.own_exit_kinds); else None. said: rank -> the program's own verdict text, where it reported one (its last
    words, before its last line)."""
    kinds = own_exit_kinds(ranks)
    if kinds is None:
        return None
    said = said or {}
    own = sorted((e for e in ranks if kinds.get(e.rank) == "own"), key=lambda e: e.rank)
    parts, outcomes = [], {}
    for code in dict.fromkeys(e.returncode for e in own):  # in rank order
        group = [e for e in own if e.returncode == code]
        part = (f"{ranks_text([e.rank for e in group])} exited with status {code}, the program's own (no exception, no "
                f"signal: sys.exit or os._exit) {_at({e.step for e in group})}")
        words = next(((e.rank, said.get(e.rank) or last_output(e)) for e in group
                      if said.get(e.rank) or last_output(e)), None)
        if words is not None:
            part += f"; rank {words[0]}'s last words: {words[1][:160]!r}"
        parts.append(part)
        for e in group:
            outcomes[e.rank] = ("failed", f"exited {code}: its own exit status, no exception")
    first = min(own, key=lambda e: (e.died_at if e.died_at is not None else math.inf, e.rank))
    for who in ("launcher", "ddptui"):
        grp = sorted(e.rank for e in ranks if kinds.get(e.rank) == "stopped" and (e.stopped_by or "launcher") == who)
        if grp:
            how = ended_by(who, first.rank, f"exited {first.returncode}")
            parts.append(f"{ranks_text(grp)} {how}")
            outcomes.update({r: ("killed", how) for r in grp})
    never = sorted(r for r, k in kinds.items() if k == "never_started")
    if never:
        parts.append(f"{ranks_text(never)} never started")
        outcomes.update({r: ("killed", "never started") for r in never})
    codes = {e.rank: e.returncode for e in own if e.returncode is not None}  # every one (chose_exit needs a status)
    return OwnExit("; ".join(parts), tuple(e.rank for e in own), codes, outcomes)
