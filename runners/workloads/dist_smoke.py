"""Built-in connectivity check: timestamped per-rank lines, one all_reduce and a barrier, then `dist_smoke_ok`."""
from __future__ import annotations

import os
import sys

import _faults
import _rankio
from _rankio import env_int, exit_after_teardown, fail, launch_env, log, pick_backend, pick_device

_rankio.STAMP = True


def main() -> int:
    """Exit code: 0 ok, 3 wrong all_reduce sum (a diverge fault), 4 bad environment."""
    rank, world, local = launch_env()
    faults = _faults.Injector(_faults.from_env(rank), rank, log)
    steps = env_int("DDP_STEPS", 5)
    log(f"start: world={world} local_rank={local} master={os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}")
    try:
        import torch
        import torch.distributed as dist
    except ImportError as e:
        fail(4, f"cannot import torch: {e}")

    want = pick_device(torch)
    if want == "cuda":
        torch.cuda.set_device(rank % torch.cuda.device_count())
        dev = torch.device("cuda", torch.cuda.current_device())
        log(f"current device = {dev.index} ({dev})")
    else:
        dev = torch.device("cpu")
        log("current device = cpu")
    backend = pick_backend(want)
    log(f"init_process_group(backend={backend}) ...")
    dist.init_process_group(backend=backend, rank=rank, world_size=world)
    log("init_process_group done")

    x = torch.ones(4, device=dev)
    for s in range(steps):
        faults.at_step(s)
        x = x * 0.5 + 1.0
        log(f"step {s + 1}/{steps}: local op ok (x[0] = {float(x[0]):.4f})")

    faults.at_step(steps)  # a fault aimed at step == DDP_STEPS strikes right before the all_reduce
    t = torch.tensor([float(rank + 1) + (0.5 if faults.wants_diverge() else 0.0)], device=dev)
    log(f"pre all_reduce: tensor = {float(t.item())}")
    dist.all_reduce(t)
    total = float(t.item())
    log(f"post all_reduce: tensor = {total}")
    expected = world * (world + 1) / 2
    log("barrier ...")
    dist.barrier()
    log("barrier done")
    dist.destroy_process_group()
    if total != expected:
        fail(3, f"all_reduce sum {total} != expected {expected}")
    if rank == 0:
        sys.stdout.write("dist_smoke_ok\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    exit_after_teardown(main())
