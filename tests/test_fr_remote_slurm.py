"""Flight Recorder dump and stacks of a rank on another host through its torch debug server, asked on that host by
the stdlib relay under srun --overlap in the job: a real Slurm cluster on two namespaced hosts, a plain gloo job
blocked in a collective on node1."""
from __future__ import annotations

import json
import shutil
import socket
import sys
import tempfile
from pathlib import Path

import pytest

from tests.support.srun_job import FIXTURE, WAITS_LINE, first_report, hello_of, rank_files, start_job
from tests.support.wait import exited, wait_until

pytestmark = pytest.mark.main_suite(
    "a real Slurm cluster on namespaced hosts whose gloo job runs the test's own interpreter")

# run on node0 (where ddptui runs): the rank's dump and stacks through its debug server on node1, as JSON
PROBE = """
import json, socket, sys
from ddptui.runners.edge import fr_client
from ddptui.runners.evidence import fr_records
from ddptui.runners.edge import remote_stacks as rs
from ddptui.runners.evidence import stack_types
rank, pid, node, sock, job = sys.argv[1:]
rank, pid = int(rank), int(pid)
here = socket.gethostname()
dump = fr_client.dump_everywhere({rank: sock}, {rank: (node, node)}, here, job)[rank]
res = rs.collect([rs.RemoteTarget(rank, pid, node, None, sock)], job, method="debug-server", timeout=20)[rank]
main = next(t for t in res.threads if t.name == "MainThread") if res.threads else None
user = next((f for f in main.frames if stack_types.is_user_frame(f)), None) if main else None
print(json.dumps({"here": here, "dump": dump if isinstance(dump, str) else fr_records.normalise_all({rank: dump}, 2)[rank],
                  "method": res.method, "error": res.error, "node": res.node,
                  "user": [user.file, user.line] if user else None}))
"""


def _debug_sock(path: Path) -> str | None:
    rep = first_report(path, "debug_server")
    return rep["path"] if rep else None


@pytest.mark.timeout(240)
def test_dump_and_stacks_of_a_rank_on_node1_through_its_debug_server(slurm_hosts_clean, tmp_path):
    cluster = slurm_hosts_clean
    logs = tmp_path / "slurm"
    logs.mkdir()
    sockets = Path(tempfile.mkdtemp(prefix="frs", dir="/tmp")) / "s"  # short (< 108 bytes), in a 0700 folder
    job = start_job(cluster, logs, "h2-fr-remote", {"TORCH_FR_BUFFER_SIZE": "2000", "DDPTUI_SOCKETS": str(sockets)})
    try:
        hello = wait_until(lambda: hello_of(logs / "rank1.out"), 120, "rank 1's hello", step=0.2, stop_if=exited(job),
                           seen=lambda: rank_files(logs))
        assert hello["host"] == "node1" and hello["host"] != socket.gethostname()
        sock = wait_until(lambda: _debug_sock(logs / "rank1.out"), 120, "rank 1's debug server", step=0.2,
                          stop_if=exited(job), seen=lambda: rank_files(logs))
        assert sock == str(sockets / "r1.sock")
        wait_until(lambda: "met every rank" in (logs / "rank1.out").read_text(), 120,
                   "rank 1 past its first all_reduce", step=0.2, stop_if=exited(job), seen=lambda: rank_files(logs))
        job_id = wait_until(lambda: next((j[0] for j in cluster.jobs() if j[1] == "RUNNING"), None), 30, "the job id",
                            step=0.2, stop_if=exited(job), seen=lambda: rank_files(logs))
        r = cluster.run([sys.executable, "-c", PROBE, "1", str(hello["pid"]), "node1", sock, job_id], node=0,
                        timeout=120)
        assert r.returncode == 0, r.stderr
        got = json.loads(r.stdout.strip().splitlines()[-1])
        assert got["here"] != "node1"  # asked from node0: through srun
        dump = got["dump"]
        assert isinstance(dump, dict), dump
        last = dump["entries"][-1]
        # rank 1 waits in its second all_reduce (#2), the first one completed
        assert (last["collective_seq_id"], last["profiling_name"], last["retired"]) == (2, "gloo:all_reduce", False)
        assert dump["pg_status"]["0"] == {"last_completed_collective": 1, "last_enqueued_collective": 2,
                                          "last_started_collective": -1}
        assert got["method"] == "torch debug server" and got["node"] == "node1", got
        assert got["user"] == [str(FIXTURE), WAITS_LINE], got
        assert job.poll() is None  # nothing was signalled
    finally:
        try:
            cluster.end_job(job)
        finally:
            shutil.rmtree(sockets.parent, ignore_errors=True)
