"""Reference pattern 1 (XLA DDP, xm.optimizer_step) on every XLA device, made to run on PJRT CPU thread replicas too."""
import torch
import torch.nn as nn
import torch_xla
import torch_xla.core.xla_model as xm

import xla_common as xc


def _mp_fn(index):
    xc.run(lambda rep: _train(rep, index), index)


def _train(rep, index):
    device = torch_xla.device()
    model = xc.make_model(index)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.5)
    loss_fn = nn.MSELoss()

    for step in range(xc.steps()):
        with torch_xla.step():
            x = torch.randn(32, 512, device=device)
            target = torch.randn(32, 512, device=device)
            optimizer.zero_grad()
            output = model(x)
            loss = loss_fn(output, target)
            rep.faults.at_step(step)  # before the all-reduce in optimizer_step
            loss.backward()
            # all_reduce + optimizer.step() (its own sync is the ordered one below)
            xm.optimizer_step(optimizer)
            xc.ordered_sync(index)

        rep.step_done(step, loss)
        if step % 10 == 0 and xm.is_master_ordinal():
            print(f"Step {step}, Loss: {loss.item():.4f}")

    rep.finish(model)


if __name__ == '__main__':
    torch_xla.launch(_mp_fn, args=())
