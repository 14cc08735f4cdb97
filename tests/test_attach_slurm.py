"""ddptui attach --slurm: a real Slurm job's ranks found on every node through srun --overlap (the test cluster of
tests/support/slurm_cluster.py, skipped with the reason where it cannot run), and the decisions over the nodes' probe
output."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from ddptui.runners.attach.find import NotAJob, Proc, find_slurm_job, probe_records, slurm_ranks
from ddptui.runners.attach.output import RankOutput

pytestmark = pytest.mark.main_suite(
    "real Slurm clusters (one host; two namespaced hosts) whose tasks run the test's own interpreter")

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "slurm_procid_ddp_loop.py"
PY = "/venv/bin/python3"


def task(pid, ppid, cmd, start=1.0, **env):
    return Proc(pid, ppid, tuple(cmd), {"SLURM_JOB_ID": "7", **env}, start)


def test_srun_tasks_by_slurm_procid_when_nothing_has_rank():
    procs = {p.pid: p for p in (
        task(10, 5, ["/bin/bash", "/spool/job7/slurm_script"], SLURM_PROCID="0"),  # the batch script: no step id
        task(20, 10, ["srun", "python", "t.py"], SLURM_PROCID="0"),
        task(30, 6, [PY, "t.py"], SLURM_STEP_ID="0", SLURM_PROCID="1", SLURM_LOCALID="0", SLURM_NTASKS="2"),
        task(31, 30, [PY, "t.py"], 5.0, SLURM_STEP_ID="0", SLURM_PROCID="1"),  # its DataLoader worker
        task(40, 7, ["/bin/sh", "-c", "python t.py"], SLURM_STEP_ID="0", SLURM_PROCID="0", SLURM_LOCALID="0",
             SLURM_NTASKS="2"),
        task(41, 40, [PY, "t.py"], SLURM_STEP_ID="0", SLURM_PROCID="0"),  # the shell's one child is the program
        task(50, 8, ["sleep", "100000000"], SLURM_STEP_ID="4294967292"),  # the extern step's holder
    )}
    assert slurm_ranks(procs) == {30: (1, 0, 2), 41: (0, 0, 2)}


def test_torchrun_per_node_ranks_by_rank_env():
    procs = {p.pid: p for p in (
        task(10, 5, ["/bin/bash", "/spool/job7/slurm_script"], SLURM_PROCID="0"),
        task(20, 6, [PY, "/venv/bin/torchrun", "--nnodes=2", "t.py"], SLURM_STEP_ID="0", SLURM_PROCID="1"),
        task(21, 20, [PY, "-u", "t.py"], SLURM_STEP_ID="0", RANK="2", LOCAL_RANK="0", WORLD_SIZE="4"),
        task(22, 20, [PY, "-u", "t.py"], SLURM_STEP_ID="0", RANK="3", LOCAL_RANK="1", WORLD_SIZE="4"),
        task(23, 22, [PY, "-u", "t.py"], 9.0, SLURM_STEP_ID="0", RANK="3", LOCAL_RANK="1", WORLD_SIZE="4"),
    )}
    assert slurm_ranks(procs) == {21: (2, 0, 4), 22: (3, 1, 4)}


def test_probe_records_read_back():
    host, procs, fds = probe_records([
        {"host": "node1"},
        {"pid": 30, "ppid": 6, "cmdline": [PY, "t.py"], "env": {"SLURM_PROCID": "1"}, "start": 12.5, "torch": False,
         "fd1": ["/logs/rank1.out", 0o100000, ""], "fd2": ["", 0, "closed"]},
        {"pid": "junk"},
    ])
    assert host == "node1" and list(procs) == [30] and procs[30].environ == {"SLURM_PROCID": "1"}
    assert procs[30].cmdline == (PY, "t.py") and fds[30]["fd1"][0] == "/logs/rank1.out"


@pytest.mark.timeout(60)
def test_not_a_slurm_job(slurm_clean, monkeypatch):
    monkeypatch.setenv("SLURM_CONF", str(slurm_clean.conf_path))
    with pytest.raises(NotAJob) as e:
        find_slurm_job("999999")
    assert str(e.value).startswith("no Slurm job 999999"), str(e.value)
    with pytest.raises(NotAJob, match="not a Slurm job id: 'abc'"):
        find_slurm_job("abc")


@pytest.mark.timeout(240)
def test_slurm_job_ranks_found_on_both_nodes_with_their_output_files(slurm_clean, tmp_path, monkeypatch):
    cluster = slurm_clean
    logs = tmp_path / "slurm"
    logs.mkdir()
    job = cluster.srun_outside("g-attach", FIXTURE, logs)
    try:
        job_id = cluster.wait_for_lines(job, logs)
        monkeypatch.setenv("SLURM_CONF", str(cluster.conf_path))
        found = find_slurm_job(job_id)
        assert (found.kind, found.slurm_job, found.launcher_pid, found.world_size) == ("slurm", job_id, None, 2)
        assert found.unreadable == ()
        assert sorted(found.ranks) == [0, 1]
        assert {r: a.node for r, a in found.ranks.items()} == {0: cluster.nodes[0], 1: cluster.nodes[1]}
        for r, a in found.ranks.items():
            assert a.stdout == RankOutput("file", str(logs / f"rank{r}.out"), "")
            assert a.stderr == RankOutput("file", str(logs / f"rank{r}.err"), "")
            assert os.path.basename(" ".join(_cmdline(a.pid))).endswith(FIXTURE.name)  # the program, not a shell
            assert (a.local_rank, a.world_size) == (0, 2)
        assert job.poll() is None  # attach changed nothing
    finally:
        cluster.end_job(job)


PROBE = """
import json, sys
from ddptui.runners.attach.find import find_slurm_job
j = find_slurm_job(sys.argv[1])
print(json.dumps({"kind": j.kind, "world": j.world_size, "unreadable": [u.reason for u in j.unreadable],
                  "ranks": {r: [a.pid, a.host, a.node, a.stdout.kind, a.stdout.path] for r, a in j.ranks.items()}}))
"""


@pytest.mark.timeout(300)
def test_slurm_job_on_two_hosts_found_from_the_login_node(slurm_hosts_clean, tmp_path):
    """node0 (the login node, where ddptui runs) and node1 are separate hosts (own names and networks): rank 1 is
    found on node1 by the probe srun ran there, its output file read through the shared filesystem."""
    import json

    cluster = slurm_hosts_clean
    logs = tmp_path / "slurm"
    logs.mkdir()
    job = cluster.srun_outside("g-attach-hosts", FIXTURE, logs)
    try:
        job_id = cluster.wait_for_lines(job, logs, timeout=200)
        r = cluster.run([sys.executable, "-c", PROBE, job_id], node=0, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
        got = json.loads(r.stdout.strip().splitlines()[-1])
        assert (got["kind"], got["world"], got["unreadable"]) == ("slurm", 2, [])
        assert {k: v[1:] for k, v in got["ranks"].items()} == {
            str(t): [cluster.hostnames[t], cluster.nodes[t], "file", str(logs / f"rank{t}.out")] for t in (0, 1)}
        assert job.poll() is None
    finally:
        cluster.end_job(job)


def _cmdline(pid: int) -> list[str]:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return [a.decode() for a in f.read().split(b"\0")[:-1]]
