"""A Progress line of events.jsonl read by its shape instead of decoded as JSON: a viewer of 1,024 ranks reads ~4,000
a second, and JSON decoding, building and type-checking each was half of its reading of the record."""
from __future__ import annotations

import re

from ..events import Progress

_INT = r"-?(?:0|[1-9][0-9]*)"
_NUM = rf"(?:{_INT}(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?|NaN|-?Infinity)"  # JSON's own grammar (and what json.dumps
# writes for the floats it has no number for): a line this takes decodes as json.loads would decode it
LINE_PATTERN = (  # groups: rank, step, loss, wall, source, the one loss point's step and loss or else the points,
    # samples, step_time; record.py's column reader finds every such line of a stretch with it
    rf'\{{"rank": ({_INT}), "step": ({_INT}|null), "loss": (null|{_NUM}), "wall": ({_NUM}), "source": "([a-z]*)", '
    rf'"losses": \[(?:\[({_INT}), ({_NUM})\]|((?:\[{_INT}, {_NUM}\](?:, (?=\[))?)*))\], '
    rf'"samples": ({_INT}|null), "step_time": (null|false|true|{_NUM}), "kind": "progress"\}}')
_LINE = re.compile(LINE_PATTERN)
_POINT = re.compile(rf"\[({_INT}), ({_NUM})\]")
_new = object.__new__
_WORDS = {"null": None, "false": False, "true": True}  # step_time: False in records older than it


def _number(text: str) -> int | float:
    """A JSON number as json.loads gives it: an int without a fraction or an exponent, else a float."""
    if "." in text or "e" in text or "E" in text or "N" in text or "I" in text:
        return float(text)
    return int(text)


def progress_line(line: str) -> Progress | None:
    """The Progress event of a line in the shape RunRecord writes (json.dumps of to_json, fields in order), the same
    event that decoding the line and checking it gives; None for any other line (decode it as any event)."""
    m = _LINE.fullmatch(line)
    if m is None:
        return None
    rank, step, loss, wall, source, one_step, one_loss, points, samples, step_time = m.groups()
    e = _new(Progress)  # every field is set here: no __init__ (a frozen dataclass's sets each through __setattr__)
    e.__dict__.update(
        rank=int(rank), step=None if step == "null" else int(step),
        loss=None if loss == "null" else _number(loss), wall=_number(wall), source=source,
        losses=([int(one_step), _number(one_loss)],) if one_step else
        tuple([int(s), _number(v)] for s, v in _POINT.findall(points)) if points else (),
        samples=None if samples == "null" else int(samples),
        step_time=_WORDS[step_time] if step_time in _WORDS else _number(step_time))
    return e
