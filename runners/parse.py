"""Turning rank output lines into meaning: @ddptui reports, launcher prefixes, step and loss in common formats."""
from __future__ import annotations

import json
import re

REPORT = "@ddptui "
TAG = "@ddptui:"

# torchrun's console prefixes: "[rank3]:" (torch.distributed's own tracebacks) and "[default3]:" (--tee, role+local rank)
# and mirage's "[3] " label on each line of a node's output when it runs several processes
_PREFIX = re.compile(r"\[(?:(?:rank|[A-Za-z_][\w-]*?)(\d+)\]:\s?|(\d+)\] )")
_NUM = r"([-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?|nan|inf)"
# "[rank 0] loss: 30.5666 -> 0.2634 over 50 steps" (a summary line, not a step)
_SUMMARY = re.compile(r"loss[:=]?\s*" + _NUM + r"\s*->\s*" + _NUM + r"\s*over\s*(\d+)\s*steps", re.I)
_LOSS = re.compile(r"\bloss\b\s*[:=]?\s*" + _NUM, re.I)
_STEP = re.compile(r"\b(?:step|iter(?:ation)?|it)\b\s*[:=#]?\s*(\d+)(?:\s*/\s*\d+)?", re.I)


def split_prefix(line: str) -> tuple[int | None, str]:
    """Rank of a launcher-stream line from its tag or prefix, and the text without it."""
    if line.startswith(TAG):
        head, _, text = line[len(TAG):].partition(" ")
        if head.isdigit():
            return int(head), text
        return None, line
    if line.startswith("["):
        m = _PREFIX.match(line)
        if m:
            return int(m.group(1) or m.group(2)), line[m.end():]
    return None, line


def untag(line: str) -> tuple[int | None, str]:
    """Only the injected per-thread tag (lines in per-rank files never carry launcher prefixes)."""
    if line.startswith(TAG):
        head, _, text = line[len(TAG):].partition(" ")
        if head.isdigit():
            return int(head), text
    return None, line


def report(line: str) -> dict | None:
    """The JSON body of an `@ddptui {...}` line, or None (a torn or foreign line is just a log line)."""
    if not line.startswith(REPORT):
        return None
    try:
        d = json.loads(line[len(REPORT):])
    except ValueError:
        return None
    return d if isinstance(d, dict) and "k" in d else None


_KEYWORDS = ("oss", "OSS", "tep", "ter")  # loss/LOSS, step, iter: nothing else can carry a step or a loss
try:
    from ahocorasick_rs import BytesAhoCorasick
    _KEYWORD_SCAN = BytesAhoCorasick([k.encode() for k in _KEYWORDS])
except ImportError:  # the plain scans below still answer, four passes instead of one
    _KEYWORD_SCAN = None


def may_have_step_or_loss(text: str) -> bool:
    """Cheap test over a whole batch before any line is parsed."""
    head = text[:512]  # training logs say it in their first line: answer without scanning the batch
    if any(k in head for k in _KEYWORDS):
        return True
    if _KEYWORD_SCAN is not None:
        return bool(_KEYWORD_SCAN.find_matches_as_indexes(text.encode("utf-8", "replace"), overlapping=False))
    return any(k in text for k in _KEYWORDS)


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
