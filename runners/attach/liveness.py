"""Whether an attached rank (no ddptui hooks in it) still moves: its innermost user frame sampled every few seconds."""
from __future__ import annotations

from dataclasses import dataclass

from ..evidence.stack_types import StackResult, ThreadStack, is_helper, is_user_frame

STACK_EVERY = 5.0  # seconds between py-spy passes over an attached job's ranks (bench/attach_cost.py measures it)


def main_thread(threads: list[ThreadStack]) -> ThreadStack | None:
    """The thread that speaks for the rank: MainThread, else the first that is not a helper thread."""
    for t in threads:
        if t.name == "MainThread":
            return t
    return next((t for t in threads if not is_helper(t)), None)


def frame_key(res: StackResult | None) -> tuple[str, int, str] | None:
    """(file, line, function) of the main thread's innermost frame of the user's own code (its innermost frame when
    none is the user's); None when the stack could not be taken."""
    if res is None or not res.threads:
        return None
    t = main_thread(res.threads)
    if t is None or not t.frames:
        return None
    f = next((f for f in t.frames if is_user_frame(f)), t.frames[0])
    return (f.file, f.line, f.func)


def motion_key(res: StackResult | None) -> tuple | None:
    """What must differ between two samples for the rank to have moved: the main thread's chain of functions (file,
    function), innermost first, without line numbers. A training step passes through the model's, autograd's and the
    optimizer's functions; a loop spinning in one function (`while time.time() < end: x += 1`) shows other lines of it,
    never another function: by lines it would look like progress. None when the stack could not be taken."""
    if res is None or not res.threads:
        return None
    t = main_thread(res.threads)
    if t is None or not t.frames:
        return None
    return tuple((f.file, f.func) for f in t.frames)


@dataclass
class _Seen:
    key: tuple | None
    since: float  # monotonic time of the first sample that showed this key
    shown: tuple[str, int, str] | None = None  # its frame as said to the user (frame_key)


class Liveness:
    """Each rank's frame samples: `observe` says whether the rank moved since the previous one."""

    def __init__(self) -> None:
        self._seen: dict[int, _Seen] = {}

    def observe(self, rank: int, mono: float, key: tuple | None, shown: tuple[str, int, str] | None = None) -> bool:
        """A new sample of `rank` taken at `mono`: `key` what must change for it to have moved (`motion_key`, or a
        frame_key), `shown` its frame for the words (frame_key; `key` when not given). True when the key differs
        from the last sample's (a sample that could not be read is no evidence either way: False, the last stays)."""
        if key is None:
            return False
        prev = self._seen.get(rank)
        shown = shown if shown is not None else key
        if prev is not None and prev.key == key:
            prev.shown = shown
            return False
        self._seen[rank] = _Seen(key, mono, shown)
        return prev is not None

    def same_for(self, rank: int, mono: float) -> float | None:
        """Seconds the rank has shown the same innermost user frame (None: never sampled)."""
        s = self._seen.get(rank)
        return None if s is None else max(0.0, mono - s.since)

    def frame(self, rank: int) -> tuple[str, int, str] | None:
        s = self._seen.get(rank)
        return None if s is None else s.shown


def decide(quiet: float, same_frame: float | None, cpu: float | None, limit: float, busy: float) -> str:
    """One attached rank's liveness from the three signals: "moving" (output or a changed frame within the limit),
    "busy" (quiet, same frame, but burning CPU: computing in one long call), "stalled" (quiet past the limit, the same
    frame over that window, CPU below `busy`), or "quiet" (past the limit, but the evidence is incomplete: no frame
    sampled over the whole window)."""
    if quiet <= limit:
        return "moving"
    if same_frame is not None and same_frame < limit:
        return "moving"
    if cpu is not None and cpu >= busy:
        return "busy"
    if same_frame is None:
        return "quiet"
    return "stalled"


def liveness_words(rank: int, state: str, quiet: float, cpu_pct: float | None, rss: int | None,
                   frame: tuple[str, int, str] | None) -> str:
    """One rank in a --watch liveness line: `rank 1 stalled (quiet 42 s, CPU 0 %, RSS 310 MB, in culprit_wait
    hang_ddp.py:25)`."""
    import os
    parts = [f"quiet {quiet:.0f} s" if quiet >= 1 else "output now"]
    if cpu_pct is not None:
        parts.append(f"CPU {cpu_pct:.0f} %")
    if rss is not None:
        parts.append(f"RSS {rss / 1e6:.0f} MB")
    if frame is not None:
        parts.append(f"in {frame[2]} {os.path.basename(frame[0])}:{frame[1]}")
    return f"rank {rank} {state} ({', '.join(parts)})"


@dataclass(frozen=True)
class Seen:
    """One attached rank over a headless attach's watch: what it showed, for whether to watch on and the words."""

    rank: int
    blind: bool  # none of its output can be read (a terminal, a pipe, /dev/null)
    progressed: bool  # it wrote a line, or its frame moved between two samples, while watched
    samples: int  # stack samples of it that could be read while watched
    frame: tuple[str, int, str] | None  # its newest sampled frame
    cpu: float | None  # share of a core, recent
    asleep_since: float | None = None  # wall time its threads last ran, when the scheduler dated it (attach_sched.py)
    how: str = ""  # what showed its progress: "it wrote 460 KB", "its frame moved", "it wrote lines"


def waiting(seen: list[Seen]) -> list[Seen]:
    """The ranks that showed no progress while watched: a headless attach may not call the job healthy while there
    is one (a blind rank above all: its silence says nothing)."""
    return [s for s in seen if not s.progressed]


def seen_words(s: Seen) -> str:
    """'rank 1 (output not readable): asleep since 19:01:12 (the kernel's scheduler), in wait_for_lock
    lock_wait_ddp.py:9, CPU 0 %'; 'rank 0: progressing'."""
    import os
    import time
    who = f"rank {s.rank}" + (" (output not readable)" if s.blind else "")
    if s.progressed:
        return f"{who}: progressing" + (f" ({s.how})" if s.how else "")
    parts = []
    if s.asleep_since is not None:
        parts.append(f"asleep since {time.strftime('%H:%M:%S', time.localtime(s.asleep_since))} (the kernel's "
                     "scheduler)")
    elif s.samples >= 2:
        parts.append(f"running, the same frame in {s.samples} samples")
    elif s.samples == 1:
        parts.append("running, one stack sample so far")
    else:
        parts.append("running, no stack sample readable")
    if s.frame is not None:
        parts.append(f"in {s.frame[2]} {os.path.basename(s.frame[0])}:{s.frame[1]}")
    if s.cpu is not None:
        parts.append(f"CPU {s.cpu * 100:.0f} %")
    return f"{who}: {', '.join(parts)}"
