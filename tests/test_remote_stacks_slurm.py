"""Stacks of a rank on another host, taken there by srun --overlap inside its job: a real Slurm cluster on two
namespaced hosts (node0: the login node and slurmctld, node1), a plain gloo job blocked in a collective on node1."""
from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import pytest


from ddptui.runners.evidence import stack_types
from tests.support.srun_job import FIXTURE, WAITS_LINE, hello_of, rank_files, start_job
from tests.support.wait import exited, wait_until

pytestmark = pytest.mark.main_suite(
    "a real Slurm cluster on namespaced hosts whose gloo job runs the test's own interpreter")


# run on node0 (the login node, where ddptui runs): remote_stacks.collect for one target, its results as JSON
PROBE = """
import json, sys
from ddptui.runners.edge import remote_stacks as rs
from ddptui.runners.evidence import stack_types
rank, pid, node, err, job, method, timeout = sys.argv[1:]
res = rs.collect([rs.RemoteTarget(int(rank), int(pid), node, err)], job, method=method, timeout=float(timeout))
r = res[int(rank)]
print(json.dumps({"method": r.method, "error": r.error, "node": r.node, "unreachable": r.unreachable,
                  "threads": stack_types.to_json(r), "render": stack_types.render(r)}))
"""


def _probe(cluster, hello: dict, err: Path, job_id: str, method: str, timeout: float = 20) -> dict:
    r = cluster.run([sys.executable, "-c", PROBE, str(hello["r"]), str(hello["pid"]), hello["node"], str(err),
                     job_id, method, str(timeout)], node=0, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def _user_line(res: dict) -> tuple[str, int]:
    main = next(t for t in stack_types.from_json(res["threads"]) if t.name == "MainThread")
    f = next(f for f in main.frames if stack_types.is_user_frame(f))
    return f.file, f.line


@pytest.mark.timeout(240)
def test_stacks_of_a_rank_on_node1_are_taken_there_through_srun(slurm_hosts_clean, tmp_path):
    cluster = slurm_hosts_clean
    logs = tmp_path / "slurm"
    logs.mkdir()
    job = start_job(cluster, logs, "h4-remote-stacks")
    try:
        hello = wait_until(lambda: hello_of(logs / "rank1.out"), 120, "rank 1's hello", step=0.2, stop_if=exited(job),
                           seen=lambda: rank_files(logs))
        assert hello["node"] == "node1" and hello["host"] == "node1"
        assert hello["host"] != socket.gethostname()  # not this machine's name: the engine treats it as remote
        wait_until(lambda: "met every rank" in (logs / "rank1.out").read_text(), 120,
                   "rank 1 past its first all_reduce", step=0.2, stop_if=exited(job), seen=lambda: rank_files(logs))
        job_id = wait_until(lambda: next((j[0] for j in cluster.jobs() if j[1] == "RUNNING"), None), 30, "the job id",
                            step=0.2, stop_if=exited(job), seen=lambda: rank_files(logs))
        err = logs / "rank1.err"

        spy = _probe(cluster, hello, err, job_id, "py-spy")
        assert spy["method"] == "py-spy" and spy["node"] == "node1" and not spy["unreachable"], spy
        assert _user_line(spy) == (str(FIXTURE), WAITS_LINE), spy["render"]
        assert "dist.all_reduce(t)  # WAITS_HERE" in spy["render"]  # source read from the shared filesystem

        fh = _probe(cluster, hello, err, job_id, "faulthandler")
        assert fh["method"] == "faulthandler" and not fh["unreachable"], fh
        assert _user_line(fh) == (str(FIXTURE), WAITS_LINE), fh["render"]
        assert job.poll() is None  # SIGUSR1 went to a rank that registered faulthandler for it: still running

        # a pid that is not on node1: py-spy says so, through srun, and the node is not called unreachable
        gone = _probe(cluster, {**hello, "pid": 2 ** 22 + 4321}, err, job_id, "auto")
        assert gone["method"] == f"unavailable: no process {2 ** 22 + 4321} on node1", gone
        assert gone["error"].startswith("py-spy on node1: ") and not gone["unreachable"]

        cluster.cut_link()
        try:
            lost = _probe(cluster, hello, err, job_id, "auto", timeout=4)
        finally:
            cluster.restore_link()
        assert lost["unreachable"], lost
        assert lost["method"].startswith("unavailable: srun could not reach node1"), lost
    finally:
        cluster.end_job(job)
