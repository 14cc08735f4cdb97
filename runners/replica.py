"""Deciding whether every rank holds byte-identical weights, from the per-parameter digests they reported."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass


@dataclass(frozen=True)
class ReplicaResult:
    status: str  # identical | differ | incomplete | unavailable
    text: str
    param: str | None
    ranks: tuple[int, ...]
    params: tuple[str, ...]
    table: dict[int, tuple[str, ...]]


def _ranks(rs) -> str:
    rs = sorted(rs)
    return ("rank " if len(rs) == 1 else "ranks ") + ", ".join(map(str, rs))


def compare(digests: dict[int, list], world_size: int) -> ReplicaResult:
    """digests: rank -> [[name, hex, shape, dtype], ...] in named_parameters() order."""
    if not digests:
        return ReplicaResult("unavailable", "no rank reported parameter digests", None, (), (), {})
    names: list[str] = []
    for rank in sorted(digests):
        for entry in digests[rank]:
            if entry[0] not in names:
                names.append(entry[0])
    table = {r: tuple(dict((e[0], e[1]) for e in d).get(n, "-") for n in names) for r, d in digests.items()}
    missing = sorted(set(range(world_size)) - set(digests))
    for i, name in enumerate(names):
        by_digest = Counter(table[r][i] for r in table)
        if len(by_digest) > 1:
            majority, count = by_digest.most_common(1)[0]
            tie = count * 2 == len(table) or count == 1
            if tie:  # no majority: the lowest rank's weights are the reference
                majority = table[min(table)][i]
            odd = tuple(sorted(r for r in table if table[r][i] != majority))
            agree = sorted(set(table) - set(odd))
            text = (f"replicas differ: first differing parameter '{name}': {_ranks(odd)} "
                    f"differ{'s' if len(odd) == 1 else ''} from {_ranks(agree)}"
                    + (" (no majority: the lowest rank is the reference)" if tie else ""))
            return ReplicaResult("differ", text, name, odd, tuple(names), table)
    if missing:
        return ReplicaResult("incomplete", f"{len(names)} parameters identical on {_ranks(table)}; "
                             f"no digests from {_ranks(missing)}", None, tuple(missing), tuple(names), table)
    return ReplicaResult("identical", f"all {len(table)} ranks hold byte-identical weights "
                         f"({len(names)} parameters)", None, (), tuple(names), table)
