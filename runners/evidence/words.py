"""How ddptui says things the same way everywhere: ranks by number, the ranks it cannot see, how long things took."""
from __future__ import annotations

from collections.abc import Iterable

# ---- ranks ---------------------------------------------------------------------------------------------------------


def rank_list(rs: Iterable[int], sep: str = ", ") -> str:
    """"0, 2, 3": the numbers alone, in the order given."""
    return sep.join(map(str, rs))


def ranks_text(rs: Iterable[int], *, sort: bool = True, empty: str | None = None, sep: str = ", ",
               spans: bool = False, plural: bool = False) -> str:
    """"rank 1" / "ranks 0, 2".

    The places that say it differ in small ways a reader already sees, kept as they were:
    sort=False keeps the caller's order (a crash's victims in the order they died);
    empty: what no rank reads as ("no ranks", "none"; None: "ranks " as the plain form always said);
    sep: between the numbers (the banner's "," where space is short);
    spans: more than 3 consecutive ranks as "ranks 2-7" (the stall's CPU words);
    plural: "ranks 1" even for one rank (the engine's lines that always said "ranks")."""
    rs = sorted(rs) if sort else list(rs)
    if not rs and empty is not None:
        return empty
    if len(rs) == 1 and not plural:
        return f"rank {rs[0]}"
    if spans and len(rs) > 3 and rs == list(range(rs[0], rs[-1] + 1)):
        return f"ranks {rs[0]}-{rs[-1]}"
    return "ranks " + rank_list(rs, sep)


def unseen_words(unseen) -> str:
    """'rank 0 runs on another node, unseen here' / 'ranks 2, 3 run on other nodes, unseen here'."""
    one = len(unseen) == 1
    return f"{ranks_text(unseen)} run{'s' if one else ''} on {'another node' if one else 'other nodes'}, unseen here"


# ---- durations -----------------------------------------------------------------------------------------------------
# Three forms, each where it reads best: the engine's sentences ("12 s", "4.2 ms"), the dashboard's clock ("2m10s"),
# and the compact table's narrow cells ("1.23s").


def seconds_words(s: float) -> str:
    """The engine's sentences: '25 s', '0.50 s', '50 ms', '5.0 ms', '20 us'."""
    if s >= 10:
        return f"{s:.0f} s"
    if s >= 0.1:
        return f"{s:.2f} s"
    if s >= 0.001:
        return f"{s * 1000:.0f} ms" if s >= 0.01 else f"{s * 1000:.1f} ms"
    return f"{s * 1e6:.0f} us"


def delay_words(s: float) -> str:
    """How long after another moment: '0.05 s', '12 s' (hundredths below 10 s, never milliseconds)."""
    return f"{s:.2f} s" if s < 10 else f"{s:.0f} s"


def clock_words(seconds: float) -> str:
    """The dashboard's elapsed times and ETAs: '45s', '2m10s', '1h02m'."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def cell_seconds(t: float) -> str:
    """A narrow table cell: '12s', '1.23s', '123ms'."""
    if t >= 10:
        return f"{t:.0f}s"
    if t >= 1:
        return f"{t:.2f}s"
    return f"{t * 1000:.3g}ms"
