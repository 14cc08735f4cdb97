"""The live replica check in a rank: every N optimizer steps an exact per-parameter digest, one `@ddptui` line.

Called by the injected optimizer step post-hook (sitecustomize) after it counted the step. It adds no collective to
the program: each rank reports its own digests and the engine compares them (runners/evidence/replica.py).

Exact: any differing bit changes the digest. A CPU tensor's raw bytes go through blake2b (64-bit digest, no copy).
A tensor on a device (CUDA and the like) is digested where it is, as integers: its bytes viewed as integers of its
element size, sign-extended to int64, then two wrapping int64 sums, one plain and one weighted by odd position-dependent
weights; only those 16 bytes per parameter come back to the host, in one transfer for the whole model. A single
differing element always changes the weighted sum (an odd weight is invertible modulo 2**64); swapped or
compensating values (equal float sums) change it too unless the weights happen to cancel them, about 2**-32 odds.
An XLA tensor is read to the host and hashed there, as the end-of-run digests are: sums on the device would run a
graph of their own outside the program's step markers (the deadlock ddptui_turnstile keeps thread replicas from), and
a parameter with a graph pending is not read at all that step (ddptui_report.first_step_readable).
"""
from __future__ import annotations

import hashlib
import weakref
from typing import Any

import ddptui_report
import ddptui_scope

CHUNK = 1 << 20  # elements per weighted sum on a device: bounds the int64 temporaries (8 MB each)
_K1 = 0x9E3779B97F4A7C15 - (1 << 64)  # odd 64-bit constants (golden ratio, xxhash's prime), as signed int64
_K2 = 0xC2B2AE3D27D4EB4F - (1 << 64)
_INT_OF_SIZE: dict[int, Any] = {}
_positions: dict[Any, Any] = {}  # device -> arange(CHUNK) * _K1 (int64) on it
_due: dict[int | None, int] = {}  # rank -> the step of a check not taken yet (XLA: its weights were a pending graph)
# optimizer -> (its parameter count, [(name, tensor), ...])
_named: weakref.WeakKeyDictionary[Any, tuple[int, list]] = weakref.WeakKeyDictionary()


def every() -> int:
    """The engine's interval (0 when it set none: an older engine, or the check is off)."""
    value = ddptui_scope.GIVEN.get(ddptui_scope.REPLICA_EVERY)  # set by runners/launch/rankenv.py
    try:
        return max(0, int(value)) if value else 0
    except ValueError:
        return 0


def _words(t: Any, torch: Any) -> Any:
    """The tensor's bytes as a flat tensor of integers of its element size (uint8 for other sizes)."""
    flat = t.detach().reshape(-1)
    if not flat.is_contiguous():
        flat = flat.contiguous()
    if not _INT_OF_SIZE:
        _INT_OF_SIZE.update({1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64})
    size = flat.element_size()
    return flat.view(_INT_OF_SIZE[size] if size in _INT_OF_SIZE else torch.uint8)


def cpu_digest(t: Any, torch: Any) -> str:
    """blake2b-64 of a CPU tensor's raw bytes, read in place."""
    words = _words(t, torch)
    return hashlib.blake2b(words.numpy().data if words.numel() else b"", digest_size=8).hexdigest()


def _lanes(t: Any, torch: Any) -> Any:
    """int64[2] on the tensor's device: the plain and the weighted wrapping sums of its integer words."""
    x = _words(t, torch).to(torch.int64)
    dev = x.device
    base = _positions.get(dev)
    if base is None:
        base = _positions[dev] = torch.arange(CHUNK, dtype=torch.int64, device=dev) * _K1
    weighted = torch.zeros((), dtype=torch.int64, device=dev)
    for start in range(0, x.numel(), CHUNK):
        part = x[start:start + CHUNK]
        offset = (start * _K1 + _K2 + (1 << 63)) % (1 << 64) - (1 << 63)  # the chunk's place, as a signed int64
        w = (base[:part.numel()] + offset) | 1
        weighted = weighted + (part * w).sum()
    return torch.stack([x.sum(), weighted])


def device_digests(tensors: list, torch: Any) -> list[str]:
    """Digests of tensors on one device, computed there; one transfer of 16 bytes per tensor."""
    if not tensors:
        return []
    sums = torch.stack([_lanes(t, torch) for t in tensors]).cpu().tolist()
    return [f"{a & 0xFFFFFFFFFFFFFFFF:016x}{b & 0xFFFFFFFFFFFFFFFF:016x}" for a, b in sums]


def digests(tensors: list, torch: Any) -> list[str]:
    """One exact digest per tensor: blake2b of its bytes on the CPU (XLA's read there), the integer sums on another
    device (by device, in one transfer each)."""
    out: list[str | None] = [None] * len(tensors)
    by_device: dict[Any, list[int]] = {}
    for i, t in enumerate(tensors):
        if t.device.type == "cpu":
            out[i] = cpu_digest(t, torch)
        elif t.device.type == "xla":  # device data read as is: sums there would run a graph outside the step markers
            out[i] = cpu_digest(t.detach().cpu(), torch)
        else:
            by_device.setdefault(t.device, []).append(i)
    for idx in by_device.values():
        for i, d in zip(idx, device_digests([tensors[i] for i in idx], torch), strict=True):
            out[i] = d
    return out  # type: ignore[return-value]  # every slot filled above


def _named_params(optimizer: Any) -> list:
    """(name, tensor) of what the optimizer updates of the rank's replicated model (DDP-wrapped, or the XLA replica's:
    ddptui_report.named_params), none without one (a sharded model's parameters differ by design); kept while the
    optimizer's parameter count stays the same."""
    count = sum(len(g["params"]) for g in optimizer.param_groups)
    got = _named.get(optimizer)
    if got is None or got[0] != count:
        named, source = ddptui_report.named_params(optimizer)
        got = _named[optimizer] = (count, named if source in ("ddp", "xla") else [])
    return got[1]


def _plain(name: str) -> str:
    """DDP's `module.` prefix off, as the end-of-run digests name parameters (ddptui_report.digest_entry)."""
    return name[len("module."):] if name.startswith("module.") else name


def after_step(optimizer: Any, n: int) -> None:
    """The post-hook's part on the rank's optimizer step n that is due for a check: report its digests with the step
    (the hook tests n against the interval itself: nothing else runs on the other steps)."""
    import torch

    if not _report(optimizer, n, torch):  # XLA: the update is a pending graph until the program's step marker
        _due[ddptui_report.rank()] = n  # read before the next update


def before_step(optimizer: Any, args: Any, kwargs: Any) -> None:
    """An optimizer step pre-hook: a check `after_step` could not read is taken before the next update, the weights
    then being the due step's (XLA: materialised by the program's step marker in between)."""
    if not _due:
        return
    r = ddptui_report.rank()
    n = _due.get(r)
    if n is None:
        return
    import torch

    if _report(optimizer, n, torch):
        del _due[r]


def _report(optimizer: Any, step: int, torch: Any) -> bool:
    """Report the digests of what the optimizer updates, as of `step`; False when they cannot be read now."""
    named = _named_params(optimizer)
    if not named:
        return True  # no replicated model known to this rank: nothing to check
    tensors = [p for _, p in named]
    readable = ddptui_report.first_step_readable
    if readable is not None and not readable(tensors):
        return False  # XLA: reading them now would run the program's pending graph outside its own step
    ddptui_report.emit("replica_digest", step=step,
                       params=[[_plain(name), d] for (name, _), d in zip(named, digests(tensors, torch), strict=True)])
    return True
