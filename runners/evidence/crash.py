"""The crash verdict: from every rank's evidence, which rank failed first, how, and what happened to the others."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from .kill_reading import Reading
from .signals import signal_name as signal_of
from .stack_types import Frame, is_user_frame
from .words import delay_words, ranks_text, unseen_words

# A peer went away: the rank printing this is a consequence, not a cause. The first three are what gloo says when
# the remote process is gone (the `peer-closed` hint matches them too); the rest are the other shapes of it.
PEER_GONE = ("Connection closed by peer", "remote worker crashing", "Connection reset by peer")
VICTIM_MARKERS = PEER_GONE + ("Broken pipe", "Socket Timeout", "DistBackendError", "NCCL communicator was aborted")
# Failures this close together (seconds) happened at the same moment: neither was caused by the other.
SIMULTANEOUS = 0.5
_FATAL = "Fatal Python error"
# std::terminate's words before an abort (gloo's enforce failures in its own threads: no Python exception exists)
_TERMINATE = "terminate called after throwing an instance of"
_WHAT = re.compile(r"^\s*what\(\):\s*(?:\[enforce fail at [^\]]*\]\s*)?(.*\S)")
_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+) in (\S+)')
_SIGNAL_WORDS = {"SIGSEGV": "segmentation fault", "SIGABRT": "abort", "SIGBUS": "bus error",
                 "SIGFPE": "floating-point exception", "SIGILL": "illegal instruction"}


@dataclass
class RankEvidence:
    """What is known about how one rank ended. Times are wall-clock seconds; None: not known."""

    rank: int
    returncode: int | None = None  # negative: killed by that signal
    died_at: float | None = None  # when the process really ended (its pidfd fired, or our own child exited)
    error_at: float | None = None  # when its first error (exception report) was read
    exc: dict | None = None  # the injected exception report: type, msg, where, tb
    err_lines: tuple[str, ...] = ()  # its last stderr lines
    out_lines: tuple[str, ...] = ()  # its last lines of any stream
    started: bool = True  # it ran our code or wrote anything
    completed: bool = False  # its work was done (final verdict / digests): a later abort is not a crash
    stopped_by: str | None = None  # "launcher" or "ddptui": who sent it the signal it ended with
    step: int | None = None
    kill: Reading | None = None  # a SIGKILL nobody we know of sent: how sure it is that the OOM killer did
    stderr_seen: bool = True  # its stderr was read (an uncaught exception's traceback would be among err_lines)
    stopped_how: str = ""  # its end in words when more is known than who stopped it (Slurm: who cancelled, when)


@dataclass(frozen=True)
class Verdict:
    text: str
    root: int | None
    what: str  # "exit 1", "SIGKILL", "SIGSEGV", ... of the root cause
    together: tuple[int, ...] = ()  # failed on their own at the same moment as the root
    victims: tuple[int, ...] = ()  # failed after it (their own error, or a peer-gone error)
    stopped: tuple[int, ...] = ()  # ended by the launcher's or ddptui's signal, no error of their own
    never_started: tuple[int, ...] = ()
    excerpt: tuple[str, ...] = ()
    outcomes: dict[int, tuple[str, str]] = field(default_factory=dict)  # rank -> (status, words)


def victim_marker(e: RankEvidence) -> str | None:
    """The words in its output that say a peer went away, if any."""
    text = "\n".join(list(e.err_lines) + [str((e.exc or {}).get("msg", ""))])
    for m in VICTIM_MARKERS:
        if m in text:
            return m
    return None


def ended_badly(e: RankEvidence) -> bool:
    if e.completed and (e.returncode is None or e.returncode <= 0) and e.stopped_by is None:
        return False  # finished its work; an exit-time abort is named elsewhere
    if e.exc is not None and not e.completed:
        return True
    return e.returncode not in (None, 0) or e.stopped_by is not None


def ended_by_our_stop(e: RankEvidence, stop_at: float | None) -> bool:
    """Did ddptui's own teardown end it? ddptui signals every launcher and rank pid when it stops a run (and a
    launcher passes the stop on), so a rank that really died after that moment, with no error of its own before
    it, ended because ddptui stopped the run: whatever signal or code it died of, it did not fail.
    Ranks sharing a pid (XLA thread replicas) share its death time, so they are judged alike."""
    if stop_at is None or e.died_at is None or e.died_at < stop_at:
        return False
    return e.error_at is None or e.error_at >= stop_at


# Why ddptui stopped a run (the session's status when it tore the ranks down) -> the words for a rank it ended.
_STOP_WHY = {"stalled": "after the stall", "timeout": "at the run's timeout", "stopped": "on request"}


def stopped_words(why: str | None, failed_first: int | None = None) -> str:
    """'stopped by ddptui after the stall', '... on request', 'torn down by ddptui after rank 1 failed'."""
    if why in _STOP_WHY:
        return f"stopped by ddptui {_STOP_WHY[why]}"
    return ended_by("ddptui", failed_first)


# Who ended a rank that had no error of its own, in words: the one home of these phrases (the crash verdict, a
# rank's outcome while the run goes on, and the hints all say it so).
_BY = {"ddptui": "torn down by ddptui", "launcher": "stopped by the launcher", "slurm": "stopped by Slurm"}


def ended_by(who: str, failed_first: int | None = None, did: str = "failed") -> str:
    """'torn down by ddptui after rank 1 failed', 'stopped by the launcher after rank 0 failed' (or what `did`: 'exited
    3'), or with no rank known to have ended first, 'stopped by ddptui' / 'stopped by the launcher'."""
    if failed_first is None:
        return "stopped by ddptui" if who == "ddptui" else _BY[who]
    return f"{_BY[who]} after rank {failed_first} {did}"


def kind(e: RankEvidence, someone_died_before: bool) -> str:
    """'never_started', 'stopped', 'victim' or 'failed' (an error of its own) for a rank that ended badly."""
    sig = signal_of(e.returncode)
    own_error = e.exc is not None or any(_FATAL in ln for ln in e.err_lines)
    if not e.started and not own_error:
        return "never_started"
    if e.stopped_by in ("ddptui", "slurm"):
        return "stopped"  # ended by ddptui's own teardown or Slurm's cancel, before any error of its own
    if victim_marker(e):
        return "victim"
    if own_error:
        return "failed"
    if e.stopped_by is not None:
        return "stopped"  # it was alive when the signal was sent, and shows no error of its own
    if sig in ("SIGTERM", "SIGINT") and someone_died_before:
        return "stopped"  # the launcher's teardown signal, sent because another rank went first
    return "failed"


def _when(e: RankEvidence) -> float:
    vals = [x for x in (e.died_at, e.error_at) if x is not None]
    return min(vals) if vals else math.inf


def how(e: RankEvidence, evidence: bool = False) -> str:
    """How it ended, in words: 'killed by SIGKILL (not the OOM killer)', 'SIGSEGV (segmentation fault)', 'exit 3';
    with `evidence`, a SIGKILL's memory reading says what it rests on."""
    sig = signal_of(e.returncode)
    if sig == "SIGKILL" and e.stopped_by is None:
        if e.kill is None:
            return "killed by SIGKILL (sender unknown)"
        return f"killed by SIGKILL ({e.kill.words if evidence else e.kill.short})"
    if sig:
        return f"{sig} ({_SIGNAL_WORDS[sig]})" if sig in _SIGNAL_WORDS else sig
    if e.returncode is not None:
        return f"exit {e.returncode}"
    return "failed"


_CRASH_SIGNS = (_FATAL, _TERMINATE, "Traceback (most recent call last)")
_ERROR_LINE = re.compile(r"^\s*(\[\w+\]:\s*)?[\w.]*(Error|Exception): ")  # "RuntimeError: ...": an error it printed


def chose_exit(e: RankEvidence) -> bool:
    """It ended with an exit status of its own (sys.exit(3) after its own check, os._exit(3)): above 0 and below a
    shell's 128 + signal, with no exception (reported, or a traceback or error line on its stderr), no fatal error,
    no peer gone and nobody's signal. Exit 1 is also what an uncaught exception gives: it counts only where that
    exception's traceback would have been read."""
    rc = e.returncode
    if rc is None or not 0 < rc < 128 or e.exc is not None or e.stopped_by is not None:
        return False
    if rc == 1 and not e.stderr_seen:
        return False
    return victim_marker(e) is None and not any(
        _ERROR_LINE.match(ln) or any(sign in ln for sign in _CRASH_SIGNS) for ln in e.err_lines)


def own_exit_kinds(ranks: list[RankEvidence]) -> dict[int, str] | None:
    """When no rank failed on its own but some ended by an exit status of their own (chose_exit), each rank that ended
    badly as "own", "stopped" (by the launcher or ddptui after that: no error of its own) or "never_started"; else
    None (a crash, or nothing ended badly). torchrun stops the other ranks as soon as one exits non-zero, so a rank
    still on its way out when its peer exited 3 is stopped, not failed."""
    bad = [e for e in ranks if ended_badly(e)]
    own = [e for e in bad if chose_exit(e)]
    if not own:
        return None
    first = min(_when(e) for e in own)
    kinds = {e.rank: "own" if e in own else kind(e, not math.isinf(first) and first <= _when(e)) for e in bad}
    return kinds if set(kinds.values()) <= {"own", "stopped", "never_started"} else None


_WARNING = re.compile(r"^\S+:\d+: \w*Warning: ")  # warnings.showwarning's head: "file.py:24: UserWarning: msg"


def _not_warnings(lines: list[str]) -> list[str]:
    """The lines without Python warnings (a head, its message's lines, then its indented source line): a warning
    read after the program's last print (the two streams are read apart) is no last word of the program's."""
    out, inside = [], False
    for ln in lines:
        if _WARNING.match(ln):
            inside = True
        elif inside and ln.startswith("  "):
            inside = False  # its source line ends it
        elif not inside:
            out.append(ln)
    return out


def last_output(e: RankEvidence) -> str:
    """Its last non-empty line of output (any stream, warnings left out), at most 160 characters; "" when none."""
    return next((ln.strip() for ln in reversed(_not_warnings(list(e.out_lines))) if ln.strip()), "")[:160]


def exit_words(returncode: int | None, exc: dict | None) -> str:
    """How a process ended, short: "exit 1", "SIGSEGV"; a stop signal after its own exception (the launcher stopped
    it while it was still on its way out) is "RuntimeError, then SIGTERM": the exception is why it failed."""
    sig = signal_of(returncode)
    if sig in ("SIGTERM", "SIGINT") and exc:
        return f"{exc.get('type') or 'exception'}, then {sig}"
    return sig or (f"exit {returncode}" if returncode is not None else "failed")


def short_exit(e: RankEvidence) -> str:
    return exit_words(e.returncode, e.exc)


def excerpt(e: RankEvidence) -> list[str]:
    """The lines that show why it died: its last traceback, the fatal-error dump of the thread that crashed,
    the exception report's traceback, or else its last lines."""
    lines = list(e.err_lines)
    for i in range(len(lines) - 1, -1, -1):
        if "Traceback (most recent call last)" in lines[i]:
            return lines[i:i + 20]
    for i in range(len(lines) - 1, -1, -1):
        if _FATAL in lines[i]:
            return _terminate_lines(lines[:i]) + _fatal_dump(lines[i:])
    if e.exc and e.exc.get("tb"):
        return list(e.exc["tb"])[-15:]
    return (lines or list(e.out_lines))[-10:]


def _fatal_dump(lines: list[str]) -> list[str]:
    """faulthandler's dump: the fatal line and the crashing thread's frames (other threads and modules left out)."""
    starts = [i for i, ln in enumerate(lines) if ln.startswith("Current thread")] or \
             _user_first([i for i, ln in enumerate(lines) if ln.startswith("Thread 0x")], lines)
    out = [lines[0]]
    if starts:
        for fr in lines[starts[0]:]:
            if not fr.strip():
                break
            out.append(fr)
    return out[:20]


def _user_first(starts: list[int], lines: list[str]) -> list[int]:
    """Thread blocks with a frame of the user's own code first: an abort raised in a C++ thread has no "Current
    thread", and faulthandler lists the newest threads (ddptui's helpers, idle in threading.wait) before main."""
    def has_user_frame(i: int) -> bool:
        for fr in lines[i + 1:]:
            m = _FRAME.match(fr)
            if not m:
                return False
            if is_user_frame(Frame(m.group(3), m.group(1), int(m.group(2)))):
                return True
        return False
    return sorted(starts, key=lambda i: not has_user_frame(i))


def _terminate_lines(lines: list[str]) -> list[str]:
    """std::terminate's two lines ('terminate called after throwing...', '  what():  ...') just before a fatal dump."""
    for i in range(len(lines) - 1, max(-1, len(lines) - 4), -1):
        if _TERMINATE in lines[i]:
            return lines[i:i + 2]
    return []


def terminate_what(lines: list[str]) -> str:
    """'gloo::EnforceNotMet: op.preamble.length <= op.nbytes. 1024 vs 1000. Received data size ...': the C++ exception
    that aborted the process, from std::terminate's lines before its fatal dump; "" when there are none."""
    got = _terminate_lines(lines)
    m = _WHAT.match(got[1]) if len(got) == 2 else None
    if not m:
        return ""
    cls = got[0].split(_TERMINATE, 1)[1].strip().strip("'")
    return f"{cls}: {m.group(1)}"


def _fatal_where(lines: list[str]) -> str:
    """'Fatal Python error: Segmentation fault in die at script.py:22' from a faulthandler dump: the innermost
    frame of the thread that crashed ("Current thread"), not of the other threads listed before it."""
    for i, ln in enumerate(lines):
        if _FATAL in ln:
            head = ln[ln.index(_FATAL):].strip()
            what = terminate_what(lines[:i])
            if what:  # "Aborted" says nothing: the C++ exception that called abort() does
                head = what
            frames = [m for m in (_FRAME.match(fr) for fr in _fatal_dump(lines[i:])[1:]) if m]
            # the innermost frame of the program itself, not of the library call that faulted for it
            mine = [m for m in frames if is_user_frame(Frame(m.group(3), m.group(1), int(m.group(2))))] or frames
            if mine:
                m = mine[0]
                return f"{head} in {m.group(3)} at {m.group(1).rsplit('/', 1)[-1]}:{m.group(2)}"
            return head
    return ""


def _delta(a: float, b: float) -> str:
    if math.isinf(a) or math.isinf(b):
        return "after it"
    d = max(0.0, a - b)
    return f"{delay_words(d)} after it"


def decide(ranks: list[RankEvidence], launcher_root: int | None = None, unseen: tuple[int, ...] = ()) -> Verdict | None:
    """The root cause and the fate of every other rank, or None when no rank failed on its own.

    launcher_root: the rank torchrun's own "Root Cause" names (it picks the first exit it saw, by the second);
    unseen: the world's ranks this ddptui does not watch (they run on other nodes): a peer that went away may be one.
    """
    bad = [e for e in ranks if ended_badly(e)]
    if not bad or own_exit_kinds(ranks) is not None:
        return None  # none, or ended by exit statuses of their own and what followed them: runners/evidence/own_exit.py
    first_death = min((_when(e) for e in bad if e.stopped_by is None and signal_of(e.returncode) != "SIGTERM"),
                      default=math.inf)
    kinds = {e.rank: kind(e, first_death <= _when(e) and not math.isinf(first_death)) for e in bad}
    by_kind = {k: [e for e in bad if kinds[e.rank] == k] for k in ("failed", "victim", "stopped", "never_started")}
    pool = by_kind["failed"] or by_kind["victim"]
    if not pool:
        return None  # only stopped ranks: the run was stopped (or its launcher died), no rank crashed
    rank_order = {k: i for i, k in enumerate(("failed", "victim", "stopped", "never_started"))}
    root = min(pool, key=lambda e: (_when(e), e.rank != launcher_root, rank_order[kinds[e.rank]], e.rank))
    if unseen and not by_kind["failed"]:
        return _peer_unseen(bad, kinds, unseen)
    t0 = _when(root)
    together = sorted(e.rank for e in by_kind["failed"]
                      if e is not root and _when(e) - t0 <= SIMULTANEOUS)
    later = [e for e in by_kind["failed"] if e is not root and e.rank not in together]
    victims = sorted([e.rank for e in later] + [e.rank for e in by_kind["victim"] if e is not root])
    stopped = [e for e in by_kind["stopped"] if e is not root]
    never = sorted(e.rank for e in by_kind["never_started"] if e is not root)

    what = how(root)
    text = f"rank {root.rank} failed first" + (" of the ranks seen here" if unseen else "")
    if root.exc:
        text += f" ({short_exit(root)}): {root.exc.get('type')}: {root.exc.get('msg')} at {root.exc.get('where')}"
    else:
        text += f": {how(root, evidence=True)}" + (f" at step {root.step}" if root.step is not None else "")
        fatal = _fatal_where(list(root.err_lines))
        last = last_output(root)
        if fatal:
            text += f": {fatal}"
        elif kinds[root.rank] == "victim":
            text += f": {victim_marker(root)} (its peer is not one of the ranks watched here)"
        elif root.returncode is not None and root.returncode > 0:
            text += " without a Python exception" + (f" (last output: {last!r})" if last else "")
        elif signal_of(root.returncode):  # its last words may say who sent it (a program that kills itself)
            text += ", no Python exception" + (f" (last output: {last!r})" if last else "")
    outcomes = {root.rank: ("failed", f"failed first ({what})")}
    parts = []
    if together:
        parts.append(f"{ranks_text(together)} failed at the same moment on {'its' if len(together) == 1 else 'their'} own")
        for r in together:
            e = next(x for x in bad if x.rank == r)
            outcomes[r] = ("failed", f"failed at the same moment as rank {root.rank} ({short_exit(e)})")
    for e in sorted(later + [x for x in by_kind["victim"] if x is not root], key=_when):
        m = victim_marker(e)
        cause = m if m else (f"{e.exc.get('type')}: {e.exc.get('msg')}"[:160] if e.exc else short_exit(e))
        parts.append(f"rank {e.rank} failed {_delta(e.died_at if e.died_at is not None else _when(e), t0)} ({cause})")
        outcomes[e.rank] = ("failed", f"failed after rank {root.rank} ({short_exit(e)}" + (f": {m})" if m else ")"))
    for who in sorted({e.stopped_by or "launcher" for e in stopped}):
        grp = [e for e in stopped if (e.stopped_by or "launcher") == who]
        sigs = sorted({sig for e in grp if (sig := signal_of(e.returncode)) is not None})
        by = _BY[who]
        parts.append(f"{ranks_text(sorted(e.rank for e in grp))} {by}" + (f" ({', '.join(sigs)})" if sigs else "")
                     + (" when the job was cancelled" if who == "slurm"
                        else f" when rank {root.rank} {'had failed' if who == 'ddptui' else 'died'}"))
        for e in grp:
            outcomes[e.rank] = ("killed", e.stopped_how or ended_by(who, root.rank))
    if never:
        parts.append(f"{ranks_text(never)} never started (stopped before {'its' if len(never) == 1 else 'their'} "
                     f"program ran)")
        for r in never:
            outcomes[r] = ("killed", "never started")
    if parts:
        text += "; " + "; ".join(parts)
    if launcher_root is not None and launcher_root != root.rank:
        text += f" (torchrun's Root Cause names rank {launcher_root}: the first exit it saw, by the second)"
    if unseen:
        text += f"; {unseen_words(unseen)}"
    return Verdict(text, root.rank, short_exit(root), tuple(together), tuple(victims),
                   tuple(sorted(e.rank for e in stopped)), tuple(never), tuple(excerpt(root)), outcomes)


def _peer_unseen(bad: list[RankEvidence], kinds: dict[int, str], unseen: tuple[int, ...]) -> Verdict:
    """Every rank seen here that failed did so because a peer went away, and peers run where this ddptui cannot see
    (other nodes): the cause is there, not here. The ranks here are its victims; none of them is the root cause."""
    victims = sorted((e for e in bad if kinds[e.rank] == "victim"), key=_when)
    first = victims[0]
    cause = f"{first.exc.get('type')}: {first.exc.get('msg')}"[:200] if first.exc else victim_marker(first)
    text = (f"{ranks_text([e.rank for e in victims], sort=False)} failed because a peer went away ({victim_marker(first)}); "
            f"{unseen_words(unseen)}: the cause is there (that node's ddptui or logs say what happened); "
            f"rank {first.rank}: {cause}")
    outcomes = {e.rank: ("failed", f"failed after an unseen peer went away ({short_exit(e)}: {victim_marker(e)})")
                for e in victims}
    stopped = [e for e in bad if kinds[e.rank] == "stopped"]
    for e in stopped:
        outcomes[e.rank] = ("killed", ended_by(e.stopped_by or "launcher"))
    never = sorted(e.rank for e in bad if kinds[e.rank] == "never_started")
    for r in never:
        outcomes[r] = ("killed", "never started")
    return Verdict(text, None, short_exit(first), (), tuple(e.rank for e in victims),
                   tuple(sorted(e.rank for e in stopped)), tuple(never), tuple(excerpt(first)), outcomes)
