"""How rank_conditional_barrier/ was recorded (by hand, not by the tests): each rank starts torch's debug server, rank 0
alone calls barrier() after three all_reduces; 10 s into the hang every rank's dump was asked over its socket, as
ddptui does:
    TORCH_FR_BUFFER_SIZE=2000 torchrun --standalone --nproc_per_node=2 rank_conditional_barrier.py
    curl --unix-socket /tmp/fr_socket/r0.sock -X POST http://localhost/handler/fr_trace_json > rank_conditional_barrier/rank_0.json
(the files were re-indented with json.dump(indent=1); torch 2.13.0+cpu, gloo)."""
import os
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
r = dist.get_rank()
os.makedirs("/tmp/fr_socket", exist_ok=True)
srv = torch._C._distributed_c10d._WorkerServer(f"/tmp/fr_socket/r{r}.sock")
for i in range(3):
    dist.all_reduce(torch.ones(18))
if r == 0:
    dist.barrier()
dist.all_reduce(torch.ones(18))
time.sleep(1000)
