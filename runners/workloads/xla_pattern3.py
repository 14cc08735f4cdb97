"""Reference pattern 3 (MpDeviceLoader over a DataLoader, xm.optimizer_step), made to run on PJRT CPU thread replicas too."""
import torch
import torch.nn as nn
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl
from torch.utils.data import DataLoader, TensorDataset

import xla_common as xc


def _train_loader(index, steps, batch=32, dim=512):
    # Synthetic data, different on every replica (as a distributed sampler's shards would be).
    g = torch.Generator().manual_seed(xc.seed() + 1 + index)
    data = torch.randn(steps * batch, dim, generator=g)
    target = torch.randn(steps * batch, dim, generator=g)
    return DataLoader(TensorDataset(data, target), batch_size=batch, shuffle=False, drop_last=True)


def _mp_fn(index):
    xc.run(lambda rep: _train(rep, index), index)


def _train(rep, index):
    device = torch_xla.device()
    model = xc.make_model(index)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.5)
    loss_fn = nn.MSELoss()

    # Wrap loader — data auto-transferred to device
    mp_loader = pl.MpDeviceLoader(_train_loader(index, xc.steps()), device)

    for step, (data, target) in enumerate(mp_loader):
        with torch_xla.step():
            optimizer.zero_grad()
            output = model(data)
            loss = loss_fn(output, target)
            rep.faults.at_step(step)  # before the all-reduce in optimizer_step
            loss.backward()
            xm.optimizer_step(optimizer)
            xc.ordered_sync(index)

        rep.step_done(step, loss)
        if step % 10 == 0 and xm.is_master_ordinal():
            print(f"Step {step}, Loss: {loss.item():.4f}")

    rep.finish(model)


if __name__ == '__main__':
    torch_xla.launch(_mp_fn, args=())
