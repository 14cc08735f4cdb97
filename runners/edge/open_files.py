"""The open-file limit raised to what following many ranks takes: Linux's usual soft limit is 1,024, and the engine
holds four files a rank open (its two output files followed, its record log, the pidfd that says it exited; 340 at
80 ranks, measured), a viewer one."""
from __future__ import annotations

import resource

ENGINE_FILES_PER_RANK = 4
SPARE = 256  # the record's other files, pipes, sockets, /proc reads, py-spy's pipes


def needed(ranks: int, per_rank: int = ENGINE_FILES_PER_RANK) -> int:
    """Open files a process following `ranks` ranks may hold at once."""
    return ranks * per_rank + SPARE


def raised_soft(soft: int, hard: int, want: int) -> int | None:
    """The soft limit to set so that `want` files fit (never lowered, never past the hard limit), or None to leave
    it as it is."""
    infinity = resource.RLIM_INFINITY
    if soft == infinity or soft >= want:
        return None
    target = want if hard == infinity else min(want, hard)
    return target if target > soft else None


def ensure(want: int) -> tuple[int, int]:
    """Raise this process's soft limit toward `want` (children inherit it); returns the (soft, hard) limits now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = raised_soft(soft, hard, want)
    if target is not None:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft, hard


def too_few(ranks: int, soft: int) -> str | None:
    """Why `soft` open files are too few for an engine following `ranks` ranks (one line), or None."""
    want = needed(ranks)
    if soft == resource.RLIM_INFINITY or soft >= want:
        return None
    return (f"{ranks} ranks here need about {want} open files in ddptui's engine ({ENGINE_FILES_PER_RANK} a rank), and"
            f" this process may open {soft} (the hard limit, `ulimit -Hn`)")
