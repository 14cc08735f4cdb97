"""Structured `@ddptui {json}` reports from a rank to the dashboard, one write() per line."""
from __future__ import annotations

import atexit
import collections
import hashlib
import json
import os
import socket
import sys
import threading
import time
import traceback
import weakref
from collections.abc import Callable
from typing import Any

import ddptui_scope
from ddptui_node import node_name  # noqa: F401 (hello's node; `ddptui attach` reads the same)

_resolver: Callable[[], int | None] | None = None
# Models whose digests were reported explicitly: the automatic digest at exit skips them.
_reported: weakref.WeakSet[Any] = weakref.WeakSet()


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
    return _env_int("RANK")


def _env_int(name: str) -> int | None:
    try:
        return int(ddptui_scope.launcher_var(os.environ, name))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def emit(kind: str, **fields: Any) -> None:
    """Write one report line now (after any progress still pending); never raises (a report must not break the program)."""
    try:
        body = {"k": kind, "r": fields.pop("r") if "r" in fields else rank()}
        body.update(fields)
        flush_progress()  # progress first: a verdict, digest or exception comes after the steps that led to it
        _write(body)
    except Exception:
        pass


def _write(body: dict) -> None:
    if _silent:
        return
    try:
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


_FROM_ENV: Any = object()


def hello(world: Any = _FROM_ENV, local: Any = _FROM_ENV) -> None:
    """The rank's first report; world size and local rank from the launcher's variables unless given (XLA replicas);
    the attempt: how often torchrun's agent restarted the worker group before starting this rank."""
    host = socket.gethostname()
    emit("hello", world=_env_int("WORLD_SIZE") if world is _FROM_ENV else world,
         local=_env_int("LOCAL_RANK") if local is _FROM_ENV else local, pid=os.getpid(), host=host,
         node=node_name(host=host), attempt=_env_int("TORCHELASTIC_RESTART_COUNT") or 0)


def _num(v: Any) -> Any:
    try:
        return float(v.item() if hasattr(v, "item") else v)
    except Exception:
        return None


# ---- progress: per-step calls only remember; lines are written at most FLUSH_EVERY apart ---------------------
#
# A JSON line per training step costs the rank far more than its few microseconds of encoding (measured
# 25-70 us per step inside a DDP loop), so steps and losses are kept in memory and written as one line per
# rank when FLUSH_EVERY seconds have passed since the last line. The calling thread writes them (at a step
# boundary, never inside one of its own prints); a background thread writes only what a rank that went
# quiet left pending, so a rank that hangs after step 10 has still reported step 10.

FLUSH_EVERY = 0.1
_losses: collections.deque[tuple[int | None, int, float | None]] = collections.deque()
_steps: dict[int | None, int] = {}  # rank -> newest step not yet written
_hook_counts: dict[int | None, int] = {}  # rank -> optimizer steps counted by the injected hook
# rank -> the newest step it reported itself. The hook's count is not reported while it is at most one step
# ahead of that: the step in flight (under XLA an optimizer step is only traced, and a rank that counted it
# may still wait for its peers in the step's sync). A rank that reports only every N steps still gets the
# hook's steps in between.
_explicit: dict[int | None, int] = {}
# rank -> (newest step, monotonic time it was counted), and the durations of its newest single steps since the
# last line: the engine times steps by the rank's own clock, not by when it happened to read the line
DT_KEEP = 64
_stamps: dict[int | None, tuple[int, float]] = {}
_dts: dict[int | None, collections.deque[tuple[int, float]]] = {}  # (step, its duration)
_last = {"written": 0.0, "called": 0.0}  # monotonic times of the last progress line and the last progress call
_flush_lock = threading.Lock()
_start_lock = threading.Lock()
_flusher: threading.Thread | None = None
_exiting = threading.Event()  # set when the interpreter starts to shut down: the thread leaves at once
if hasattr(threading, "_register_atexit"):  # runs before non-daemon threads are joined (CPython >= 3.9)
    threading._register_atexit(_exiting.set)


def _progress_added(r: int | None, n: int) -> None:
    if _silent:
        _losses.clear()
        _steps.clear()
        return
    now = time.monotonic()
    _last["called"] = now
    st = _stamps.get(r)
    if st is None or n > st[0]:
        if st is None:
            _dts[r] = collections.deque(maxlen=DT_KEEP)
        elif n == st[0] + 1:
            _dts[r].append((n, now - st[1]))
        _stamps[r] = (n, now)
    if now - _last["written"] >= FLUSH_EVERY:
        flush_progress()
    elif _flusher is None:
        _start_flusher()


def _start_flusher() -> None:
    global _flusher
    with _start_lock:  # thread replicas (XLA) may all make their first step at once
        if _flusher is not None:
            return
        # Not a daemon: it ends by itself when the main thread ends, before the interpreter finalizes. A daemon
        # thread left sleeping there made 4 of 90 two-rank gloo runs abort at exit ("terminate called without
        # an active exception"); this way 0 of 60, as without the thread.
        _flusher = threading.Thread(target=_flush_quiet, name="ddptui-report")
        _flusher.start()
    atexit.register(flush_progress)


def _flush_quiet() -> None:
    main = threading.main_thread()
    while main.is_alive() and not _exiting.wait(FLUSH_EVERY):
        if (_losses or _steps) and time.monotonic() - _last["called"] >= FLUSH_EVERY:
            flush_progress()


def flush_progress() -> None:
    """Write every step and loss not yet reported: one line per rank."""
    if not (_losses or _steps):
        return
    with _flush_lock:
        _last["written"] = time.monotonic()
        by_rank: dict[int | None, list] = {}
        while True:
            try:
                r, n, value = _losses.popleft()
            except IndexError:
                break
            by_rank.setdefault(r, []).append([n, value])
        lines: dict[int | None, list] = {r: [{"k": "loss", "r": r, "steps": pairs}] for r, pairs in by_rank.items()}
        for r in list(_steps):
            newest = _steps.pop(r, None)
            if newest is not None and not any(p[0] >= newest for p in by_rank.get(r, ())):
                lines.setdefault(r, []).append({"k": "step", "r": r, "step": newest})
        for r, bodies in lines.items():
            _stamp(bodies[-1], r)
            for body in bodies:
                _write(body)


def _stamp(body: dict, r: int | None) -> None:
    """The rank's clock on its last line of a flush: `at` [step, monotonic time, wall time], `dt` single-step
    durations."""
    st, d, dts, later = _stamps.get(r), _dts.get(r), [], []
    while d:  # popped one by one: the stepping thread may append meanwhile
        try:
            n, dt = d.popleft()
        except IndexError:
            break
        if st is None or n <= st[0]:
            dts.append(round(dt, 6))
        else:  # stepped after `st` was read: it belongs to the next line
            later.append((n, dt))
    for item in reversed(later):
        d.appendleft(item)  # type: ignore[union-attr]  # `later` holds what came out of d
    if st is not None:  # and its wall time: ranks on other nodes share no monotonic clock with the engine
        body["at"] = [st[0], round(st[1], 6), round(st[1] + time.time() - time.monotonic(), 6)]
        if dts:
            body["dt"] = dts
    b = _step_samples.get(r)
    if b:
        body["b"] = b


# ---- samples per step: what a training forward of the rank's model took, summed up to its optimizer step ---------
#
# A run says nothing of its batch size; its model's inputs do. As PyTorch Lightning's extract_batch_size does, a
# batch is the leading dimension of the first tensor among a forward's inputs. Only training forwards count (the
# model in train mode, autograd on): an evaluation pass is not training throughput. Summed between optimizer steps,
# gradient accumulation's micro-batches make one step's samples.

_forward_samples: dict[int | None, int] = {}  # rank -> samples through its model since its last optimizer step
_step_samples: dict[int | None, int] = {}  # rank -> the samples of its newest optimizer step that saw any


def batch_size_of(args: Any, kwargs: Any, tensor_type: type[Any]) -> int | None:
    """The leading dimension of the first tensor (a `tensor_type`, at least 1-d) among a forward's positional, then
    keyword inputs, looking into tuples, lists and dicts; None when there is none."""
    todo: list[tuple[Any, int]] = [(kwargs, 0), (args, 0)]  # a stack: args first
    while todo:
        x, depth = todo.pop()
        if isinstance(x, tensor_type):
            if x.dim() >= 1:
                return int(x.shape[0])
        elif depth < 4 and isinstance(x, (tuple, list, dict)):
            items = list(x.values()) if isinstance(x, dict) else list(x)
            todo.extend((v, depth + 1) for v in reversed(items))
    return None


def count_forward(module: Any, args: Any, kwargs: Any) -> None:
    """A forward pre-hook (with_kwargs) on the rank's model: a training forward's batch joins its step's samples."""
    try:
        import torch

        # Under torch.compile the hook is traced into the model's graph: a count there would make it a guard and
        # recompile the model every step (measured: 3 graphs for 3 calls). Within a torch.compile wrapper's call
        # (also where dynamo ran the model eagerly after all) the wrapper's own hook counted the batch.
        if torch.compiler.is_compiling() or _in_compiled_module():
            return
        _count(module, args, kwargs, torch)
    except Exception:
        pass


def count_compiled_forward(module: Any, args: Any, kwargs: Any) -> None:
    """count_forward on a torch.compile wrapper (OptimizedModule) of a DDP model: its hooks run before the compiled
    call, outside the graph; the training mode is the wrapped model's."""
    try:
        import torch

        if not torch.compiler.is_compiling():
            _count(getattr(module, "_orig_mod", module), args, kwargs, torch)
    except Exception:
        pass


def _in_compiled_module() -> bool:
    frame = sys.modules.get("torch._dynamo.eval_frame")  # never imported for this: a program may not compile at all
    is_in = getattr(frame, "_is_in_optimized_module", None)
    return bool(is_in and is_in())


def _count(module: Any, args: Any, kwargs: Any, torch: Any) -> None:
    if module.training and torch.is_grad_enabled():
        n = batch_size_of(args, kwargs, torch.Tensor)
        if n:
            r = rank()
            _forward_samples[r] = _forward_samples.get(r, 0) + n


_silent = False


def silence() -> None:
    """This process is not the rank (sitecustomize calls it in a rank's fork child): no reports, no thread."""
    global _silent
    _silent = True


def _after_fork_in_child() -> None:
    # the parent's thread did not come along, and a lock it held would never be released
    global _flush_lock, _start_lock, _flusher
    _flush_lock, _start_lock, _flusher = threading.Lock(), threading.Lock(), None
    _losses.clear()
    _steps.clear()
    _hook_counts.clear()
    _explicit.clear()
    _stamps.clear()
    _dts.clear()
    _forward_samples.clear()
    _step_samples.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def step(n: int, loss: Any = None) -> None:
    """Report step n (and its loss); written within FLUSH_EVERY seconds."""
    if loss is not None:
        _add_loss(int(n), loss)
        return
    r, n = rank(), int(n)
    _explicit[r] = _steps[r] = n
    _progress_added(r, n)


def loss(step: int, value: Any) -> None:
    """Report the loss of a step (a float, or a 0-d tensor read now); written within FLUSH_EVERY seconds."""
    _add_loss(int(step), value)


def _add_loss(n: int, value: Any) -> None:
    r = rank()
    _explicit[r] = n
    _losses.append((r, n, _num(value)))
    _progress_added(r, n)


def count_step() -> int:
    """One optimizer step of the calling rank (the injected step hook): counted now, written within FLUSH_EVERY;
    returns the rank's count so far."""
    r = rank()
    seen = _forward_samples.pop(r, 0)
    if seen:  # a second optimizer in the same step saw no forward of its own: the first one's count stands
        _step_samples[r] = seen
    n = _hook_counts[r] = _hook_counts.get(r, 0) + 1
    mine = _explicit.get(r)
    if mine is None or n > mine + 1:
        _steps[r] = n
        _progress_added(r, n)
    return n


def verdict(ok: bool, text: str) -> None:
    emit("verdict", ok=bool(ok), text=str(text))


def _raw_bytes(t: Any) -> bytes:
    import ctypes

    t = t.detach().cpu().contiguous()
    n = t.numel() * t.element_size()
    return ctypes.string_at(t.data_ptr(), n) if n else b""


def digest_entry(name: str, p: Any) -> list[Any]:
    """[name, blake2b-16 hex, shape, dtype] of one parameter: the one spelling every path reports (DDP, XLA, first step).

    DDP's `module.` prefix is stripped (ranks compare names whether or not they wrapped the model); the dtype is
    str(tensor.dtype), e.g. "torch.float32".
    """
    if name.startswith("module."):
        name = name[len("module."):]
    return [name, hashlib.blake2b(_raw_bytes(p), digest_size=16).hexdigest(), list(p.shape), str(p.dtype)]


def param_digests(model: Any) -> list[list[Any]]:
    """[[name, blake2b-16 hex, shape, dtype], ...] in named_parameters() order (see digest_entry)."""
    return [digest_entry(name, p) for name, p in model.named_parameters()]


def digests(model: Any, source: str = "explicit", r: int | None = None) -> None:
    try:
        params = param_digests(model)
    except Exception as e:  # a digest that cannot be taken is reported as such, not raised
        emit("digest", source=source, params=[], error=f"{type(e).__name__}: {e}",
             **({} if r is None else {"r": r}))
        return
    mark_reported(model)
    emit("digest", source=source, params=params, **({} if r is None else {"r": r}))


# ---- digests at the first optimizer step: replicas that differed from the start vs. replicas that drifted ------
#
# Taken by a global optimizer step PRE-hook, before the first update: the weights each rank starts training from
# (after DDP's broadcast, if any). Compared with the digests at the end, the engine tells "differed from the first
# step" (no seed / no broadcast / overwritten after wrapping) from "drifted apart during training".

_models: dict[int | None, tuple[Any, str]] = {}  # rank -> (weakref to its model, source: "ddp" | "xla")
_first_done: set[int | None] = set()
_first_over = [False]  # one rank per process and it had its first step: the hook returns at once
# ddptui_xla: returns False when reading the parameters now would execute a pending graph (not plain device data)
first_step_readable: Callable[[list], bool] | None = None


def remember_model(model: Any, source: str) -> None:
    """The calling rank's model, for naming its first-step digest (a DDP-wrapped model wins over an earlier one)."""
    try:
        r = rank()
        if r not in _models or (source == "ddp" and _models[r][1] != "ddp"):
            _models[r] = (weakref.ref(model), source)
    except Exception:
        pass


def watch_first_step(optim_mod: Any) -> Any:
    """Register the global step pre-hook that digests each rank's parameters before its first optimizer step."""
    return optim_mod.register_optimizer_step_pre_hook(_before_step)


def _before_step(optimizer: Any, args: Any, kwargs: Any) -> None:
    # Never removes itself: torch is iterating over the global pre-hooks right now, and a later one would see
    # the dict mutated. Once done it costs a list lookup per step.
    if _first_over[0]:
        return
    r = rank()
    if r in _first_done:
        return
    _first_done.add(r)
    _first_over[0] = _resolver is None  # thread replicas (XLA) each have their own first step
    try:
        first_step_digests(optimizer, r)
    except Exception:
        pass


def named_params(optimizer: Any, r: int | None = None) -> tuple[list[tuple[str, Any]], str]:
    """([(name, tensor), ...], source) of the parameters the optimizer updates, named by the rank's model where it is
    known (source "ddp" | "xla"), else by their place in its param_groups (source "optimizer")."""
    params = [p for g in optimizer.param_groups for p in g["params"]]
    ref, source = _models.get(rank() if r is None else r, (None, "optimizer"))
    model = ref() if ref is not None else None
    named: list[tuple[str, Any]]
    if model is not None:
        mine = {id(p) for p in params}
        named = [(n, p) for n, p in model.named_parameters() if id(p) in mine]
    else:
        named, source = [], "optimizer"
    if not named:
        named = [(f"param_groups[{gi}][{i}]", p) for gi, g in enumerate(optimizer.param_groups)
                 for i, p in enumerate(g["params"])]
    return named, source


def first_step_digests(optimizer: Any, r: int | None = None) -> None:
    """Report the parameters the optimizer is about to update, named by the rank's model where it is known."""
    named, source = named_params(optimizer, r)
    if first_step_readable is not None and not first_step_readable([p for _, p in named]):
        return  # reading them would run the program's pending graph outside its own step: leave it alone
    out = [digest_entry(name, p) for name, p in named]
    # its own kind: readers of `digest` reports (the end-of-run weights) never mistake it for those
    emit("first_digest", source=source, params=out, **({} if r is None else {"r": r}))


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
