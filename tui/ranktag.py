"""A rank line that starts with its own rank's tag (a program's "[rank 1] ...", torch's "[rank1]: ..." on errors and
warnings) is shown without it where ddptui tags every line with its rank already: one tag per line, not two."""
from __future__ import annotations

import re

_TAG = re.compile(r"\[rank ?(\d+)\]:? ?")


def untagged(rank: int | None, line: str) -> str:
    """The line without a leading tag naming this same rank; another rank's tag (a rank speaking of a peer) stays."""
    if rank is None or not line.startswith("[rank"):
        return line
    m = _TAG.match(line)
    return line[m.end():] if m and int(m.group(1)) == rank else line


def untag_lines(rank: int | None, lines) -> list[str]:
    return [untagged(rank, ln) for ln in lines]
