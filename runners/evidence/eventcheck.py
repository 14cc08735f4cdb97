"""Checks a record's decoded events against their dataclass field types, so replay reports a malformed line instead of
handing a front end a value it would crash on."""
from __future__ import annotations

import functools
import types
import typing
from collections.abc import Callable
from dataclasses import fields
from typing import Any

from .. import events as ev

_NUM = (int, float)
# What the front ends read from RunFinished.summary (a dict[str, Any] to the dataclass): key -> accepted types.
_SUMMARY = {"profile": (str, type(None)), "runner": (str, type(None)), "status": (str,), "run_dir": (str, type(None)),
            "world_size": (int, type(None)), "unseen": (list, type(None)), "duration_s": _NUM, "ranks": (dict,), "replica": (dict, type(None)),
            "divergence": (dict, type(None)), "replica_checks": (dict, type(None)),
            "hang": (dict, type(None)), "slow": (dict, type(None)), "crash": (dict, type(None)),
            "own_exit": (dict, type(None)), "hints": (list, type(None))}
_SUMMARY_RANK = {"status": (str, type(None)), "outcome": (str, type(None)), "returncode": (int, type(None)),
                 "signal": (str, type(None)), "steps": (int, type(None)), "first_loss": _NUM + (type(None),),
                 "last_loss": _NUM + (type(None),), "workload_loss": (dict, type(None)),
                 "step_time_s": _NUM + (type(None),)}


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _name(tp) -> str:
    if typing.get_args(tp) or not isinstance(tp, type):
        return str(tp).replace("typing.", "")
    return tp.__name__


_SCALARS: dict[type, tuple[type, ...]] = {type(None): (type(None),), bool: (bool,), int: (int,), float: _NUM, str: (str,)}


def _always(value) -> bool:
    return True


@functools.cache
def _check(tp) -> Callable[[Any], bool]:  # noqa: C901 - one branch per kind of annotation
    """The test of one annotation, built once (a live record's follower checks thousands of events a second)."""
    if tp is Any:
        return _always
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    accepted = _scalar_set(tp)
    if accepted is not None:  # int | None, float, str...: one isinstance (a bool is no int or float)
        if bool in accepted:
            return lambda v: isinstance(v, accepted)
        return lambda v: isinstance(v, accepted) and not isinstance(v, bool)
    if origin in (typing.Union, types.UnionType):
        parts = tuple(_check(a) for a in args)
        return lambda v: any(p(v) for p in parts)
    if origin is tuple or tp is tuple:  # JSON nests tuples as lists
        if len(args) == 2 and args[1] is Ellipsis:
            each = _check(args[0])
            return lambda v: isinstance(v, (tuple, list)) and all(each(x) for x in v)
        if not args:
            return lambda v: isinstance(v, (tuple, list))
        parts = tuple(_check(a) for a in args)
        return lambda v: (isinstance(v, (tuple, list)) and len(v) == len(parts)
                          and all(p(x) for p, x in zip(parts, v, strict=True)))
    if origin is list or tp is list:
        if not args:
            return lambda v: isinstance(v, list)
        each = _check(args[0])
        return lambda v: isinstance(v, list) and all(each(x) for x in v)
    if origin is dict or tp is dict:
        if not args:
            return lambda v: isinstance(v, dict)
        key, val = _check(args[0]), _check(args[1])
        return lambda v: isinstance(v, dict) and all(key(k) and val(x) for k, x in v.items())
    if isinstance(tp, type):
        return lambda v: isinstance(v, tp)
    return _always


@functools.cache
def _field_checks(cls: type) -> tuple[tuple[str, Any, Callable[[Any], bool]], ...]:
    """(name, annotation, its test) of each field of an event class."""
    hints = _hints(cls)
    return tuple((f.name, hints[f.name], _check(hints[f.name])) for f in fields(cls))


@functools.cache
def _fits(cls: type) -> Callable[[Any], bool]:
    """Every field test of an event class in one function, a scalar's inline (a viewer of 1,024 ranks checks 4,000
    events a second: a call per field was a quarter of its reading); False sends problem() to say which failed."""
    lines = ["def fits(e):", "    d = e.__dict__"]
    checks: list[Callable[[Any], bool]] = []
    env: dict[str, Any] = {"checks": checks}
    for i, (name, tp, ok) in enumerate(_field_checks(cls)):
        lines.append(f"    v = d[{name!r}]")
        scalars = _scalar_set(tp)
        if scalars is None:
            checks.append(ok)
            lines.append(f"    if not checks[{len(checks) - 1}](v): return False")
        else:
            env[f"t{i}"] = scalars
            no_bool = "" if bool in scalars else " or v.__class__ is bool"
            lines.append(f"    if not isinstance(v, t{i}){no_bool}: return False")
    lines.append("    return True")
    exec("\n".join(lines), env)  # noqa: S102 - built from the dataclass's own field names, as dataclasses does
    return env["fits"]


def _scalar_set(tp) -> tuple[type, ...] | None:
    """The types an annotation of scalars accepts (int | None, float, str...), or None for any other annotation."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    scalars = args if origin in (typing.Union, types.UnionType) else (tp,)
    if not all(a in _SCALARS for a in scalars):
        return None
    return tuple({t for a in scalars for t in _SCALARS[a]})


def _loss_points(value) -> bool:
    for p in value:
        if not (isinstance(p, (list, tuple)) and len(p) == 2):
            return False
        step, loss = p
        if not ((step is None or isinstance(step, int) and step.__class__ is not bool)
                and isinstance(loss, _NUM) and loss.__class__ is not bool):
            return False
    return True


def _summary_problem(s: dict) -> str | None:
    for key, types_ in _SUMMARY.items():
        if key in s and not isinstance(s[key], types_):
            return f"summary.{key}: expected {' | '.join(t.__name__ for t in types_)}, got {type(s[key]).__name__}"
    for part in ("replica", "divergence", "hang", "slow", "crash", "own_exit"):
        if isinstance(s.get(part), dict) and not isinstance(s[part].get("text"), str):
            return f"summary.{part}.text: expected str"
    outcomes = (s.get("crash") or {}).get("outcomes") if isinstance(s.get("crash"), dict) else None
    if outcomes is not None and not (isinstance(outcomes, dict) and all(isinstance(w, str) for w in outcomes.values())):
        return "summary.crash.outcomes: expected {rank: str, ...}"
    sampled = (s.get("slow") or {}).get("verdict") if isinstance(s.get("slow"), dict) else None
    if sampled is not None and not (isinstance(sampled, dict) and isinstance(sampled.get("text"), str)):
        return "summary.slow.verdict: expected {\"text\": str, ...}"
    for h in s.get("hints") or []:
        if not (isinstance(h, dict) and isinstance(h.get("title"), str) and isinstance(h.get("fix"), str)):
            return "summary.hints: expected [{\"title\": str, \"fix\": str, ...}, ...]"
    for r, info in (s.get("ranks") or {}).items():
        if not str(r).lstrip("-").isdigit():
            return f"summary.ranks: expected rank numbers as keys, got {r!r:.20}"
        if not isinstance(info, dict):
            return f"summary.ranks.{r}: expected dict, got {type(info).__name__}"
        for key, types_ in _SUMMARY_RANK.items():
            if key in info and not isinstance(info[key], types_):
                return f"summary.ranks.{r}.{key}: expected {' | '.join(t.__name__ for t in types_)}, " \
                       f"got {type(info[key]).__name__}"
    return None


def problem(e: ev.Event) -> str | None:
    """What is wrong with a decoded event ("kind.field: expected T, got V"), or None when every field fits."""
    if not _fits(type(e))(e):  # type: ignore[arg-type]  # a class is hashable (mypy: Event's __hash__)
        for name, tp, ok in _field_checks(type(e)):  # type: ignore[arg-type]
            value = getattr(e, name)
            if not ok(value):
                return f"{e.kind}.{name}: expected {_name(tp)}, got {type(value).__name__} {value!r:.40}"
    if isinstance(e, ev.Progress) and not _loss_points(e.losses):
        return f"{e.kind}.losses: expected [[step, loss], ...], got {e.losses!r:.40}"
    if isinstance(e, ev.RunFinished):
        return _summary_problem(e.summary)
    return None


# plan.json (runners/launch/plan.py LaunchPlan.to_json): key -> accepted types, and each process's
_PLAN = {"runner": (str,), "world_size": (int,), "procs": (list,), "sources": (list,), "notes": (list,),
         "job": (dict, type(None))}
_PLAN_PROC = {"name": (str,), "argv": (list,), "env": (dict,), "cwd": (str,), "ranks": (list,), "stdout": (str,),
              "stderr": (str,)}


def _fields_problem(d, want: dict, what: str) -> str | None:
    if not isinstance(d, dict):
        return f"expected a JSON object, got {type(d).__name__}"
    for key, types_ in want.items():
        if key not in d:
            return f"{what}{key}: missing"
        if not isinstance(d[key], types_) or isinstance(d[key], bool):
            return f"{what}{key}: expected {' | '.join(t.__name__ for t in types_)}, got {type(d[key]).__name__}"
    return None


def record_file_problem(name: str, d) -> str | None:
    """What is wrong with a decoded summary.json or plan.json of a record, or None when the front ends can read it."""
    if name == "summary.json":
        return _fields_problem(d, {"status": (str,)}, "") or _summary_problem(d)
    why = _fields_problem(d, _PLAN, "")
    if why is None:
        for i, proc in enumerate(d["procs"]):
            why = _fields_problem(proc, _PLAN_PROC, f"procs[{i}].")
            if why:
                break
    return why
