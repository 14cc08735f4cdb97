"""How sure it is that the kernel's OOM killer sent a SIGKILL, from what the machine says (oom.py reads it) and the
rank's RSS samples before its death: pure."""
from __future__ import annotations

from dataclasses import dataclass

# How full memory was, from the RSS samples, for the OOM killer (which picks the largest process once the cgroup or
# the machine is out of memory) to be a likely sender, or an unlikely one. Samples are ~1 s apart: a burst between
# two of them is not seen, hence "by the look of it" where no count or log says more.
NEAR_OWN = 0.5  # the rank alone held half the limit
NEAR_ALL = 0.8  # the ranks on this machine together held most of it
FAR_ALL = 0.25  # the ranks together never held a quarter of it


@dataclass(frozen=True)
class Limit:
    size: int  # bytes
    what: str  # "its memory cgroup's limit", "the machine's memory"


@dataclass(frozen=True)
class KillEvidence:
    """What the machine says of one SIGKILLed rank (`kill_evidence`): the kernel log, the cgroup's count, the limit."""

    log_names: bool | None = None  # the kernel log names it as the OOM killer's victim; None: no log read whole
    counted: int | None = None  # OOM kills its memory cgroup counted during the run; None: not readable
    limit: Limit | None = None


@dataclass(frozen=True)
class Reading:
    """How sure it is that the OOM killer sent a SIGKILL: level "oom" (the log or the count says so), "near" (memory
    was near its limit), "unknown", "far" (memory was far from it), "not oom" (the log or the count says not)."""

    level: str
    short: str  # "out of memory", "out of memory?", "sender unknown", "not for memory by the look of it", ...
    words: str  # short, with its evidence

    @property
    def memory(self) -> bool:
        """Worth telling the user to use less memory."""
        return self.level in ("oom", "near")


def size(n: int) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


def _rss_words(own: int | None, together: int | None, limit: Limit | None) -> str:
    if own is None:
        return ""
    out = f"its RSS peaked at {size(own)}"
    if together is not None and together > own:
        out += f" (the ranks here together {size(together)})"
    if limit is not None:
        out += f", {100 * own / limit.size:.0f}% of {limit.what}, {size(limit.size)}"
    return out


def read_kill(pid: int | None, ev: KillEvidence, own_peak: int | None, all_peak: int | None) -> Reading:
    """The reading of a SIGKILL nobody we know of sent, from what the machine says (`ev`) and the RSS samples: the
    rank's own peak and the peak of all ranks on this machine together (bytes; None: never sampled)."""
    rss = _rss_words(own_peak, all_peak, ev.limit)
    if ev.log_names:
        return Reading("oom", "out of memory", f"out of memory: the kernel log says the OOM killer killed pid {pid}")
    if ev.counted and ev.log_names is None:
        n = ev.counted
        return Reading("oom", "out of memory",
                       f"out of memory: its memory cgroup counted {n} OOM kill{'s' if n > 1 else ''} during the run")
    said = []
    if ev.log_names is False:
        said.append(f"the kernel log names no OOM kill of pid {pid}")
    if ev.counted == 0:
        said.append("its memory cgroup counted no OOM kill during the run")
    if said:  # (a count that rose while the log names another pid: another process of the cgroup was chosen)
        return Reading("not oom", "not the OOM killer", "not the OOM killer: " + "; ".join(said + [rss] * bool(rss)))
    together = max(x for x in (own_peak, all_peak) if x is not None) if own_peak is not None else None
    if ev.limit is not None and own_peak is not None and together is not None:
        if own_peak >= NEAR_OWN * ev.limit.size or together >= NEAR_ALL * ev.limit.size:
            return Reading("near", "out of memory?", f"out of memory? {rss}")
        if together < FAR_ALL * ev.limit.size:
            return Reading("far", "not for memory by the look of it",
                           f"not for memory by the look of it: {rss} (RSS sampled about once a second; no OOM count "
                           f"or kernel log could be read)")
    return Reading("unknown", "sender unknown", "sender unknown: " + (rss or "no memory figure or OOM evidence read"))
