"""What the Flight Recorder dumps NCCL's watchdog wrote itself at a timeout say, in the crash verdict: pure."""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from . import fr_analysis, fr_records

SOURCE = "Flight Recorder (NCCL's own dump at the timeout)"


def finding(dumps: Mapping[int, dict], world: int | None) -> fr_analysis.Finding | None:
    """The finding over the ranks' own dumps (normalised as the record's other dumps are); None without any."""
    if not dumps:
        return None
    return fr_analysis.analyse(fr_records.normalise_all(dict(dumps), world), world)


def words(f: fr_analysis.Finding | None, problems: Mapping[int, str] = {}) -> str:
    """"Flight Recorder (NCCL's own dump at the timeout): collective #57 (all_reduce ..., default group): ranks 0, 2, 3
    entered it, rank 1 never did (its last was #56)"; "" with neither a finding nor a problem."""
    said = []
    if f is not None:
        s = f.sentence()
        said.append(s[len("Flight Recorder: "):] if s.startswith("Flight Recorder: ") else s)
    said += [problems[r] for r in sorted(problems)]
    return f"{SOURCE}: " + "; ".join(said) if said else ""


def with_dumps(crash, dumps: Mapping[int, dict], problems: Mapping[int, str], world: int | None):
    """The crash verdict (events.CrashVerdict) naming the collective of NCCL's own dumps; unchanged without any."""
    if crash is None or not (dumps or problems):
        return crash
    f = finding(dumps, world)
    said = words(f, problems)
    return dataclasses.replace(crash, text=f"{crash.text}; {said}" if said else crash.text,
                               collective=f.to_dict() if f is not None else {})
