"""One instrumented gloo DDP rank (world 1) running ddp_mlp's model and step STEPS times; prints the CPU and wall
seconds per step by its own clock, as `per_step_s CPU WALL`: the live replica check's cost in the rank, undiluted by
the other rank and the engine that share the machine (bench/replica_cost.py runs it with and without the check)."""
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{os.environ['BENCH_PORT']}", rank=0, world_size=1)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
                            torch.nn.Linear(64, 1))
ddp = DDP(model)
x, y = torch.randn(64, 16), torch.randn(64, 1)
opt = torch.optim.SGD(ddp.parameters(), lr=0.02)
loss_fn = torch.nn.MSELoss()


def steps(n: int) -> None:
    for _ in range(n):
        opt.zero_grad(set_to_none=True)
        loss_fn(ddp(x), y).backward()
        opt.step()


steps(200)
n = int(os.environ.get("STEPS", "3000"))
c0, t0 = time.process_time(), time.perf_counter()
steps(n)
print(f"per_step_s {(time.process_time() - c0) / n:.9f} {(time.perf_counter() - t0) / n:.9f}", flush=True)
dist.destroy_process_group()
