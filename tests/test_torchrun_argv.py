"""Reading a user's own torchrun command line (runners/launch/torchrun_argv.py), and the loader and the runner reading it alike."""
from __future__ import annotations

import pytest

from ddptui.runners.launch import torchrun
from ddptui.runners.launch.profile.load import adhoc_profile
from ddptui.runners.launch.torchrun_argv import launcher_end, nnodes, nproc_per_node

pytestmark = [pytest.mark.any_python, pytest.mark.timeout(30)]


@pytest.mark.parametrize("argv,end", [
    (["torchrun", "t.py"], 1),
    (["/opt/venv/bin/torchrun", "--standalone", "t.py"], 1),
    (["python", "-m", "torch.distributed.run", "--standalone", "t.py"], 3),
    (["python", "-u", "-m", "torch.distributed.run", "t.py"], 4),
    (["python", "-m", "torch.distributed.launch", "t.py"], None),
    (["python", "t.py", "torchrun"], None),
    ([], None),
])
def test_launcher_end(argv, end):
    assert launcher_end(argv) == end


@pytest.mark.parametrize("argv,nproc,nodes", [
    (["torchrun", "--nproc-per-node=4", "--nnodes", "2", "t.py"], 4, 2),
    (["torchrun", "--nproc_per_node", "3", "t.py"], 3, None),
    (["torchrun", "--nproc-per-node=gpu", "t.py"], None, None),
    (["torchrun", "--nproc_per_node=0", "--nnodes=1:4", "t.py"], None, None),
    (["torchrun", "--nproc_per_node", "t.py"], None, None),
])
def test_counts(argv, nproc, nodes):
    assert nproc_per_node(argv) == nproc and nnodes(argv) == nodes


@pytest.mark.parametrize("argv", [
    ["torchrun", "--standalone", "--nproc-per-node=3", "t.py"],
    ["python", "-m", "torch.distributed.run", "--nproc_per_node", "2", "t.py"],
    ["torchrun", "--nproc-per_node=3", "t.py"],  # not a spelling torchrun takes: neither side reads it
    ["torchrun", "--nproc_per_node=gpu", "t.py"],
])
def test_the_loader_and_the_runner_read_one_command_alike(tmp_path, argv):
    """One home: the ad-hoc profile's world size and the torchrun plan's are read from the command the same way."""
    p = adhoc_profile(argv)
    plan = torchrun.plan(p, tmp_path, 29500)
    assert plan.world_size == p.world_size
    assert plan.procs[0].ranks == tuple(range(p.world_size))
