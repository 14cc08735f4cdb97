"""Which collective hangs and which rank is missing or disagrees, read from every rank's Flight Recorder: pure."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from . import fr_records
from .words import ranks_text, unseen_words

KINDS = ("op mismatch", "size mismatch", "dtype mismatch", "missing", "stuck", "none")
_DTYPES = {"Float": "float32", "Double": "float64", "Half": "float16", "BFloat16": "bfloat16", "Int": "int32",
           "Long": "int64", "Short": "int16", "Char": "int8", "Byte": "uint8", "Bool": "bool",
           "ComplexFloat": "complex64", "ComplexDouble": "complex128"}


@dataclass(frozen=True)
class Call:
    """One collective as one rank recorded it."""
    op: str
    sizes: tuple
    dtypes: tuple

    def shape_text(self) -> str:
        """"[1024]" for one tensor, "[16, 8], [16]" for several, "" for none (a barrier)."""
        return ", ".join("[" + ", ".join(str(x) for x in s) + "]" for s in self.sizes)

    def text(self) -> str:
        """"all_reduce [1024]" / "barrier"."""
        return f"{self.op} {self.shape_text()}".strip()

    def to_dict(self) -> dict[str, Any]:
        return {"op": self.op, "sizes": [list(s) for s in self.sizes], "dtypes": list(self.dtypes)}


@dataclass
class Group:
    """One process group over every rank's dump."""
    name: str
    desc: str
    members: tuple[int, ...]
    enqueued: dict[int, int] = field(default_factory=dict)  # rank -> last enqueued seq (ranks with a dump)
    completed: dict[int, int] = field(default_factory=dict)
    calls: dict[int, dict[int, Call]] = field(default_factory=dict)  # rank -> seq -> its call
    late: bool = False  # its backend notes completions late (gloo: a member may wait in the next collective already)

    def label(self) -> str:
        """"default group" / "group 1 (ranks 0, 1)" / "group 3 'pair01' (ranks 2, 3)"."""
        if self.desc == "default_pg" or self.name == "0":
            return "default group"
        desc = f" '{self.desc}'" if self.desc and self.desc not in ("undefined", "default_pg") else ""
        return f"group {self.name}{desc} ({ranks_text(self.members)})"


@dataclass(frozen=True)
class Finding:
    """What Flight Recorder says about the collectives at a hang: HangVerdict.collective is `to_dict()`."""
    kind: str  # one of KINDS
    pg: str = ""
    group: str = ""  # the group in words (Group.label)
    members: tuple[int, ...] = ()
    seq: int | None = None
    call: Call | None = None  # the collective at seq, as the ranks that entered it recorded it (the first of them)
    entered: tuple[int, ...] = ()
    missing: tuple[int, ...] = ()  # members with a dump whose last enqueued collective is before seq
    last: dict[int, int] = field(default_factory=dict)  # missing rank -> its last enqueued seq in the group
    absent: tuple[int, ...] = ()  # members with no dump
    sides: dict[int, Call] = field(default_factory=dict)  # a mismatch: rank -> what it called at seq
    outside: tuple[int, ...] = ()  # ranks not in the group (a subgroup's hang does not involve them)
    elsewhere: dict[int, str] = field(default_factory=dict)  # missing rank -> the collective it waits in instead
    completed: bool = False  # a mismatch every rank went through (no hang there; a silent wrong result)
    unseen: tuple[int, ...] = ()  # ranks of the world this ddptui does not watch (other nodes'): no dump is no news

    @property
    def culprits(self) -> tuple[int, ...]:
        """The ranks the finding blames: the missing ones; in a mismatch the ranks on the minority side."""
        if self.kind == "missing":
            return tuple(sorted(set(self.missing) | set(self.absent)))
        if self.kind.endswith("mismatch"):
            return _minority(self.sides)
        return ()

    @property
    def waiting(self) -> tuple[int, ...]:
        """The ranks that wait for the culprits inside the collective."""
        return tuple(r for r in self.entered if r not in self.culprits)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["call"] = self.call.to_dict() if self.call else None
        d["sides"] = {r: c.to_dict() for r, c in self.sides.items()}
        d["culprits"] = list(self.culprits)
        d["waiting"] = list(self.waiting)
        d["op"] = self.call.op if self.call else None
        for k in ("members", "entered", "missing", "absent", "outside", "unseen"):
            d[k] = list(d[k])
        d["sentence"] = self.sentence()
        return d

    def sentence(self, wheres: Mapping[int, str] | None = None, ats: Mapping[int, str] | None = None) -> str:
        """The finding in words; `wheres`: rank -> where its stack is ("is stuck in load_batch() at data.py:88"),
        for the culprits' own frames at the end; `ats`: rank -> the line a rank that entered the collective waits at
        ("train.py:23"), from its stack."""
        wheres = wheres or {}
        ats = {r: a for r, a in (ats or {}).items() if a and a != "?"}
        if self.kind == "none":
            return "Flight Recorder: every collective of every rank completed"
        c = self.call
        if self.kind == "op mismatch":
            text = f"ranks disagree at collective #{self.seq} in the {self.group}: " + _sides_text(
                self.sides, lambda k: k.text(), first_verb="called") + " (a rank-conditional collective)"
        elif self.kind == "size mismatch":
            assert c is not None  # a mismatch is read from the calls known, this one among them
            text = (f"size mismatch at #{self.seq} ({self.group}): {c.op} "
                    + _sides_text(self.sides, lambda k: k.shape_text() or "no tensor", on=True))
        elif self.kind == "dtype mismatch":
            assert c is not None  # a mismatch is read from the calls known, this one among them
            text = (f"dtype mismatch at #{self.seq} ({self.group}): {c.op} "
                    + _sides_text(self.sides, lambda k: "/".join(_dtype(t) for t in k.dtypes) or "no tensor", on=True))
        elif self.kind == "missing":
            text = f"collective #{self.seq} ({_describe(c)}, {self.group}): "
            text += f"{ranks_text(self.entered)} entered it" if self.entered else "no rank entered it"
            places = {ats.get(r) for r in self.entered}
            if self.entered and len(places) == 1 and None not in places:
                text += f" at {places.pop()}"
            if self.missing:
                text += ", " + "; ".join(
                    f"{ranks_text(rs)} never did ({_last_text(self.last, rs)})" for rs in _by_last(self.missing, self.last))
            away = [r for r in self.absent if r in self.unseen]
            if away:
                text += (f"; {unseen_words(away)} (no Flight Recorder dump from {'it' if len(away) == 1 else 'them'}"
                         "): the rank holding it up may be there")
            if len(away) < len(self.absent):
                text += f"; no Flight Recorder dump from {ranks_text([r for r in self.absent if r not in away])}"
        else:  # stuck
            text = (f"collective #{self.seq} ({_describe(c)}, {self.group}): every member entered it and none "
                    f"completed it (a peer lost inside it, or its transport stuck)")
        if self.completed:
            text += "; every rank went through it: its result is wrong, no hang there"
        for r in sorted(self.elsewhere):
            text += f"; rank {r} waits in {self.elsewhere[r]} instead"
        if self.outside and self.kind != "none":
            text += f"; {ranks_text(self.outside)} {'is' if len(self.outside) == 1 else 'are'} not in this group"
        for r in self.culprits or self.entered:
            if wheres.get(r):
                text += f"; rank {r} {wheres[r]}"
        return text


def analyse(dumps: Mapping[int, dict], world: int | None = None,
            known: Mapping[str, list[int]] | None = None, unseen: tuple[int, ...] = ()) -> Finding | None:
    """The finding over every rank's dump (rank -> dump as fr_trace_json gives it, raw or normalised by
    fr_records.normalise); None without any dump. `world`: the run's world size (ranks without a dump are then named);
    `known`: group name -> ranks as the ranks reported them; `unseen`: ranks this ddptui does not watch (other
    nodes'), whose missing dump the finding says is theirs to give."""
    if not dumps:
        return None
    groups = _groups(_normalised(dumps, world, known))
    return _replace(decide(groups, set(dumps), world), unseen=tuple(unseen))


def from_collectives(collectives: Mapping[int, Mapping[str, Mapping[str, Any]]],
                     world: int | None = None, unseen: tuple[int, ...] = ()) -> Finding | None:
    """The finding from the ranks' live `coll` reports (rank -> RankTrack.collectives: pg -> {"desc", "ranks",
    "enqueued", "completed", "frontier"}), for when no dump could be taken; None without any."""
    collectives = {r: g for r, g in collectives.items() if g}
    if not collectives:
        return None
    groups: dict[str, Group] = {}
    for rank, pgs in collectives.items():
        for name, g in pgs.items():
            members = fr_records.ranks_of(g.get("ranks")) or []
            grp = groups.setdefault(str(name), Group(str(name), str(g.get("desc") or ""), tuple(members)))
            if not grp.members and members:
                grp.members = tuple(members)
            grp.enqueued[rank] = _int(g.get("enqueued"))
            grp.completed[rank] = _int(g.get("completed"))
            f = g.get("frontier")
            if isinstance(f, dict) and f.get("seq") is not None:
                grp.late = grp.late or f.get("backend") == "gloo"
                grp.calls.setdefault(rank, {})[_int(f["seq"])] = Call(
                    _op(str(f.get("op") or "?")), _sizes(f.get("sizes")), tuple(str(x) for x in f.get("dtypes") or ()))
    for group in groups.values():
        if not group.members:
            group.members = tuple(sorted(group.enqueued))
    return _replace(decide(groups, set(collectives), world), unseen=tuple(unseen))


# ---- the decision ----------------------------------------------------------------------------------------------
def decide(groups: Mapping[str, Group], dumped: set[int], world: int | None = None) -> Finding:
    """The one finding that explains the hang over every group, else a mismatch every rank went through, else none."""
    everyone = set(range(world)) if world else set(dumped)
    for g in groups.values():
        everyone |= set(g.members)
    pending = {name: f for name, g in groups.items() if (f := _pending(g, dumped)) is not None}
    if pending:
        waits: dict[int, list[Finding]] = {}  # rank -> the collective it waits in, per group
        for f in pending.values():
            for r in f.entered:
                waits.setdefault(r, []).append(f)
        best = min(pending.values(), key=lambda f: _rank_of(f, waits))
        elsewhere = {r: _waits_text(o) for r in best.missing for o in waits.get(r, ()) if o.pg != best.pg}
        outside = tuple(sorted(everyone - set(best.members)))
        return _replace(best, elsewhere=elsewhere, outside=outside)
    for g in sorted(groups.values(), key=lambda g: len(g.members)):
        m = _history_mismatch(g)
        if m is not None:
            return m
    return Finding("none")


def _pending(g: Group, dumped: set[int]) -> Finding | None:
    """The group's frontier, when a collective there is unfinished: who entered it, who never did, who disagrees."""
    # a member with a dump that records nothing of the group never entered its first collective (seqs start at 1;
    # -1: nothing completed yet)
    enq = {r: g.enqueued.get(r, 0) for r in g.members if r in g.enqueued or r in dumped}
    comp = {r: max(g.completed.get(r, 0), 0) for r in enq}
    unfinished = [comp[r] + 1 for r in enq if enq[r] > comp[r]]
    if not unfinished:
        return None
    seq = min(unfinished)
    members = list(enq)
    done = [r for r in members if comp[r] >= seq]
    if done and not [r for r in members if enq[r] < seq]:
        # a member finished it, every other one is in it: gloo notes completion late (also well before its frontier:
        # measured, rank 0 completed 15 of its 20 while rank 1 had completed 19), not a hang there; the frontier is
        # then after the highest completion, if any member went past it
        seq = max(comp.values()) + 1
        if not [r for r in members if enq[r] >= seq]:
            return None
        done = []
    elif g.late and not done and min(enq.values()) >= seq and len(set(enq.values())) > 1:
        # gloo, every member in it and none noted done, while a member went on to the next: gloo completes what
        # every member entered and notes it late (seen at a hang: rank 0 waiting in #16, both "in" #15); the
        # collective that holds them is where the members part, the first one a member never entered
        seq = min(enq.values()) + 1
    entered = [r for r in members if enq[r] >= seq and comp[r] < seq]
    missing = [r for r in members if enq[r] < seq]
    absent = tuple(r for r in g.members if r not in enq) if not done else ()
    calls = {r: g.calls.get(r, {}).get(seq) for r in entered}
    known = {r: c for r, c in calls.items() if c is not None}
    call = known[min(known)] if known else None
    base: dict[str, Any]
    base = dict(pg=g.name, group=g.label(), members=g.members, seq=seq, call=call, entered=tuple(entered))
    mm = _mismatch(known)
    if mm is not None:
        return Finding(mm, sides=known, **base)
    if missing or absent:
        return Finding("missing", missing=tuple(missing), last={r: enq[r] for r in missing}, absent=absent, **base)
    return Finding("stuck", **base)


def _history_mismatch(g: Group) -> Finding | None:
    """The earliest collective that every rank recorded and went through but called differently (gloo moves the same
    number of bytes and never notices: float32 against int32, [1024] against [32, 32])."""
    seqs = sorted(set.intersection(*(set(c) for c in g.calls.values()))) if len(g.calls) > 1 else []
    for seq in seqs:
        calls = {r: g.calls[r][seq] for r in sorted(g.calls)}
        mm = _mismatch(calls)
        if mm is not None:
            return Finding(mm, pg=g.name, group=g.label(), members=g.members, seq=seq, call=calls[min(calls)],
                           entered=tuple(sorted(calls)), sides=calls, completed=True)
    return None


def _mismatch(calls: Mapping[int, Call]) -> str | None:
    if len({c.op for c in calls.values()}) > 1:
        return "op mismatch"
    if len({c.sizes for c in calls.values()}) > 1:
        return "size mismatch"
    if len({c.dtypes for c in calls.values()}) > 1:
        return "dtype mismatch"
    return None


def _rank_of(f: Finding, waits: Mapping[int, list]) -> tuple:
    """Order of blame: a mismatch first; then a group whose missing ranks wait in no collective (they are the cause,
    not another wait); then the smallest group (the most specific); then the lowest seq."""
    kind = {"op mismatch": 0, "size mismatch": 1, "dtype mismatch": 2, "missing": 3, "stuck": 4}[f.kind]
    waiting_culprits = sum(1 for r in f.missing if waits.get(r))
    return (kind, waiting_culprits, len(f.members), f.seq or 0, f.pg)


def _waits_text(f: Finding) -> str:
    return f"{f.call.op if f.call else 'collective'} #{f.seq} in the {f.group}"


def _replace(f: Finding, **kw) -> Finding:
    d = {k: getattr(f, k) for k in f.__dataclass_fields__}
    d.update(kw)
    return Finding(**d)


# ---- reading the dumps -----------------------------------------------------------------------------------------
def _normalised(dumps: Mapping[int, dict], world: int | None, known) -> dict[int, dict]:
    """The dumps with pg_config and pg_status keyed by group names and ints, as fr_records.normalise writes them."""
    raw = any("" in (d.get("pg_config") or {}) or any(
        isinstance(v, dict) and any(isinstance(x, str) for x in v.values()) for v in (d.get("pg_status") or {}).values())
        for d in dumps.values())
    return fr_records.normalise_all(dict(dumps), world, dict(known) if known else None) if raw else dict(dumps)


def _groups(dumps: Mapping[int, dict]) -> dict[str, Group]:
    groups: dict[str, Group] = {}
    for rank, d in sorted(dumps.items()):
        cfg = d.get("pg_config") or {}
        for name, c in cfg.items():
            if not isinstance(c, dict):
                continue
            g = groups.setdefault(str(name), Group(str(name), str(c.get("desc") or ""),
                                                   tuple(fr_records.ranks_of(c.get("ranks")) or ())))
            if not g.members:
                g.members = tuple(fr_records.ranks_of(c.get("ranks")) or ())
        for e in d.get("entries") or []:
            pg = e.get("process_group")
            if e.get("is_p2p") or not isinstance(pg, (list, tuple)) or e.get("collective_seq_id") is None:
                continue
            g = groups.setdefault(str(pg[0]), Group(str(pg[0]), str(pg[1]), ()))
            g.calls.setdefault(rank, {})[int(e["collective_seq_id"])] = Call(
                _op(str(e.get("profiling_name") or "?")), _sizes(e.get("input_sizes")),
                tuple(str(x) for x in e.get("input_dtypes") or ()))
            g.late = g.late or str(e.get("profiling_name") or "").startswith("gloo:")
        for name, st in (d.get("pg_status") or {}).items():
            g = groups.setdefault(str(name), Group(str(name), "", ()))
            if isinstance(st, dict):
                g.enqueued[rank] = _int(st.get("last_enqueued_collective"))
                g.completed[rank] = _int(st.get("last_completed_collective"))
    for g in groups.values():
        if not g.members:
            g.members = tuple(sorted(set(g.enqueued) | set(g.calls)))
        g.members = tuple(sorted(g.members))
    return groups


def _op(name: str) -> str:
    """"gloo:all_reduce" -> "all_reduce"."""
    return name.split(":", 1)[1] if ":" in name else name


def _sizes(v) -> tuple:
    return tuple(tuple(int(x) for x in s) for s in (v or ()) if isinstance(s, (list, tuple)))


def _int(v) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return -1


def _dtype(t: str) -> str:
    return _DTYPES.get(t, t.lower())


# ---- words -----------------------------------------------------------------------------------------------------
def _describe(c: Call | None) -> str:
    """"all_reduce, 1 tensor [1024] float32" / "barrier"."""
    if c is None:
        return "op not recorded"
    if not c.sizes:
        return c.op
    n = len(c.sizes)
    dts = sorted({_dtype(t) for t in c.dtypes})
    return f"{c.op}, {n} tensor{'s' if n > 1 else ''} {c.shape_text()}" + (f" {'/'.join(dts)}" if dts else "")


def _minority(sides: Mapping[int, Call]) -> tuple[int, ...]:
    """The ranks whose call differs from the one most ranks made; every side when no call has a majority."""
    by: dict[Call, list[int]] = {}
    for r, c in sorted(sides.items()):
        by.setdefault(c, []).append(r)
    if len(by) < 2:
        return ()
    sizes = sorted((len(rs) for rs in by.values()), reverse=True)
    if sizes[0] == sizes[1]:
        return tuple(sorted(sides))
    major = max(by.values(), key=len)
    return tuple(sorted(r for r in sides if r not in major))


def _sides_text(sides: Mapping[int, Call], say: Callable[[Call], str], on: bool = False, first_verb: str = "") -> str:
    by: dict[str, list[int]] = {}
    for r, c in sorted(sides.items()):
        by.setdefault(say(c), []).append(r)
    parts = sorted(by.items(), key=lambda kv: kv[1][0])
    if on:
        return ", ".join(f"{what} on {ranks_text(rs)}" for what, rs in parts)
    return ", ".join(f"{ranks_text(rs)}{' ' + first_verb if i == 0 and first_verb else ''} {what}"
                     for i, (what, rs) in enumerate(parts))


def _by_last(missing, last: Mapping[int, int]) -> list[list[int]]:
    out: dict[int, list[int]] = {}
    for r in sorted(missing):
        out.setdefault(last.get(r, -1), []).append(r)
    return list(out.values())


def _last_text(last: Mapping[int, int], rs: list[int]) -> str:
    n = last.get(rs[0], -1)
    whose = "its" if len(rs) == 1 else "their"
    return f"{whose} last was #{n}" if n > 0 else f"{whose} first collective in this group not reached"

