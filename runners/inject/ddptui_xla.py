"""PyTorch/XLA thread replicas: per-thread ordinal, `@ddptui:N ` line tags, ordered syncs, exceptions and digests before XLA aborts.

Imported by sitecustomize when DDPTUI_XLA=1 (importing installs it; install() is idempotent). On PJRT CPU,
torch_xla.launch runs every replica as a thread of one worker process sharing one stdout, so:
- a post-import hook wraps torch_xla's per-thread entry (``_SpawnFn.__call__``), which calls ``bind(ordinal)``:
  the thread is named ``xla-rank-N`` (py-spy shows Python thread names; the OS name is left alone,
  since XLA's pool threads would inherit it);
- sys.stdout / sys.stderr are wrapped: a replica thread's text is buffered per line and written as
  ``@ddptui:N line`` in one write; other threads pass through untagged;
- an exception leaving a replica is printed (tagged) and reported (``exc``) at once: XLA aborts the whole
  worker ~10 s later when the other replicas' collectives time out, and the original text is lost otherwise;
- when the replica returns, the parameters of the first module it moved to the XLA device are digested
  (source ``xla``), unless the workload already called ``digests()``;
- with DDPTUI_XLA_TURNSTILE=1 (the xla runner sets it for PJRT CPU with more than one device) every
  step marker (torch_xla.sync, xm.mark_step, torch_xla.step, MpDeviceLoader) runs in ordinal order
  (ddptui_turnstile), so
  replica N reuses the executable replica N-1 compiled instead of compiling a twin whose collectives
  wait on a different rendezvous key (the deadlock in docs/xla.md). Unmodified scripts work with it.
"""
from __future__ import annotations

import os
import sys
import threading
import traceback

import ddptui_phase
import ddptui_postimport
import ddptui_report
from ddptui_turnstile import Turnstile

_HOOKED_MODULE = "torch_xla._internal.pjrt"
_local = threading.local()
_lock = threading.RLock()  # one writer at a time on the real streams
_installed = False


def ordinal() -> int | None:
    """The XLA ordinal of the calling replica thread, None elsewhere."""
    return getattr(_local, "ordinal", None)


# ---------------------------------------------------------------- reports (their "r" is the ordinal: install() sets
# ddptui_report's rank resolver)


def digests(model) -> None:
    """Report this replica's parameter digests (source "xla"); the automatic end-of-replica report is then skipped."""
    _local.digested = True
    ddptui_report.digests(model, source="xla")


def report_exception(exc: BaseException) -> None:
    """Print the traceback (tagged) and send an ``exc`` report, once per exception."""
    if getattr(exc, "_ddptui_reported", False):
        return
    try:
        exc._ddptui_reported = True  # type: ignore[attr-defined]  # our mark on the exception
    except Exception:
        pass
    sys.stderr.write("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
    sys.stderr.flush()
    ddptui_report.exception(type(exc), exc, exc.__traceback__)  # the same report as an uncaught exception's


# ---------------------------------------------------------------- binding a thread to its ordinal


def bind(index: int) -> None:
    """Make the calling thread replica ``index``: name it, tag its output, report hello once."""
    index = int(index)
    if ordinal() == index:
        return
    _local.ordinal = index
    name = f"xla-rank-{index}"
    threading.current_thread().name = name
    world = None
    try:
        import torch_xla.runtime as xr
        world = xr.world_size()
    except Exception:
        pass
    if world and world > 1 and os.environ.get("DDPTUI_XLA_TURNSTILE") == "1":
        _ORDER.enable(world)
    ddptui_report.hello(world=world, local=index)


def unbind() -> None:
    """The replica is done (returned or raised): release the turnstile, flush partial lines."""
    n = ordinal()
    if n is None:
        return
    _ORDER.turnstile.leave(n)
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, _TaggedStream):
            stream.flush_partial()
    _local.ordinal = None


# ---------------------------------------------------------------- ordered step markers


class _StepOrder:
    """Which replicas take their step markers through the turnstile: ordinals below `world`, once enabled."""

    def __init__(self):
        self.turnstile = Turnstile()
        self.world = 0
        self.lock = threading.Lock()

    def enable(self, world: int) -> None:
        with self.lock:
            if self.world == 0:
                self.world = world
                _patch_step_marker()

    @property
    def active(self) -> bool:
        return self.world > 1


_ORDER = _StepOrder()


def turnstile_active() -> bool:
    """True when every step marker is already ordered here (the built-in workloads then skip their own)."""
    return _ORDER.active


def _patch_step_marker() -> None:
    import torch_xla

    xlac = torch_xla._XLAC
    orig = xlac._xla_step_marker
    if getattr(orig, "_ddptui", False):
        return

    def _xla_step_marker(*args, **kwargs):
        n = ordinal()
        if n is None or n >= _ORDER.world:
            return orig(*args, **kwargs)
        _ORDER.turnstile.before(n)
        try:
            return orig(*args, **kwargs)
        finally:
            _ORDER.turnstile.after(n)

    _xla_step_marker._ddptui = True  # type: ignore[attr-defined]  # our mark: not patched twice
    xlac._xla_step_marker = _xla_step_marker


# ---------------------------------------------------------------- the per-thread entry of torch_xla.launch


def _remember_module(module, device) -> None:
    if ordinal() is None or getattr(device, "type", str(device).split(":")[0]) != "xla":
        return
    mods = getattr(_local, "modules", None)
    if mods is None:
        mods = _local.modules = []
    mods.append(module)
    if len(mods) == 1:
        ddptui_report.remember_model(module, "xla")  # names its first-step digest
        try:  # its samples per step; a module that takes no hooks (TorchScript) is only not counted
            module.register_forward_pre_hook(ddptui_report.count_forward, with_kwargs=True)
        except Exception:
            pass


def device_data_only(params) -> bool:
    """True when every XLA tensor among ``params`` is plain device data: reading it to the host runs no graph.

    The first-step digest must not execute a pending graph (e.g. an in-place update without a step marker): on
    thread replicas that would be a graph run outside the ordered step markers, the deadlock the turnstile avoids.
    """
    xla = [p for p in params if getattr(getattr(p, "device", None), "type", None) == "xla"]
    if not xla:
        return True
    import torch_xla

    text = torch_xla._XLAC._get_xla_tensors_text(xla)
    return all("xla::device_data()" in ln for ln in text.splitlines() if ln.lstrip().startswith("%"))


def _patch_module_to() -> None:
    import torch

    orig = torch.nn.Module.to
    if getattr(orig, "_ddptui", False):
        return

    def to(self, *args, **kwargs):
        out = orig(self, *args, **kwargs)
        if ordinal() is not None:
            dev = kwargs.get("device", args[0] if args else None)
            if dev is not None and not isinstance(dev, torch.dtype):
                _remember_module(self, torch.device(dev) if isinstance(dev, str) else dev)
        return out

    to._ddptui = True  # type: ignore[attr-defined]  # our mark: not patched twice
    torch.nn.Module.to = to  # type: ignore[method-assign]  # the patch


def _auto_digests() -> None:
    mods = getattr(_local, "modules", None) or []
    if getattr(_local, "digested", False) or not mods:
        return
    if ddptui_report.was_reported(mods[0]):
        return  # already reported (e.g. by the DDP wrapper's digest)
    model = mods[0]  # the first module moved to XLA in this replica: `model = Net().to('xla')`
    try:
        digests(model)
    except Exception as e:  # never turn a finished replica into a failed one
        sys.stderr.write(f"ddptui: parameter digests failed: {type(e).__name__}: {e}\n")


def _run_replica(call, spawn_fn):
    import torch_xla.runtime as xr

    bind(xr.global_ordinal())
    # Up to here the worker was importing torch_xla and starting PJRT ("spawning"); now the user's function builds
    # the model and XLA compiles the first step's graph, seconds to minutes before a replica prints anything.
    ddptui_phase.say(ddptui_phase.FIRST_STEP)
    _local.modules, _local.digested = [], False
    try:
        out = call(spawn_fn)
    except BaseException as e:
        report_exception(e)
        raise
    else:
        _auto_digests()
        return out
    finally:
        unbind()


def _patch_pjrt(mod) -> None:
    cls = getattr(mod, "_SpawnFn", None)
    if cls is None or getattr(cls.__call__, "_ddptui", False):
        return
    orig = cls.__call__

    def __call__(self):
        return _run_replica(orig, self)

    __call__._ddptui = True  # type: ignore[attr-defined]  # our mark: not patched twice
    cls.__call__ = __call__
    _patch_module_to()


# ---------------------------------------------------------------- tagged output


class _TaggedStream:
    """A text stream whose replica-thread lines come out as ``@ddptui:N line``, one write per chunk of lines."""

    def __init__(self, raw):
        self._raw = raw

    def write(self, s: str) -> int:
        n = ordinal()
        if n is None:
            with _lock:
                self._raw.write(s)
            return len(s)
        bufs = getattr(_local, "bufs", None)
        if bufs is None:
            bufs = _local.bufs = {}
        text = bufs.pop(id(self), "") + s
        head, sep, tail = text.rpartition("\n")
        if tail:
            bufs[id(self)] = tail
        if sep:
            out = "".join(f"@ddptui:{n} {line}\n" for line in head.split("\n"))
            with _lock:
                self._raw.write(out)
                self._raw.flush()
        return len(s)

    def flush_partial(self) -> None:
        bufs = getattr(_local, "bufs", None) or {}
        tail = bufs.pop(id(self), "")
        if tail:
            self.write(tail + "\n")

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        with _lock:
            self._raw.flush()

    def __getattr__(self, name):
        return getattr(self._raw, name)


def install() -> None:
    global _installed
    if _installed:
        return
    _installed = True
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, _TaggedStream):
            setattr(sys, name, _TaggedStream(stream))
    ddptui_report.set_rank_resolver(ordinal)  # its reports then carry the thread's ordinal as "r"
    ddptui_report.first_step_readable = device_data_only
    ddptui_postimport.when_imported(_HOOKED_MODULE, _patch_pjrt)  # never imports torch_xla itself


if os.environ.get("DDPTUI_XLA") == "1":
    install()
