"""What every built-in rank program needs: whole-line logging, failing with an exit code, integer knobs, a clean exit."""
from __future__ import annotations

import os
import sys
import time
from typing import NoReturn

RANK = os.environ.get("RANK", "?")
STAMP = False  # dist_smoke stamps every line with the time, to localise a stall


def log(msg: str, err: bool = False) -> None:
    # One write per line (print() is two under -u): ranks sharing a stdout must not tear each other's lines.
    stamp = ""
    if STAMP:
        t = time.time()
        stamp = "[" + time.strftime("%H:%M:%S", time.localtime(t)) + f".{int(t * 1000) % 1000:03d}] "
    stream = sys.stderr if err else sys.stdout
    stream.write(f"{stamp}[rank {RANK}] {msg}\n")
    stream.flush()


def fail(code: int, msg: str) -> NoReturn:
    log(msg, err=True)
    sys.exit(code)


def env_int(name: str, default: int | None) -> int:
    raw = os.environ.get(name, "")
    if raw.strip() == "" and default is not None:
        return default
    try:
        return int(raw)
    except ValueError:
        fail(4, f"{name}={raw!r} is not an integer" if raw else f"{name} is not set (launch with torchrun)")


def launch_env() -> tuple[int, int, int]:
    """(RANK, WORLD_SIZE, LOCAL_RANK) as torchrun or any env:// launcher exports them, MASTER_ADDR/PORT checked;
    anything missing ends the rank with exit 4 and one line saying what."""
    rank = env_int("RANK", None)
    world = env_int("WORLD_SIZE", None)
    local = env_int("LOCAL_RANK", 0)
    for name in ("MASTER_ADDR", "MASTER_PORT"):
        if not os.environ.get(name):
            fail(4, f"{name} is not set (launch with torchrun, or export the env:// variables)")
    return rank, world, local


def pick_device(torch) -> str:
    """DDP_DEVICE (cpu, cuda, auto) against what torch has; exit 4 with one line when it cannot be had."""
    want = os.environ.get("DDP_DEVICE", "auto").strip().lower() or "auto"
    if want == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if want == "cuda" and not torch.cuda.is_available():
        fail(4, "CUDA requested (DDP_DEVICE=cuda) but torch.cuda.is_available() is False")
    if want not in ("cpu", "cuda"):
        fail(4, f"DDP_DEVICE={want!r} is not supported here (cpu|cuda|auto)")
    return want


def pick_backend(device: str) -> str:
    """DDP_BACKEND, auto: nccl on cuda, else gloo."""
    b = os.environ.get("DDP_BACKEND", "auto").strip().lower() or "auto"
    return ("nccl" if device == "cuda" else "gloo") if b == "auto" else b


def exit_after_teardown(code: int) -> None:
    """End a rank whose work is done, reported and whose process group is destroyed, skipping C++ teardown.

    gloo threads still being torn down in static destructors abort the process now and then ("terminate
    called without an active exception", SIGABRT) after everything succeeded: about 1 in 100 two-rank runs
    here even with barrier + destroy. Progress still pending is written first; ddptui handles this abort
    in any other program (it calls it "completed, then died at exit").
    """
    try:
        import ddptui_report
        ddptui_report.flush_progress()
    except ImportError:
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(code)
