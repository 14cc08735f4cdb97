"""A rank line that starts with its own rank's tag (a program's "[rank 1] ...", torch's "[rank1]: ..." on errors and
warnings) is shown without it where ddptui tags every line with its rank already: one tag per line, not two."""
from __future__ import annotations


def _tags(rank: int) -> tuple[str, str]:
    return f"[rank {rank}]", f"[rank{rank}]"


def _cut(line: str, tag: str) -> str:
    rest = line[len(tag):]
    if rest.startswith(":"):
        rest = rest[1:]
    return rest[1:] if rest.startswith(" ") else rest


def untagged(rank: int | None, line: str) -> str:
    """The line without a leading tag naming this same rank; another rank's tag (a rank speaking of a peer) stays."""
    if rank is None or not line.startswith("[rank"):
        return line
    for tag in _tags(rank):
        if line.startswith(tag):
            return _cut(line, tag)
    return line


def untag_lines(rank: int | None, lines) -> list[str]:
    if rank is None:
        return list(lines)
    tags = _tags(rank)
    return [_cut(ln, tags[0] if ln.startswith(tags[0]) else tags[1]) if ln.startswith(tags) else ln for ln in lines]
