"""The tests' real Slurm cluster (tests/support/slurm_cluster.py, tests/support/netns.py): real srun, sbatch, scancel
and gloo DDP."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.conftest import leftover_processes
from tests.support.netns import NetnsHosts, hosts_file_text
from tests.support.slurm_cluster import (SlurmCluster, cannot_run, netns_layout, nodes_idle, parse_squeue,
                                         single_host_layout, slurm_conf)
from tests.support.wait import wait_until

pytestmark = pytest.mark.main_suite(
    "a real Slurm cluster (root, Debian's slurm packages) whose tasks run the test's own interpreter")

FIXTURES = Path(__file__).resolve().parent / "fixtures"


# ---- pure parts -------------------------------------------------------------------------------------------------
def test_conf_gives_every_node_its_own_port_and_address(tmp_path):
    conf = slurm_conf(tmp_path, netns_layout(NetnsHosts("dtx", tmp_path)), [7001, 7002, 7003, 7004])
    assert "SlurmctldHost=node0(198.18.0.1)\nSlurmctldPort=7001\nSlurmdPort=7002\n" in conf
    assert "NodeName=node0 NodeHostname=node0 NodeAddr=198.18.0.1 Port=7003 " in conf
    assert "NodeName=node1 NodeHostname=node1 NodeAddr=198.18.0.2 Port=7004 " in conf
    assert f"StateSaveLocation={tmp_path}/state\n" in conf and "AuthType=auth/none\n" in conf
    assert "ProctrackType=proctrack/pgid\n" in conf
    local = slurm_conf(tmp_path, single_host_layout(), [1, 2, 3, 4])
    assert "NodeName=n1 NodeHostname=localhost NodeAddr=127.0.0.1 Port=3 " in local
    assert "NodeName=n2 NodeHostname=localhost NodeAddr=127.0.0.1 Port=4 " in local


def test_ready_only_when_every_node_is_idle():
    assert nodes_idle("n1 idle\nn2 idle\n", ("n1", "n2"))
    assert not nodes_idle("n1 idle\n", ("n1", "n2"))
    assert not nodes_idle("n1 idle\nn2 idle*\n", ("n1", "n2"))  # not responding
    assert not nodes_idle("n1 unk*\nn2 idle\n", ("n1", "n2"))
    assert not nodes_idle("", ("n1", "n2"))


def test_squeue_lines_parse():
    assert parse_squeue("12|RUNNING|node[0-1]\n13|PENDING|\n") == [("12", "RUNNING", "node[0-1]"), ("13", "PENDING", "")]
    assert parse_squeue("") == []


def test_namespaced_hosts_file_and_entry(tmp_path):
    hosts = NetnsHosts("dtabc", tmp_path)
    assert hosts_file_text(hosts.names) == "127.0.0.1 localhost\n198.18.0.1 node0\n198.18.0.2 node1\n"
    argv = hosts.wrap(1, ["hostname"])
    assert argv[:2] == ["nsenter", "--net=/run/netns/dtabc-n1"] and argv[-3:] == [str(tmp_path / "hosts"), "node1", "hostname"]


# ---- the single-host cluster ------------------------------------------------------------------------------------
def _srun_output_names(cluster, out_dir: Path) -> list[str]:
    r = cluster.run(["srun", "-N2", "--ntasks-per-node=1", f"--output={out_dir}/rank%t-%N.out", "hostname"], timeout=60)
    assert r.returncode == 0, r.stderr
    return sorted(p.name for p in out_dir.iterdir())


@pytest.mark.timeout(120)
def test_single_host_srun_runs_one_task_on_each_node(slurm_clean, tmp_path):
    r = slurm_clean.run(["srun", "-N2", "--ntasks-per-node=1", "--label", "sh", "-c", "echo $SLURMD_NODENAME"])
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.split()) == ["0:", "1:", "n1", "n2"]
    host = socket.gethostname()  # node names do not resolve here: %N is this host's name on both
    assert _srun_output_names(slurm_clean, tmp_path) == [f"rank0-{host}.out", f"rank1-{host}.out"]


# ---- the namespaced cluster -------------------------------------------------------------------------------------
@pytest.mark.timeout(120)
def test_namespaced_srun_runs_on_node0_and_node1(slurm_hosts_clean, tmp_path):
    r = slurm_hosts_clean.run(["srun", "-N2", "--ntasks-per-node=1", "--label", "hostname"])
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.splitlines()) == ["0: node0", "1: node1"]
    assert _srun_output_names(slurm_hosts_clean, tmp_path) == ["rank0-node0.out", "rank1-node1.out"]
    assert [(tmp_path / n).read_text().strip() for n in ("rank0-node0.out", "rank1-node1.out")] == ["node0", "node1"]


@pytest.mark.timeout(120)
def test_sbatch_wait_prints_the_job_id_and_exits_with_the_jobs_code(slurm_hosts_clean, tmp_path):
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#SBATCH -N2\n#SBATCH --ntasks-per-node=1\n"
                      f"srun --output={tmp_path}/step-%N.out hostname\nexit 3\n")
    r = slurm_hosts_clean.run(["sbatch", "--wait", "--parsable", "--job-name=ddptui-cluster-test",
                               f"--output={tmp_path}/batch-%j.out", str(script)], timeout=90)
    assert r.returncode == 3, r.stderr
    job_id = r.stdout.splitlines()[0].split(";")[0]
    assert job_id.isdigit()
    assert (tmp_path / f"batch-{job_id}.out").exists()
    assert (tmp_path / "step-node1.out").read_text().strip() == "node1"
    assert slurm_hosts_clean.job_state(job_id) == "FAILED"


@pytest.mark.timeout(120)
def test_scancel_ends_a_running_job_and_leaves_nothing(slurm_hosts_clean, tmp_path):
    cluster = slurm_hosts_clean
    script = tmp_path / "sleeps.sh"
    script.write_text("#!/bin/sh\n#SBATCH -N2\n#SBATCH --ntasks-per-node=1\nsrun sleep 600\n")
    r = cluster.run(["sbatch", "--parsable", f"--output={tmp_path}/%j.out", str(script)], timeout=60)
    assert r.returncode == 0, r.stderr
    job_id = r.stdout.split(";")[0].strip()
    wait_until(lambda: len(_sleeps()) == 2, 60, "a sleep on each node")
    # The autouse check sees a running step as a leftover (its ranks carry the test token; slurmstepd is the cluster's)
    left = {p.pid for p in leftover_processes()}
    assert {p.pid for p in _sleeps()} <= left
    assert set(cluster.steps_left()) <= left and len(cluster.steps_left()) >= 2
    assert not left & {p.pid for p in cluster.daemons.values()}
    assert cluster.run(["scancel", job_id]).returncode == 0
    wait_until(lambda: cluster.job_state(job_id) == "CANCELLED", 60, "the job CANCELLED")
    cluster.wait_no_jobs(timeout=60)
    assert not _sleeps() and not cluster.steps_left()


def _sleeps() -> list[psutil.Process]:
    return [p for p in leftover_processes() if p.name() == "sleep"]


@pytest.mark.timeout(180)
def test_gloo_ddp_under_srun_across_the_two_namespaced_nodes(slurm_hosts_clean):
    cluster = slurm_hosts_clean
    env = {"MASTER_ADDR": "node0", "MASTER_PORT": str(cluster.free_port(0))}
    r = cluster.run(["srun", "-N2", "--ntasks-per-node=1", sys.executable, str(FIXTURES / "slurm_procid_ddp.py")],
                    env=env, timeout=150)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = sorted(ln for ln in r.stdout.splitlines() if ln.startswith("rank "))
    assert [ln.split()[:4] for ln in lines] == [["rank", "0/2", "host", "node0"], ["rank", "1/2", "host", "node1"]]
    assert len({ln.split()[-1] for ln in lines}) == 1  # DDP kept the replicas equal across the nodes


@pytest.mark.timeout(180)
def test_a_cluster_stopped_with_a_job_running_leaves_no_daemon_step_or_namespace():
    why = cannot_run(namespaced=True)
    if why:
        pytest.skip(why)
    cluster = SlurmCluster(namespaced=True)
    try:
        cluster.start()
        sleeper = cluster.on_node(0, ["srun", "-N2", "--ntasks-per-node=1", "sleep", "600"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(lambda: len(cluster.steps_left()) == 2, 60, "the step on both nodes")
        daemons = [p.pid for p in cluster.daemons.values()]
        steps = cluster.steps_left()
        cluster.stop()
        sleeper.wait(timeout=30)
        print(f"namespaced cluster: start {cluster.start_s:.2f} s, stop with a running job {cluster.stop_s:.2f} s")
        assert not [p for p in daemons + steps if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]
        assert cluster.hosts.leftover() == [] and not _sleeps()
    finally:
        cluster.stop()
        cluster.remove_root()


@pytest.mark.timeout(60)
def test_on_node_runs_the_command_itself_on_that_host(slurm_hosts):
    """ddptui run on the login node: the Popen is the command itself (a signal to it reaches it), in node0's names."""
    p = slurm_hosts.on_node(0, ["sh", "-c", "hostname; getent hosts node1; read line"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "node0"
        assert p.stdout.readline().split() == ["198.18.0.2", "node1"]
        assert psutil.Process(p.pid).name() == "sh" and psutil.Process(p.pid).environ()["SLURM_CONF"] == str(
            slurm_hosts.conf_path)
    finally:
        p.communicate("\n", timeout=30)
    assert p.returncode == 0


_CONNECT = ("import socket, sys\ntry:\n    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3).close()\n"
            "except OSError as e:\n    sys.exit(f'unreachable: {e}')\n")


@pytest.mark.timeout(120)
def test_cut_link_separates_the_nodes_until_restored(slurm_hosts):
    ctld_port = next(ln.split("=")[1] for ln in slurm_hosts.conf_path.read_text().splitlines()
                     if ln.startswith("SlurmctldPort="))
    reach = [sys.executable, "-c", _CONNECT, "node0", ctld_port]
    assert slurm_hosts.run(reach, node=1).returncode == 0
    slurm_hosts.cut_link()
    try:
        cut = slurm_hosts.run(reach, node=1)
        assert cut.returncode != 0 and "unreachable" in cut.stderr
    finally:
        slurm_hosts.restore_link()
    assert slurm_hosts.run(reach, node=1).returncode == 0
    wait_until(lambda: nodes_idle(slurm_hosts.sinfo(), tuple(slurm_hosts.nodes)), 60, "both nodes idle again")


# ---- scripts/slurm-deps.sh ----------------------------------------------------------------------------------------
DEPS = Path(__file__).resolve().parent.parent / "scripts" / "slurm-deps.sh"


def _bin_with(tools: list[str]) -> Path:
    """A PATH holding only these tools (so the script sees no Slurm and, unless listed, no apt-get), readable by all."""
    import shutil
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="ddptui-deps-bin-"))
    d.chmod(0o755)
    for t in tools:
        os.symlink(shutil.which(t), d / t)
    return d


@pytest.mark.timeout(60)
def test_slurm_deps_is_a_no_op_when_installed():
    if cannot_run(namespaced=True):
        pytest.skip(cannot_run(namespaced=True))
    r = subprocess.run(["bash", str(DEPS)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and r.stdout.strip() == (
        "slurm-deps: slurmctld, slurmd, slurm-client, iproute2, util-linux already installed")


@pytest.mark.timeout(60)
def test_slurm_deps_says_why_it_cannot_install_and_exits_0():
    import shutil

    bindir = _bin_with(["id", "sort", "bash"])
    env = {"PATH": str(bindir), "HOME": "/"}
    try:
        r = subprocess.run([str(bindir / "bash"), str(DEPS)], capture_output=True, text=True, timeout=30, env=env)
        assert r.returncode == 0
        assert "slurm-client slurmctld slurmd" in r.stdout
        if os.geteuid() != 0:
            assert r.stdout.startswith("slurm-deps: not root, cannot install ")
            return
        assert r.stdout.startswith("slurm-deps: no apt-get on this machine, cannot install ")
        if shutil.which("setpriv") is None:
            pytest.skip("no setpriv to run the script as another user")
        nobody = subprocess.run([shutil.which("setpriv"), "--reuid=65534", "--regid=65534", "--clear-groups",
                                 str(bindir / "bash"), str(DEPS)], capture_output=True, text=True, timeout=30, env=env)
        assert nobody.returncode == 0 and nobody.stdout.startswith("slurm-deps: not root, cannot install "), nobody
    finally:
        shutil.rmtree(bindir)


_LEAKY_TEST = '''
import subprocess
from tests.support.wait import wait_until


def test_leaves_a_job_step_running(slurm_cluster):
    subprocess.Popen(slurm_cluster._argv(0, ["srun", "-N1", "sleep", "600"]), env=slurm_cluster.node_env(),
                     start_new_session=True)
    wait_until(lambda: slurm_cluster.steps_left() and slurm_cluster.jobs(), 60, "the step running")
'''


@pytest.mark.timeout(150)
def test_the_no_process_left_check_catches_a_job_step_left_running_and_ends_it(tmp_path):
    """A test that leaves a Slurm job step running fails, naming it, and the job is cancelled (not its steps killed)."""
    if cannot_run(namespaced=False):
        pytest.skip(cannot_run(namespaced=False))
    root = Path(__file__).resolve().parent.parent
    (tmp_path / "conftest.py").write_text(f"import sys\nsys.path.insert(0, {str(root)!r})\nfrom tests.conftest import *\n")
    (tmp_path / "test_leaky.py").write_text(_LEAKY_TEST)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                        str(tmp_path / "test_leaky.py")], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stdout[-3000:]
    assert "processes left behind: " in r.stdout and "slurmstepd" in r.stdout and "sleep 600" in r.stdout
    assert "1 passed, 1 error" in r.stdout  # the test passed; its teardown check failed it
    assert not _sleeps()


@pytest.mark.timeout(60)
def test_an_outer_allocation_of_the_tests_does_not_leak_into_the_test_cluster(slurm_clean, monkeypatch):
    """pytest run inside someone's salloc: srun on the test cluster must not take that job id as its allocation."""
    monkeypatch.setenv("SLURM_JOB_ID", "999999")
    monkeypatch.setenv("SLURM_JOBID", "999999")
    r = slurm_clean.run(["srun", "-N2", "--ntasks-per-node=1", "sh", "-c", "echo $SLURM_JOB_ID"])
    assert r.returncode == 0, r.stderr
    assert "999999" not in r.stdout and len(set(r.stdout.split())) == 1


_OWNER = '''
import subprocess, sys
sys.path.insert(0, sys.argv[1])
from tests.support.slurm_cluster import SlurmCluster
from tests.support.wait import wait_until
c = SlurmCluster(namespaced=True).start()
subprocess.Popen(c._argv(0, ["srun", "-N2", "--ntasks-per-node=1", "sleep", "600"]), env=c.node_env(),
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
wait_until(lambda: len(c.steps_left()) == 2, 60, "the step on both nodes")
print(c.uid, c.root, flush=True)
sys.stdin.read()
'''


@pytest.mark.timeout(150)
def test_a_cluster_whose_pytest_was_killed_is_swept_at_the_next_start():
    """A session killed by a timeout leaves its daemons, step, namespaces: the next session's fixture ends them."""
    from tests.support.slurm_cluster import _mark, _pids, sweep_orphans

    if cannot_run(namespaced=True):
        pytest.skip(cannot_run(namespaced=True))
    owner = subprocess.Popen([sys.executable, "-c", _OWNER, str(Path(__file__).resolve().parent.parent)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    uid, root = owner.stdout.readline().split()
    owner.kill()  # as a timeout would: no finalizer runs
    owner.wait(timeout=30)

    def of_it() -> list[int]:
        return [p for p in _pids() if (_mark(p) or "").startswith(uid + ":")]
    assert len(of_it()) == 3 and len(_sleeps()) == 2  # slurmctld, two slurmd; a sleep on each node
    ended = sweep_orphans()  # (another session killed meanwhile on this machine may add its own entries)
    assert any(e.startswith(f"cluster {uid} ") for e in ended)
    assert {f"namespace dt{uid}-n0", f"namespace dt{uid}-n1"} <= set(ended)
    assert of_it() == [] and not Path(root).exists()
    wait_until(lambda: not _sleeps(), 30, "the orphaned job's ranks gone")
    from tests.conftest import CLUSTERS

    live = [c.uid for c in CLUSTERS]
    assert not [e for e in sweep_orphans() if any(u in e for u in live)]  # a live session's clusters: untouched
    assert all(c.daemons["slurmctld"].poll() is None for c in CLUSTERS)


def test_only_a_cluster_whose_owner_is_provably_gone_is_an_orphan():
    from tests.support.slurm_cluster import _start_time, owner_gone

    me = os.getpid()
    assert not owner_gone(f"abc:{me}:{_start_time(me)}")
    assert owner_gone(f"abc:{me}:{int(_start_time(me)) + 1}")  # the pid was reused by another process
    assert not owner_gone("abc")  # no owner named (an older fixture's mark): never swept
    assert not owner_gone("abc:12:")
