"""The injected hello on real Slurm tasks: each rank names the node srun placed it on (SLURMD_NODENAME), not the
host, which every node of the one-host test cluster shares."""
from __future__ import annotations

import socket
import sys

import pytest

from tests.support.engine import INJECT, strict_reports

pytestmark = pytest.mark.main_suite("a real Slurm cluster whose tasks run the test's own interpreter")

# a user's plain program (it knows nothing of ddptui); the launcher line gives RANK as ddptui's srun plan does
LAUNCH = 'RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS LOCAL_RANK=$SLURM_LOCALID exec "$0" -c "print(\'trained\')"'


@pytest.mark.timeout(120)
def test_srun_tasks_say_hello_from_their_own_node(slurm_clean):
    r = slurm_clean.run(["srun", "-N2", "--ntasks-per-node=1", "--label", "sh", "-c", LAUNCH, sys.executable],
                        env={"DDPTUI": "1", "PYTHONPATH": str(INJECT), "PYTHONUNBUFFERED": "1"}, timeout=90)
    assert r.returncode == 0, r.stderr
    # srun --label prefixes each line with its task id: "0: @ddptui {...}"
    by_task = {int(ln.split(":", 1)[0]): ln.split(": ", 1)[1] for ln in r.stdout.splitlines() if "@ddptui" in ln}
    hellos = {t: strict_reports(line)[0] for t, line in by_task.items()}
    assert sorted(hellos) == [0, 1] and all(h["k"] == "hello" and h["r"] == t for t, h in hellos.items())
    assert [hellos[t]["node"] for t in (0, 1)] == list(slurm_clean.nodes)  # block placement: task t on node t
    assert {h["host"] for h in hellos.values()} == {socket.gethostname()}  # one host, two nodes


@pytest.mark.timeout(120)
def test_a_script_that_reads_slurm_procid_itself_is_a_rank(slurm_clean):
    """`ddptui -- srun python train.py` where train.py takes its rank from SLURM_PROCID: nothing sets RANK."""
    r = slurm_clean.run(["srun", "-N2", "--ntasks-per-node=1", "--label", sys.executable, "-c", "print('trained')"],
                        env={"DDPTUI": "1", "PYTHONPATH": str(INJECT), "PYTHONUNBUFFERED": "1"}, timeout=90)
    assert r.returncode == 0, r.stderr
    hellos = [strict_reports(ln.split(": ", 1)[1])[0] for ln in r.stdout.splitlines() if "@ddptui" in ln]
    assert sorted((h["r"], h["world"], h["local"], h["node"]) for h in hellos if h["k"] == "hello") == \
        [(0, 2, 0, slurm_clean.nodes[0]), (1, 2, 0, slurm_clean.nodes[1])]
