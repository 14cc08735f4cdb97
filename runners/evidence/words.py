"""How ddptui says things the same way everywhere: ranks by number, the ranks it cannot see."""
from __future__ import annotations


def ranks_text(rs) -> str:
    rs = sorted(rs)
    return ("rank " if len(rs) == 1 else "ranks ") + ", ".join(map(str, rs))


def unseen_words(unseen) -> str:
    """'rank 0 runs on another node, unseen here' / 'ranks 2, 3 run on other nodes, unseen here'."""
    one = len(unseen) == 1
    return f"{ranks_text(unseen)} run{'s' if one else ''} on {'another node' if one else 'other nodes'}, unseen here"
