"""Where each rank is in its collectives (Flight Recorder's per-group numbers, as the ranks push them): the grid's rows
and who lags behind. Pure: the engine decides with it, the dashboard draws with it (no torch, no I/O)."""
from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

# rank -> {pg name: {"desc", "ranks", "enqueued", "completed", "frontier"}} (events.CollectiveProgress.by_rank)
ByRank = dict[int, dict[str, dict[str, Any]]]


def _int(v, default: int = -1) -> int:
    """Flight Recorder writes its numbers as strings ('3', '-1'); a report may carry ints."""
    if isinstance(v, bool):
        return default
    if isinstance(v, int):
        return v
    try:
        return int(str(v).strip())
    except (TypeError, ValueError):
        return default


def _ranks(v) -> tuple[int, ...]:
    """A group's members: a list, or pg_config's string form '[0, 1]'."""
    if isinstance(v, str):
        try:
            v = ast.literal_eval(v.strip() or "[]")
        except (ValueError, SyntaxError):
            return ()
    if not isinstance(v, (list, tuple)):
        return ()
    return tuple(sorted({r for r in v if isinstance(r, int) and not isinstance(r, bool)}))


def _frontier(v) -> dict | None:
    if not isinstance(v, dict):
        return None
    seq = _int(v.get("seq"))
    if seq < 0:
        return None
    sizes, dtypes = v.get("sizes"), v.get("dtypes")
    return {"seq": seq, "op": str(v.get("op") or "?"), "sizes": sizes if isinstance(sizes, list) else [],
            "dtypes": dtypes if isinstance(dtypes, list) else []}


def entry(raw) -> dict | None:
    """One group's numbers from a rank's report, normalised (ints, members as a list); None if it is not a mapping."""
    if not isinstance(raw, dict):
        return None
    return {"desc": str(raw.get("desc") or ""), "ranks": list(_ranks(raw.get("ranks"))),
            "enqueued": _int(raw.get("enqueued")), "completed": _int(raw.get("completed")),
            "frontier": _frontier(raw.get("frontier"))}


def merge(current: dict[str, dict], pgs) -> bool:
    """Fold a rank's report (only the groups that changed) into its groups; True if anything changed. Entries are
    replaced, never mutated, so an event holding the previous ones stays as it was sent."""
    if not isinstance(pgs, dict):
        return False
    changed = False
    for name, raw in pgs.items():
        e = entry(raw)
        if e is not None and current.get(str(name)) != e:
            current[str(name)] = e
            changed = True
    return changed


def waits_at(by_rank: ByRank) -> dict[str, int]:
    """Per group, the collective its waiting members wait in: the highest frontier seq of a member whose collective
    stays pending (the rank reports a frontier only for a collective pending across two of its looks, 2 s apart)."""
    out: dict[str, int] = {}
    for groups in by_rank.values():
        for pg, e in groups.items():
            fr = e.get("frontier")
            if fr is not None and e.get("enqueued", -1) > e.get("completed", -1):
                out[pg] = max(out.get(pg, -1), fr["seq"])
    return out


def lagging(by_rank: ByRank) -> dict[str, set[int]]:
    """Per group, the members behind it: some member has waited in collective #S for 2 s or more and these have not
    enqueued #S (a member that never reported the group has enqueued nothing in it). Numbers that differ only
    because each rank looks at its own moment (a healthy run) name nobody: only a collective that stays pending does.
    """
    out: dict[str, set[int]] = {}
    for pg, seq in waits_at(by_rank).items():
        members: set[int] = set()  # as the group's members list says; only when none does, whoever reports the group
        for groups in by_rank.values():
            e = groups.get(pg)
            if e is not None:
                members.update(e.get("ranks") or ())
        if not members:
            members = {r for r, groups in by_rank.items() if pg in groups}
        behind = set()
        for r in members:
            e = by_rank.get(r, {}).get(pg)
            if r in by_rank and (e is None or e.get("enqueued", -1) < seq):
                behind.add(r)
        if behind:
            out[pg] = behind
    return out


def laggards(by_rank: ByRank) -> tuple[int, ...]:
    """Ranks behind the others in any group they share (lagging)."""
    return tuple(sorted({r for rs in lagging(by_rank).values() for r in rs}))


def conflict(by_rank: ByRank) -> bool:
    """Two members of a group report their frontier at the same collective with a different call (op, sizes or dtypes):
    a mismatch, whatever the moment each rank looked at (a sequence number names one collective in a group)."""
    seen: dict[tuple[str, int], tuple] = {}
    for groups in by_rank.values():
        for pg, e in groups.items():
            fr = e.get("frontier")
            if fr is None or e.get("enqueued", -1) <= e.get("completed", -1):
                continue
            call = (fr.get("op"), repr(fr.get("sizes")), repr(fr.get("dtypes")))
            if seen.setdefault((pg, fr["seq"]), call) != call:
                return True
    return False


def group_label(name: str, e: dict) -> str:
    """How a group is named in the grid: its description (torch's group_desc; new_group's default "undefined" is none),
    else "group NAME" (the default group's: default_pg), with its member count."""
    desc = e.get("desc")
    label = desc if desc and desc != "undefined" else "default_pg" if name == "0" else f"group {name}"
    n = len(e.get("ranks") or ())
    return f"{label} ({n} ranks)" if n else label


def _shape(s) -> str:
    if isinstance(s, list) and all(isinstance(x, int) for x in s):
        return "[" + ", ".join(map(str, s)) + "]"
    if isinstance(s, list):
        return " ".join(_shape(x) for x in s) or "[]"
    return str(s)


def frontier_text(fr: dict | None) -> str:
    """'#57 all_reduce [1024] Float': the collective pending at the frontier, as Flight Recorder names it."""
    if not fr:
        return ""
    parts = [f"#{fr['seq']}", fr.get("op") or "?"]
    if fr.get("sizes"):
        parts.append(_shape(fr["sizes"]))
    if fr.get("dtypes"):
        parts.append(",".join(str(d) for d in fr["dtypes"]))
    return " ".join(parts)


@dataclass(frozen=True)
class Row:
    """One (rank, group) row of the Collectives view."""

    rank: int
    pg: str
    group: str
    enqueued: int
    completed: int
    pending: str  # the frontier collective when the rank waits in one, else ""
    # "mismatch" (pending in a call the group's other members do not make at that collective), "behind" (a laggard in
    # this group, or a rank the finding names missing), "waiting" (in a collective others have not entered), "ok"
    state: str
    behind_of: int | None = None  # the collective the others wait in, on a laggard's row


def rows(by_rank: ByRank, laggard_ranks=None, finding: dict | None = None) -> list[Row]:
    """Every (rank, group) row, by rank then group name. `laggard_ranks`: the engine's decision (the event's
    laggards); this group's rows of such a rank are marked behind (every row of it when no group says where).
    `finding`: the engine's Flight Recorder finding (fr_analysis.Finding.to_dict(): the hang verdict's, or the live
    mismatch): in its group, the sides of a mismatch are marked mismatch, the ranks it names missing behind."""
    lag = lagging(by_rank)
    waits = waits_at(by_rank)
    named = set(laggard_ranks) if laggard_ranks is not None else {r for rs in lag.values() for r in rs}
    f = finding or {}
    sides = {int(r) for r in f.get("sides") or {}} if str(f.get("kind", "")).endswith("mismatch") else set()
    missing = {int(r) for r in f.get("missing") or ()} if f.get("kind") == "missing" else set()
    out = []
    for r in sorted(by_rank):
        groups = by_rank[r]
        anywhere = any(r in rs for rs in lag.values())
        for pg in sorted(groups, key=lambda k: (len(k), k)):
            e = groups[pg]
            here = pg == str(f.get("pg"))
            behind = (r in named and (r in lag.get(pg, ()) or not anywhere)) or (here and r in missing)
            fr = e.get("frontier") if e.get("enqueued", -1) > e.get("completed", -1) else None
            state = ("mismatch" if here and r in sides else "behind" if behind else "waiting" if fr is not None
                     else "ok")
            of = (f.get("seq") if here and r in missing else waits.get(pg)) if behind else None
            out.append(Row(r, pg, group_label(pg, e), e.get("enqueued", -1), e.get("completed", -1),
                           frontier_text(fr), state, of))
    return out
