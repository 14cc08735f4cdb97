"""Bench workload: 2 gloo ranks all_reduce a small tensor ALLREDUCE_N times; rank 0 prints the seconds per all_reduce
by its own clock (after a warm-up of 200), as `per_allreduce_s S`. What Flight Recorder's recording of each collective
costs shows here undiluted (run with and without TORCH_FR_BUFFER_SIZE)."""
import os
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
n = int(os.environ.get("ALLREDUCE_N", "5000"))
t = torch.ones(161)  # ddp_mlp's gradients: one bucket of 161 floats
for _ in range(200):
    dist.all_reduce(t)
t0 = time.perf_counter()
for _ in range(n):
    dist.all_reduce(t)
dt = (time.perf_counter() - t0) / n
if dist.get_rank() == 0:
    print(f"per_allreduce_s {dt:.9f}", flush=True)
dist.destroy_process_group()
