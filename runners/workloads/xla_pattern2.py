"""Reference pattern 2 (PyTorch DDP with the XLA process group), made to run on PJRT CPU thread replicas too."""
import threading

import torch
import torch.distributed as dist
import torch.nn as nn
import torch_xla
import torch_xla.distributed.xla_backend  # noqa: F401  (registers the "xla" backend)
import torch_xla.runtime as xr
from torch.nn.parallel import DistributedDataParallel as DDP

import xla_common as xc

_PG = threading.Lock()


class _NoRebuild:
    """DDP's reducer, minus the bucket rebuild after step 1 (a collective of its own that thread replicas garble)."""

    def __init__(self, reducer):
        self._reducer = reducer

    def _rebuild_buckets(self):
        return False

    def __getattr__(self, name):
        return getattr(self._reducer, name)


def _mp_fn(rank):
    xc.run(lambda rep: _train(rep, rank), rank)


def _train(rep, rank):
    threads = xc.thread_replicas()
    # Rank and world size inferred from XLA device runtime. The default process group is per process,
    # so thread replicas share one (its get_rank() is not the thread's ordinal): create it once.
    with _PG:
        if not dist.is_initialized():
            dist.init_process_group("xla", init_method='xla://')

    model = xc.make_model(rank)
    if threads:
        # PJRT CPU thread replicas: gradient_as_bucket_view=True gave wrong gradients (neither local
        # nor mean) and the init-time broadcast and the step-1 bucket rebuild are collectives the
        # threads garble; the replicas start identical anyway (same seed). See docs/xla.md.
        ddp_model = DDP(model, gradient_as_bucket_view=False, init_sync=False)
        ddp_model.reducer = _NoRebuild(ddp_model.reducer)  # type: ignore[assignment]  # forwards to the Reducer
    else:
        # gradient_as_bucket_view=True is required for XLA DDP (real multi-process: TPU)
        ddp_model = DDP(model, gradient_as_bucket_view=True)
    optimizer = torch.optim.AdamW(ddp_model.parameters(), lr=1e-4)
    loss_fn = nn.MSELoss()

    for step in range(xc.steps()):
        with torch_xla.step():
            x = torch.randn(32, 512, device='xla')
            target = torch.randn(32, 512, device='xla')
            optimizer.zero_grad()
            output = ddp_model(x)
            loss = loss_fn(output, target)
            rep.faults.at_step(step)  # before the backward's all-reduce
            loss.backward()
            optimizer.step()
            xc.ordered_sync(rank)

        rep.step_done(step, loss)
        # The reference tests dist.get_rank() == 0, which no thread replica passes: use the ordinal.
        if step % 10 == 0 and xr.global_ordinal() == 0:
            print(f"Step {step}, Loss: {loss.item():.4f}")

    rep.finish(model)


if __name__ == '__main__':
    torch_xla.launch(_mp_fn, args=())
