"""Built-in DDP workload: trains one MLP on every rank and proves the replicas stayed byte-identical."""
from __future__ import annotations

import hashlib
import sys
from collections import Counter

import _faults
from _rankio import env_int, exit_after_teardown, fail, launch_env, log, pick_backend, pick_device

try:
    import ddptui_report
except ImportError:
    ddptui_report = None  # type: ignore[assignment]  # runs without ddptui too


def checksum(model) -> int:
    """A 63-bit hash of every parameter's bytes: equal only for byte-identical replicas."""
    import ctypes

    h = hashlib.blake2b(digest_size=8)
    for p in model.parameters():
        t = p.detach().cpu().contiguous()
        n = t.numel() * t.element_size()
        h.update(ctypes.string_at(t.data_ptr(), n) if n else b"")
    return int.from_bytes(h.digest(), "little") >> 1


def main() -> int:
    """Exit code: 0 ok, 2 loss did not drop, 3 replicas differ, 4 bad environment."""
    rank, world, _ = launch_env()
    faults = _faults.Injector(_faults.from_env(rank), rank, log)
    steps = env_int("DDP_STEPS", 50)
    seed = env_int("DDP_SEED", 0)
    if steps < 1:
        fail(4, f"DDP_STEPS={steps} must be >= 1")
    try:
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
    except ImportError as e:
        fail(4, f"cannot import torch: {e}")

    device = pick_device(torch)
    if device == "cuda":
        torch.cuda.set_device(rank % torch.cuda.device_count())
        dev = torch.device("cuda", torch.cuda.current_device())
    else:
        dev = torch.device("cpu")
    dist.init_process_group(backend=pick_backend(device), rank=rank, world_size=world)

    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1)
    ).to(dev)
    ddp = DDP(model, device_ids=[dev.index] if device == "cuda" else None)

    # The same task on every rank (fixed generator), each rank trains on its own slice.
    g = torch.Generator().manual_seed(1234 + seed)
    x = torch.randn(64 * world, 16, generator=g)
    y = x @ torch.randn(16, 1, generator=g) + 1.0
    x, y = x[rank::world].to(dev), y[rank::world].to(dev)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.02)
    loss_fn = torch.nn.MSELoss()
    every = max(1, steps // 50)

    first = None
    for s in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(ddp(x), y)
        faults.at_step(s)
        loss.backward()
        opt.step()
        value = float(loss.item())
        first = value if first is None else first
        if ddptui_report is not None:
            ddptui_report.loss(s + 1, value)
        if (s + 1) % every == 0 or s + 1 == steps:
            log(f"step {s + 1} loss {value:.4f}")

    faults.diverge(model)
    with torch.no_grad():
        final = float(loss_fn(model(x), y).item())
    losses = torch.tensor([first, final], dtype=torch.float64, device=dev)
    dist.all_reduce(losses)
    first_avg, final_avg = (losses / world).tolist()
    mine = torch.tensor([checksum(model)], dtype=torch.int64, device=dev)
    gathered = [torch.zeros_like(mine) for _ in range(world)]
    dist.all_gather(gathered, mine)
    sums = [int(t.item()) for t in gathered]
    if ddptui_report is not None:
        ddptui_report.digests(model)

    if rank == 0:
        log(f"loss: {first_avg:.4f} -> {final_avg:.4f} over {steps} steps")
    code, text = 0, "all ranks converged with identical replicas"
    if len(set(sums)) != 1:
        majority = Counter(sums).most_common(1)[0][0]
        odd = [r for r, c in enumerate(sums) if c != majority]
        code, text = 3, f"replicas differ: weight checksums {sums} (ranks {odd} differ from the majority)"
    elif not final_avg < first_avg:
        code, text = 2, f"loss did not drop: {first_avg:.4f} -> {final_avg:.4f}"
    if ddptui_report is not None:
        ddptui_report.verdict(code == 0, text)
    if rank == 0:
        if code == 0:
            log(text)
            sys.stdout.write("ddp_mlp_ok\n")
            sys.stdout.flush()
        else:
            log(text, err=True)
    # Without this barrier a rank sometimes dies at exit with SIGABRT (see the torchrun notes).
    dist.barrier()
    dist.destroy_process_group()
    return code


if __name__ == "__main__":
    exit_after_teardown(main())
