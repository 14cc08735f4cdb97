"""Structured `@ddptui {json}` reports from a rank to the dashboard, one write() per line."""
from __future__ import annotations

import hashlib
import json
import os
import socket
import sys
import traceback
import weakref
from typing import Any, Callable

_resolver: Callable[[], int | None] | None = None
# Models whose digests were reported explicitly: the automatic digest at exit skips them.
_reported: "weakref.WeakSet[Any]" = weakref.WeakSet()


def set_rank_resolver(fn: Callable[[], int | None] | None) -> None:
    """Install a function returning the calling code's rank (e.g. an XLA thread's ordinal), or None."""
    global _resolver
    _resolver = fn


def rank() -> int | None:
    if _resolver is not None:
        try:
            r = _resolver()
            if r is not None:
                return int(r)
        except Exception:
            pass
    try:
        return int(os.environ["RANK"])
    except (KeyError, ValueError):
        return None


def _env_int(name: str) -> int | None:
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


def emit(kind: str, **fields: Any) -> None:
    """Write one report line; never raises (a report must not break the program)."""
    try:
        body = {"k": kind, "r": fields.pop("r") if "r" in fields else rank()}
        body.update(fields)
        data = ("@ddptui " + json.dumps(body, separators=(",", ":"), default=str) + "\n").encode()
        try:
            # Text the program printed without a newline yet must not end up glued to our line.
            if sys.stdout is not None:
                sys.stdout.flush()
        except Exception:
            pass
        view = memoryview(data)
        while view:
            n = os.write(1, view)
            view = view[n:]
    except Exception:
        pass


def hello() -> None:
    emit("hello", world=_env_int("WORLD_SIZE"), local=_env_int("LOCAL_RANK"), pid=os.getpid(),
         host=socket.gethostname())


def _num(v: Any) -> Any:
    try:
        return float(v.item() if hasattr(v, "item") else v)
    except Exception:
        return None


def step(n: int, loss: Any = None) -> None:
    if loss is None:
        emit("step", step=int(n))
    else:
        emit("step", step=int(n), loss=_num(loss))


def loss(step: int, value: Any) -> None:
    emit("loss", step=int(step), loss=_num(value))


def verdict(ok: bool, text: str) -> None:
    emit("verdict", ok=bool(ok), text=str(text))


def _raw_bytes(t: Any) -> bytes:
    import ctypes

    t = t.detach().cpu().contiguous()
    n = t.numel() * t.element_size()
    return ctypes.string_at(t.data_ptr(), n) if n else b""


def param_digests(model: Any) -> list[list[Any]]:
    """[[name, blake2b-16 hex, shape, dtype], ...] in named_parameters() order, DDP's `module.` stripped."""
    out = []
    for name, p in model.named_parameters():
        if name.startswith("module."):
            name = name[len("module."):]
        h = hashlib.blake2b(_raw_bytes(p), digest_size=16).hexdigest()
        out.append([name, h, list(p.shape), str(p.dtype)])
    return out


def digests(model: Any, source: str = "explicit", r: int | None = None) -> None:
    try:
        params = param_digests(model)
    except Exception as e:  # a digest that cannot be taken is reported as such, not raised
        emit("digest", source=source, params=[], error=f"{type(e).__name__}: {e}",
             **({} if r is None else {"r": r}))
        return
    mark_reported(model)
    emit("digest", source=source, params=params, **({} if r is None else {"r": r}))


def mark_reported(model: Any) -> None:
    for m in (model, getattr(model, "module", None)):
        if m is not None:
            try:
                _reported.add(m)
            except TypeError:
                pass


def was_reported(model: Any) -> bool:
    try:
        return model in _reported
    except TypeError:
        return False


def exception(exc_type: Any, exc: Any, tb: Any) -> None:
    try:
        frames = traceback.extract_tb(tb) if tb is not None else []
        where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else ""
        lines = "".join(traceback.format_exception(exc_type, exc, tb)).splitlines()
        emit("exc", type=getattr(exc_type, "__name__", str(exc_type)), msg=str(exc), where=where,
             tb=lines[-15:])
    except Exception:
        pass
