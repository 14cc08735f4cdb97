"""Deciding whether every rank holds byte-identical weights, from the per-parameter digests they reported, and since when not."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from .words import rank_list, ranks_text, unseen_words


@dataclass(frozen=True)
class ReplicaResult:
    status: str  # identical | differ | incomplete | unavailable
    text: str
    param: str | None
    ranks: tuple[int, ...]
    params: tuple[str, ...]
    table: dict[int, tuple[str, ...]]
    origin: str | None = None  # for "differ": "first_step" (differed before the first update) | "drifted" | None
    hint: str | None = None  # the hint code (runners/evidence/hints.py) that explains the origin


# What "differed at the first optimizer step" means depends on who could have made the replicas equal.
# kind: "xla" (torch_xla.launch replicas: nothing broadcasts the initial weights unless the program does),
# "ddp" (DistributedDataParallel broadcast rank 0's weights when it wrapped the model), "plain" (neither).
_FROM_START = {
    "xla": ("initial weights differ: no seed / no broadcast",
            "fix: xm.broadcast_master_param(model) after building it, or torch.manual_seed(S) before "
            "(PJRT CPU thread replicas share one generator: seed and build under one lock)",
            "replicas-differ-from-start-xla"),
    "ddp": ("DistributedDataParallel broadcast rank 0's weights when it wrapped the model, so something changed "
            "them after that: init_sync=False, or weights loaded / re-initialised per rank after DDP(...)",
            "fix: seed, build and load the model before wrapping it in DDP, and keep init_sync=True",
            "replicas-differ-from-start-ddp"),
    "plain": ("initial weights differ: no seed / no broadcast",
              "fix: torch.manual_seed(S) on every rank before building the model, or broadcast rank 0's weights "
              "(dist.broadcast(p.data, src=0) for each parameter, or wrap the model in DistributedDataParallel)",
              "replicas-differ-from-start"),
}


def _names(digests: dict[int, list]) -> list[str]:
    names: list[str] = []
    seen: set[str] = set()
    for rank in sorted(digests):
        for entry in digests[rank]:
            if entry[0] not in seen:
                seen.add(entry[0])
                names.append(entry[0])
    return names


def _first_difference(digests: dict[int, list]) -> tuple[str, tuple[int, ...], list[int], bool] | None:
    """(parameter, odd ranks, agreeing ranks, no majority) of the first parameter whose digests differ, else None."""
    names = _names(digests)
    table = {r: dict((e[0], e[1]) for e in d) for r, d in digests.items()}
    for name in names:
        by_rank = {r: table[r].get(name, "-") for r in table}
        by_digest = Counter(by_rank.values())
        if len(by_digest) > 1:
            majority, count = by_digest.most_common(1)[0]
            tie = count * 2 == len(table) or count == 1
            if tie:  # no majority: the lowest rank's weights are the reference
                majority = by_rank[min(by_rank)]
            odd = tuple(sorted(r for r in by_rank if by_rank[r] != majority))
            return name, odd, sorted(set(by_rank) - set(odd)), tie
    return None


def origin(first: dict[int, list] | None, ranks: set[int], kind: str) -> tuple[str, str, str] | None:
    """("first_step" | "drifted", the words, the hint code) from the digests taken before the first optimizer step.

    first: rank -> [[name, hex, shape, dtype], ...] at the first step; ranks: the ranks compared at the end.
    None when the first-step digests cannot tell (missing for a rank that took part).
    """
    if not first or len(first) < 2:
        return None
    diff = _first_difference(first)
    if diff is not None:
        name, odd, agree, _ = diff
        why, fix, hint = _FROM_START.get(kind, _FROM_START["plain"])
        where = f"'{name}' already differed at the first optimizer step ({ranks_text(odd)} vs {ranks_text(agree)})"
        return "first_step", f"replicas differed from the first step ({why}; {where}) - {fix}", hint
    if not ranks <= set(first):
        return None
    return ("drifted", "replicas drifted apart between step 1 and the end (identical at the first optimizer step): "
            "their updates differ (gradients not averaged across ranks, a rank-dependent update, or weights "
            "changed outside the optimizer)", "replicas-drifted")


def compare(digests: dict[int, list], world_size: int, first: dict[int, list] | None = None,
            kind: str = "plain", cut_short: bool = False, unseen: tuple[int, ...] = ()) -> ReplicaResult:
    """digests: rank -> [[name, hex, shape, dtype], ...] in named_parameters() order, at the end.

    first: the same, taken before each rank's first optimizer step (tells "differed from the first step" from
    "drifted apart"); kind: "xla" | "ddp" | "plain", who could have made the initial weights equal; cut_short: the run
    was torn down or a rank failed (the ranks report their weights as they exit on their own); unseen: ranks of the
    world this ddptui does not watch (other nodes'): their weights are not compared, and the verdict says so.
    """
    away = f"; {unseen_words(unseen)}: not compared" if unseen else ""
    if not digests:
        return ReplicaResult("unavailable", "replicas not compared: " + (
            "the ranks were stopped before they reported their weights (a rank reports them when it exits on its own)"
            if cut_short else "no rank reported its weights (a DistributedDataParallel model's, at exit)")
            + (f"; {unseen_words(unseen)}" if unseen else ""),
            None, (), (), {})
    names = _names(digests)
    table = {r: tuple(dict((e[0], e[1]) for e in d).get(n, "-") for n in names) for r, d in digests.items()}
    missing = sorted(set(range(world_size)) - set(digests) - set(unseen))
    diff = _first_difference(digests)
    if diff is not None:
        name, odd, agree, tie = diff
        text = (f"replicas differ: first differing parameter '{name}': {ranks_text(odd)} "
                f"differ{'s' if len(odd) == 1 else ''} from {ranks_text(agree)}"
                + (" (no majority: the lowest rank is the reference)" if tie else "") + away)
        since = origin(first, set(digests), kind)
        if since is None:
            return ReplicaResult("differ", text, name, odd, tuple(names), table)
        return ReplicaResult("differ", f"{text}; {since[1]}", name, odd, tuple(names), table, since[0], since[2])
    if missing:
        return ReplicaResult("incomplete", f"{len(names)} parameters identical on {ranks_text(table)}; "
                             f"no digests from {ranks_text(missing)}{away}", None, tuple(missing), tuple(names), table)
    if unseen and len(table) == 1:
        return ReplicaResult("incomplete", f"{ranks_text(table)} is the only rank seen here: its weights "
                             f"({len(names)} parameters) were compared with no other ({unseen_words(unseen)})", None,
                             tuple(unseen), tuple(names), table)
    if unseen:
        return ReplicaResult("incomplete", f"{len(table)} of {len(table) + len(unseen)} ranks seen here "
                             f"({rank_list(sorted(table))}) hold byte-identical weights ({len(names)} "
                             f"parameters){away}", None, tuple(unseen), tuple(names), table)
    return ReplicaResult("identical", f"all {len(table)} ranks hold byte-identical weights "
                         f"({len(names)} parameters)", None, (), tuple(names), table)


# ---- the live check: the ranks' digests every N optimizer steps, compared as each step's set completes ------------

KEEP_PENDING = 64  # steps whose sets are not complete yet, kept at most (the oldest go first)


@dataclass(frozen=True)
class Divergence:
    """The first check whose complete set of digests differs: at `step`, after the agreeing check at `since`."""

    step: int
    since: int | None  # the last check before it where every rank agreed; None: this was the first check compared
    param: str  # the first differing parameter, in the model's order
    ranks: tuple[int, ...]  # the ranks that differ from the others
    agree: tuple[int, ...]  # the ranks they differ from
    text: str


class LiveCheck:
    """The ranks' `replica_digest` reports ([[name, digest], ...] at an optimizer step), compared only once every
    expected rank reported that step: a rank that is late, finished or died leaves its steps uncompared, never
    "diverged"; a rank whose steps go back (restarted) has its older reports dropped. Says the first divergence once;
    later checks are not compared."""

    def __init__(self, keep: int = KEEP_PENDING) -> None:
        self.keep = keep
        self.pending: dict[int, dict[int, list]] = {}  # step -> rank -> its digests
        self.agreed: int | None = None  # the newest step every rank agreed at
        self.compared = 0  # complete sets compared
        self.last: dict[int, int] = {}  # rank -> the step of its newest report
        self.diverged: Divergence | None = None

    def add(self, rank: int, step: int, params: list, expected: frozenset[int] | set[int]) -> Divergence | None:
        """One rank's digests at `step`; the divergence when they complete a set that differs, else None."""
        if self.diverged is not None or not expected or rank not in expected:
            return None
        if step <= self.last.get(rank, -1):  # the rank began again (a restart of its launcher): its old reports go
            for by_rank in self.pending.values():
                by_rank.pop(rank, None)
            if self.agreed is not None and self.agreed >= step:
                self.agreed = None
        self.last[rank] = step
        got = self.pending.setdefault(step, {})
        got[rank] = params
        if not set(expected) <= set(got):
            while len(self.pending) > self.keep:
                del self.pending[min(self.pending)]
            return None
        del self.pending[step]
        self.compared += 1
        found = _first_difference({r: got[r] for r in expected})
        if found is None:
            if self.agreed is None or step > self.agreed:
                self.agreed = step
            return None
        name, odd, agree, tie = found
        since = self.agreed if self.agreed is not None and self.agreed < step else None
        when = f"between step {since} and step {step}" if since is not None else f"by step {step} (the first check)"
        text = (f"replicas diverged {when}: first differing parameter `{name}`, {ranks_text(odd)} "
                f"differ{'s' if len(odd) == 1 else ''} from {ranks_text(agree)}"
                + (" (no majority: the lowest rank is the reference)" if tie else ""))
        self.diverged = Divergence(step, since, name, odd, tuple(agree), text)
        self.pending.clear()
        return self.diverged
