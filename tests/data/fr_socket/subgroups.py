"""How subgroups/ was recorded (as rank_conditional_barrier.py says, with --nproc_per_node=4): groups [0, 1, 2] (no
description) and [1, 2] ("pair"); rank 2 skips the [0, 1, 2] all_reduce that ranks 0 and 1 entered, rank 3 is in
neither. gloo's pg_config does not say these groups' members (it is keyed '' with ranks '[]' or the world)."""
import os
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
r = dist.get_rank()
os.makedirs("/tmp/fr_socket", exist_ok=True)
srv = torch._C._distributed_c10d._WorkerServer(f"/tmp/fr_socket/r{r}.sock")
g = dist.new_group([0, 1, 2])
g2 = dist.new_group([1, 2], group_desc="pair")
dist.all_reduce(torch.ones(18))
if r in (1, 2):
    dist.all_reduce(torch.ones(4), group=g2)
if r < 3:
    if r != 2:
        dist.all_reduce(torch.ones(5), group=g)
time.sleep(1000)
