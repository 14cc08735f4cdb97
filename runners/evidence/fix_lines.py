"""What to do about a stall, a collective mismatch or a slow-down, said from its own evidence (which collective, where in
the user's code, which ranks): the `fix` of a HangVerdict. Pure."""
from __future__ import annotations

from collections.abc import Mapping

from .fr_analysis import Finding, _dtype
from .hang_verdict import WAITING, Where, where_phrase
from .words import ranks_text

ORDER = "every rank must call the same collectives in the same order"


def fix_line(finding: Finding | None, wheres: Mapping[int, Where], culprits, waiting, slow: bool = False) -> str:
    """The fix line of a verdict: from the Flight Recorder finding when it explains a hang (a mismatch, a missing
    rank), else from where the culprits' stacks are; "" when the evidence names nothing to change."""
    if not slow and finding is not None and finding.kind != "none" and not finding.completed:
        said = for_finding(finding, wheres)
        if said:
            return said
    return for_stacks(wheres, tuple(culprits), tuple(waiting), slow)


def for_stopped(stopped: Mapping[int, str], pids: Mapping[int, int | None], nodes: Mapping[int, str]) -> str:
    """Ranks found stopped (rank -> its /proc State): what resumes them, on their own node."""
    parts = []
    for r in sorted(stopped):
        pid, node = pids.get(r), nodes.get(r)
        cmd = f"`kill -CONT {pid}`" if pid else "SIGCONT"
        parts.append(f"{cmd}{f' on {node}' if node else ''} resumes rank {r}" if stopped[r][:1] != "t"
                     else f"rank {r}{f' (pid {pid})' if pid else ''} is held by a tracer: detach the debugger")
    return ("; ".join(parts) + "; find what stopped it (Ctrl-Z in its terminal, a debugger, a suspend by the "
            "scheduler), as every other rank waits for it")


def for_finding(f: Finding, wheres: Mapping[int, Where] | None = None) -> str:
    """A mismatch: which call runs on which ranks only, and where; a missing rank: what keeps it from the collective."""
    wheres = wheres or {}
    if f.kind == "op mismatch":
        return f"{ORDER}; " + _mismatch(f, wheres)
    if f.kind in ("size mismatch", "dtype mismatch"):
        what = "shapes" if f.kind == "size mismatch" else "dtypes"
        say = (lambda c: c.shape_text() or "no tensor") if f.kind == "size mismatch" else (
            lambda c: "/".join(_dtype(t) for t in c.dtypes) or "no tensor")
        by: dict[str, list[int]] = {}
        for r, c in sorted(f.sides.items()):
            by.setdefault(say(c), []).append(r)
        op = f.call.op if f.call else "the collective"
        at = _at_of(f.entered, wheres)
        sides = ", ".join(f"{w} on {ranks_text(rs)}" for w, rs in sorted(by.items(), key=lambda kv: kv[1][0]))
        return (f"every rank must pass the same {what} to each collective: {op} #{f.seq}{at} gets {sides}; "
                f"give it the same {what[:-1]} on every rank")
    if f.kind == "missing":
        return _missing(f, wheres)
    if f.kind == "stuck":
        return (f"every member entered {f.call.op if f.call else 'the collective'} #{f.seq} and none completed it: "
                "look for a rank or node that died inside it (the Timeline, the launcher's lines) or a network between "
                "the ranks that stopped passing traffic")
    return ""


def _mismatch(f: Finding, wheres: Mapping[int, Where]) -> str:
    """"the barrier at train.py:19 runs on rank 0 only, while rank 1 is in all_reduce ... at train.py:14; call it on
    every rank, or on none": the side that differs from the others (on a tie, the side that is not DDP's own call)."""
    by: dict[str, list[int]] = {}
    for r, c in sorted(f.sides.items()):
        by.setdefault(c.text(), []).append(r)
    odd = _odd_side(by, f, wheres)
    rest = [(call, rs) for call, rs in by.items() if call != odd]
    head = f"the {odd.split()[0]}{_at_of(by[odd], wheres)} runs on {ranks_text(by[odd])} only"
    others = "; ".join(f"{ranks_text(rs)} {'is' if len(rs) == 1 else 'are'} {_in_call(call, rs, wheres)}"
                       for call, rs in rest)
    return f"{head} (collective #{f.seq} {_in_group(f)}), while {others}; call it on every rank, or on none"


def _odd_side(by: Mapping[str, list[int]], f: Finding, wheres: Mapping[int, Where]) -> str:
    sizes = sorted((len(rs) for rs in by.values()), reverse=True)
    if len(sizes) > 1 and sizes[0] > sizes[1]:  # a majority: the minority's call is the rank-conditional one
        return min(by, key=lambda k: (len(by[k]), by[k][0]))
    own = [k for k, rs in by.items() if not any(_ddp_own(wheres.get(r)) for r in rs)]
    return own[0] if len(own) == 1 else min(by, key=lambda k: by[k][0])


def _in_call(call: str, rs: list[int], wheres: Mapping[int, Where]) -> str:
    """"in all_reduce inside backward (DDP bucket all-reduce) at train.py:14": what the other side waits in."""
    ws = [wheres[r] for r in rs if r in wheres]
    details = {w.detail for w in ws if w.category in WAITING}
    what = details.pop() if len(details) == 1 else call
    return f"in {what}{_at_of(rs, wheres)}"


def _missing(f: Finding, wheres: Mapping[int, Where]) -> str:
    op = f.call.op if f.call else "collective"
    target = f"{op} #{f.seq} {_in_group(f)}{_at_of(f.entered, wheres)}"
    parts = []
    for r in f.culprits:
        if r in f.elsewhere:
            parts.append(f"rank {r} waits in {f.elsewhere[r]} instead of {target}: the ranks of each group must call "
                         "its collectives at the same point relative to their other groups' (a collective inside a "
                         "rank-dependent branch, or groups used in a different order)")
        elif r in f.absent:
            parts.append(f"rank {r} gave no Flight Recorder dump: read its last lines and stack (Stacks tab)")
        else:
            w = wheres.get(r)
            parts.append(f"rank {r} must reach {target} as the others did; " + (
                _remedy(r, w) if w is not None else "read its last lines to see why it does not"))
    return "; ".join(parts)


def for_stacks(wheres: Mapping[int, Where], culprits: tuple, waiting: tuple, slow: bool) -> str:
    """From the stacks alone: the culprits' own frames and what to do about each; ranks that all wait in different
    collectives are a mismatch; ranks that all wait in one collective lost a peer or skipped a call."""
    known = {r: w for r, w in wheres.items() if w is not None and not (w.category == "unknown" and w.file is None)}
    named = [r for r in culprits if r in known and known[r].category not in WAITING]
    if named:
        return "; ".join(_remedy(r, known[r], slow) for r in named)
    if slow:
        return ""
    inside = [r for r in waiting if r in known]
    if inside:
        calls = {(known[r].detail, known[r].at) for r in inside}
        if len(calls) > 1:
            return f"{ORDER}; " + ", ".join(f"rank {r} is in {known[r].detail} at {known[r].at}" for r in inside)
        detail, at = calls.pop()
        return (f"every rank waits in {detail} at {at}: find the rank that died or never joined (the Timeline), "
                "or the collective one rank skipped (a rank-dependent branch)")
    return ""


def _remedy(r: int, w: Where, slow: bool = False) -> str:
    """What to do about rank r being where its stack says (its own code, with the file and line)."""
    where = where_phrase(w, "is in")
    if w.category == "sleep" and ((w.calls or "").startswith(("threading.", "queue.")) or "threading" in w.detail):
        return (f"rank {r} {where}: what it waits for there never comes on this rank; make it happen on every rank, "
                "or wait with a timeout")
    if w.category == "sleep" and slow:
        return f"rank {r} {where} and every rank waits for it at the next collective: remove that sleep or shorten it"
    if w.category == "sleep":
        return f"rank {r} {where}: remove that sleep or shorten it below the collective's timeout"
    if w.category == "io":
        return (f"rank {r} {where}: make that read or connection finish (or time out) on every rank"
                + (", or move it out of the training step" if slow else ""))
    if w.category == "dataloader":
        return (f"rank {r} {where}: make that dataset code faster or finish, or give the DataLoader more "
                "num_workers" + ("" if slow else " and a timeout= so a stuck worker raises"))
    if w.category == "compute" and slow:
        return (f"rank {r} {where}: it does more work a step than the others; give every rank the same share "
                "(batch, data, model split), or look for what else uses its CPU")
    if w.category == "compute":
        return (f"rank {r} {where}: check that this loop ends on every rank (a rank-dependent stop condition?) "
                "and that every rank does the same amount of work")
    return f"rank {r} {where}: read its stack and last lines (Stacks tab)"


def _at_of(ranks, wheres: Mapping[int, Where]) -> str:
    """" at train.py:19" when the ranks' stacks agree on the line, else ""."""
    ats = {wheres[r].at for r in ranks if r in wheres}
    return f" at {ats.pop()}" if len(ats) == 1 and "?" not in ats else ""


def _in_group(f: Finding) -> str:
    """"in the default group" / "in group 1 (ranks 0, 1)"."""
    return f"in the {f.group}" if f.group.startswith("default") else f"in {f.group}"


def _ddp_own(w: Where | None) -> bool:
    """The rank is in DistributedDataParallel's own collective (its bucket all-reduce, its broadcasts), not a call of
    the user's program."""
    return w is not None and "DDP" in w.detail
