"""Shared by the XLA pattern workloads: the reference model, ordered syncs for PJRT CPU thread replicas, faults, reports."""
from __future__ import annotations

import math
import os
import sys
import threading

import torch
import torch.nn as nn
import torch_xla
import torch_xla.runtime as xr

import _faults

try:  # on the ranks' PYTHONPATH under ddptui; the workloads also run without it
    import ddptui_xla
except ImportError:
    ddptui_xla = None  # type: ignore[assignment]  # runs without ddptui too
try:
    import ddptui_report
except ImportError:
    ddptui_report = None  # type: ignore[assignment]  # runs without ddptui too


def _load_turnstile():
    """ddptui_turnstile: on the ranks' PYTHONPATH under ddptui; outside it, from the inject folder beside this one."""
    try:
        import ddptui_turnstile
        return ddptui_turnstile
    except ImportError:
        import importlib.util
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "inject", "ddptui_turnstile.py")
        spec = importlib.util.spec_from_file_location("ddptui_turnstile", path)
        assert spec is not None and spec.loader is not None  # a .py file's
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod


class SimpleModel(nn.Module):
    def __init__(self, dim=512):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(dim, 4 * dim),
            nn.GELU(),
            nn.Linear(4 * dim, dim),
        )

    def forward(self, x):
        return self.net(x)


def steps() -> int:
    return int(os.environ.get("DDP_STEPS") or 100)


def seed() -> int:
    return int(os.environ.get("DDP_SEED") or 0)


def thread_replicas() -> bool:
    """True on PJRT CPU: every replica is a thread of one worker process (collectives are in-process)."""
    return xr.device_type() == "CPU" and xr.world_size() > 1


# The workloads' own syncs in ordinal order, for when ddptui_xla does not order every step marker already.
_TURNSTILE = _load_turnstile().Turnstile()
_INIT = threading.Lock()
_cache_done: set[int] = set()


def ordered_sync(index: int) -> None:
    """torch_xla.sync(), in ordinal order when the replicas are threads (unless ddptui already orders every sync)."""
    if thread_replicas() and not (ddptui_xla is not None and ddptui_xla.turnstile_active()):
        with _TURNSTILE.turn(index):
            torch_xla.sync()
    else:
        torch_xla.sync()


def start(index: int) -> Replica:
    """Bind the thread to its ordinal, set up the per-process compile cache, parse DDP_FAULT."""
    if ddptui_xla is not None:
        ddptui_xla.bind(index)
    root = os.environ.get("DDPTUI_XLA_CACHE")
    if root:
        # The cache is per process, not per thread: the process's first ordinal names it, once.
        first = xr.global_ordinal() - xr.local_ordinal()
        with _INIT:
            if first not in _cache_done:
                _cache_done.add(first)
                xr.initialize_cache(os.path.join(root, str(first)), readonly=False)
    return Replica(index)


def make_model(index: int) -> nn.Module:
    """The reference model, initialised identically on every replica, then moved to the replica's device.

    Thread replicas share the global CPU RNG, and not only with each other: a DataLoader iterator draws
    its base seed from it in a loader thread. Seeding it and then initialising let that draw land inside
    another replica's init (its last bias came out different), so the init uses a private generator, with
    nn.Linear's default distribution (kaiming_uniform(a=sqrt(5)) and its bias: U(-1/sqrt(fan_in), +)).
    """
    model = SimpleModel()
    g = torch.Generator().manual_seed(seed())
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.Linear):
                bound = 1.0 / math.sqrt(m.in_features)
                m.weight.uniform_(-bound, bound, generator=g)
                m.bias.uniform_(-bound, bound, generator=g)
    torch_xla.manual_seed(seed() + 1 + index)  # each replica draws different data
    return model.to("xla")


class Replica:
    """Per-replica bookkeeping: fault injection, step lines, final report."""

    def __init__(self, index: int):
        self.index = index
        self.faults = _faults.Injector(_faults.from_env(index), index, self.log)
        self.first: float | None = None
        self.last: float | None = None
        self.count = 0

    def log(self, text: str) -> None:
        print(f"[rank {self.index}] {text}", flush=True)

    def step_done(self, step: int, loss) -> None:
        value = loss.item()
        self.count = step + 1
        self.first = value if self.first is None else self.first
        self.last = value
        self.log(f"step {step} loss {value:.4f}")
        if ddptui_report is not None:
            ddptui_report.loss(step + 1, value)

    def finish(self, model: nn.Module) -> None:
        """After the last step: the diverge fault, the summary line, the parameter digests."""
        self.faults.diverge(model)
        self.log(f"done: loss {self.first:.4f} -> {self.last:.4f} over {self.count} steps")
        if ddptui_xla is not None:
            ddptui_xla.digests(model)
        elif ddptui_report is not None:
            ddptui_report.digests(model, source="xla")

    def leave(self) -> None:
        _TURNSTILE.leave(self.index)


def run(body, index: int) -> None:
    """Run one replica's body(replica); a replica that leaves (done or raised) never blocks the turnstile."""
    rep = start(index)
    try:
        body(rep)
    except BaseException as e:
        if ddptui_xla is not None:
            ddptui_xla.report_exception(e)  # before XLA aborts the worker on the others' collective timeout
        else:
            import traceback
            traceback.print_exc()
            sys.stderr.flush()
        raise
    finally:
        rep.leave()
