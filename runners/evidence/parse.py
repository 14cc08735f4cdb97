"""Turning rank output lines into meaning: @ddptui reports, launcher prefixes, step and loss in common formats."""
from __future__ import annotations

import json
import re
from collections.abc import Callable

REPORT = "@ddptui "
TAG = "@ddptui:"

# torchrun's console prefixes: "[rank3]:" (torch.distributed's own tracebacks) and "[default3]:" (--tee, role+local rank)
# and mirage's "[3] " label on each line of a node's output when it runs several processes
_PREFIX = re.compile(r"\[(?:(?:rank|[A-Za-z_][\w-]*?)(\d+)\]:\s?|(\d+)\] )")
# srun --label's "N: " before each line of task N (space-padded to the widest task number: " 3: ", "12: ")
_LABEL = re.compile(r" *(\d+): ")
_NUM = r"([-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?|nan|inf)"
# "[rank 0] loss: 30.5666 -> 0.2634 over 50 steps" (a summary line, not a step)
_SUMMARY = re.compile(r"loss[:=]?\s*" + _NUM + r"\s*->\s*" + _NUM + r"\s*over\s*(\d+)\s*steps", re.I)
_LOSS = re.compile(r"\bloss\b\s*[:=]?\s*" + _NUM, re.I)
_STEP = re.compile(r"\b(?:step|iter(?:ation)?|it)\b\s*[:=#]?\s*(\d+)(?:\s*/\s*\d+)?", re.I)


def split_prefix(line: str) -> tuple[int | None, str]:
    """Rank of a launcher-stream line from its tag or prefix, and the text without it."""
    if line.startswith(TAG):
        return untag(line)
    if line.startswith("["):
        m = _PREFIX.match(line)
        if m:
            return int(m.group(1) or m.group(2)), line[m.end():]
    elif line[:1].isdigit() or line[:1] == " ":
        m = _LABEL.match(line)
        if m:
            return int(m.group(1)), line[m.end():]
    return None, line


def untag(line: str) -> tuple[int | None, str]:
    """Only the injected per-thread tag (lines in per-rank files never carry launcher prefixes)."""
    if line.startswith(TAG):
        head, _, text = line[len(TAG):].partition(" ")
        if head.isdigit():
            return int(head), text
    return None, line


# torch's line when the debug server ddptui starts in a rank listens (runners/inject/ddptui_fr.py): shown in the log,
# but ddptui's own doing, not a sign of the rank's life ("[rank0]:[W1203 ...] WorkerServer.cpp:113] [c10d] Server
# listening to UNIX /tmp/ddptui-0/1a2b3c4d/r0.sock")
OWN_SERVER_LINE = re.compile(r"WorkerServer\.cpp:\d+\] \[c10d\] Server listening to UNIX /tmp/ddptui-\d+/")


def is_own_server_line(line: str) -> bool:
    return "WorkerServer" in line and OWN_SERVER_LINE.search(line) is not None


def report(line: str) -> dict | None:
    """The JSON body of an `@ddptui {...}` line, or None (a torn or foreign line is just a log line)."""
    if not line.startswith(REPORT):
        return None
    try:
        d = json.loads(line[len(REPORT):])
    except ValueError:
        return None
    return d if isinstance(d, dict) and "k" in d else None


def unglue_report(line: str) -> tuple[str, dict | None]:
    """(text, report) of a report written by another thread of the rank while it was half-way through printing
    a line ("text@ddptui {...}"); (line, None) when the line holds no such report."""
    i = line.find(REPORT, 1)
    rep = report(line[i:]) if i > 0 else None
    return (line[:i], rep) if rep is not None else (line, None)


def has_marker(text: str) -> bool:
    """Whether a batch may hold a report or a tag: a memchr for '@' answers for almost every batch."""
    return "@" in text and "@ddptui" in text


def any_of(needles) -> Callable[[bytes], bool]:
    """A test "does any of these byte strings occur": one Aho-Corasick pass in Rust, else one scan per needle.

    Leftmost-first matching lets the automaton use its SIMD prefilter (about 10x faster than standard
    matching when nothing matches), and whether anything matches is the same under either semantics.
    """
    needles = [n if isinstance(n, bytes) else n.encode() for n in needles]
    try:
        from ahocorasick_rs import MATCHKIND_LEFTMOST_FIRST, BytesAhoCorasick
    except ImportError:
        return lambda data: any(n in data for n in needles)
    ac = BytesAhoCorasick(needles, matchkind=MATCHKIND_LEFTMOST_FIRST)
    return lambda data: bool(ac.find_matches_as_indexes(data))


_KEYWORDS = ("oss", "OSS", "tep", "ter")  # loss/LOSS, step, iter: nothing else can carry a step or a loss
_KEYWORD_SCAN = any_of(_KEYWORDS)


def may_have_step_or_loss(text: str) -> bool:
    """Cheap test over a whole batch before any line is parsed."""
    head = text[:512]  # training logs say it in their first line: answer without scanning the batch
    if any(k in head for k in _KEYWORDS):
        return True
    return _KEYWORD_SCAN(text.encode("utf-8", "replace"))


def step_loss(line: str) -> tuple[int | None, float | None, dict | None]:
    """(step, loss, summary) parsed from a plain log line; summary = {"first", "last", "steps"}."""
    low_hit = "oss" in line or "OSS" in line
    if not low_hit and "tep" not in line and "ter" not in line:
        return None, None, None
    if low_hit and "->" in line:
        m = _SUMMARY.search(line)
        if m:
            return None, None, {"first": float(m.group(1)), "last": float(m.group(2)), "steps": int(m.group(3))}
    loss = None
    if low_hit:
        m = _LOSS.search(line)
        if m:
            loss = float(m.group(1))
    step = None
    m = _STEP.search(line)
    if m:
        step = int(m.group(1))
    if loss is None and step is None:
        return None, None, None
    return step, loss, None
