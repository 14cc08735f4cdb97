"""Stacks of ranks on other nodes (runners/edge/remote_stacks.py): locality, srun's argv and env, reading srun's end,
and the error paths through a failing srun on PATH (the real cluster test is test_remote_stacks_slurm.py)."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from ddptui.runners.edge import remote_stacks as rs
from ddptui.runners.edge import srun_exec
from ddptui.runners.edge import stacks
from ddptui.runners.evidence import stack_types
from tests.support.wait import wait_until

pytestmark = pytest.mark.main_suite("the processes it dumps run on the test's own interpreter")


# ---- locality ------------------------------------------------------------------------------------------------
def test_a_rank_is_local_when_its_host_is_this_host():
    assert srun_exec.is_local("vm", "vm")
    assert srun_exec.is_local("node1.cluster.example", "node1")  # FQDN on one side, short name on the other
    assert srun_exec.is_local("Node1", "node1.cluster")
    assert not srun_exec.is_local("node1", "node0")
    assert not srun_exec.is_local("node10", "node1")


def test_a_rank_without_a_hello_is_local():
    # no host known yet: only a pid we spawned ourselves can be known, as before multi-node runs
    assert srun_exec.is_local("", "node0")


def test_split_sends_other_hosts_ranks_to_their_slurm_node():
    targets = [stacks.Target(0, 100, "/run/r0.err"), stacks.Target(1, 100, "/run/r1.err"),
               stacks.Target(2, 200, None), stacks.Target(3, 300, None)]
    hosts = {0: ("node0", "node0"), 1: ("node1", "node1"), 2: ("node1.lab", ""), 3: ("", "")}
    local, remote = rs.split(targets, hosts, "node0")
    assert [t.rank for t in local] == [0, 3]
    # the same pid on two nodes is two processes; the node name Slurm knows wins, else the host
    assert remote == [rs.RemoteTarget(1, 100, "node1", "/run/r1.err"), rs.RemoteTarget(2, 200, "node1.lab", None)]


def test_single_host_cluster_ranks_are_all_local():
    # several slurmd on one machine: every node's ranks say this host, their pids are ours to read
    targets = [stacks.Target(r, 10 + r, None) for r in range(4)]
    hosts = {r: ("vm", f"n{1 + r // 2}") for r in range(4)}
    local, remote = rs.split(targets, hosts, "vm")
    assert len(local) == 4 and remote == []


# ---- what srun is asked ----------------------------------------------------------------------------------------
def test_srun_argv_runs_one_overlapping_task_on_the_node_in_the_job():
    argv = srun_exec.srun_argv("/usr/bin/srun", "42", "node1", rs.pyspy_argv("/venv/bin/py-spy", 777))
    assert argv[:argv.index("/bin/sh")] == [
        "/usr/bin/srun", "--overlap", "--jobid", "42", "-w", "node1", "-N1", "-n1", "-v",
        "--job-name", "ddptui-stacks"]
    assert argv[argv.index("/venv/bin/py-spy"):] == ["/venv/bin/py-spy", "dump", "--pid", "777", "--json"]


def test_pyspy_wrapper_says_a_stopped_rank_state_and_runs_py_spy_on_a_running_one():
    """The command srun runs on the node, run here against real processes: a stopped process gets no py-spy (exit
    STOPPED, its /proc State said), a sleeping one gets the program (here `echo`, standing in for py-spy)."""
    import os
    import signal
    import subprocess
    import sys
    p = subprocess.Popen([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"],
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "up"
        ran = subprocess.run(rs.pyspy_argv("echo", p.pid), capture_output=True, text=True, timeout=30)
        assert (ran.returncode, ran.stdout.split()) == (0, ["dump", "--pid", str(p.pid), "--json"])
        os.kill(p.pid, signal.SIGSTOP)
        wait_until(lambda: stacks.stopped_state(p.pid) != "", 10, "the process to show as stopped", step=0.05)
        ran = subprocess.run(rs.pyspy_argv("echo", p.pid), capture_output=True, text=True, timeout=30)
        assert ran.returncode == rs.STOPPED and rs.said_state(ran.stdout) == "T (stopped)", ran
        assert stacks.stopped_state(p.pid) == "T (stopped)"
    finally:
        p.kill()
        p.wait()
        p.stdout.close()


def test_srun_env_drops_the_allocation_geometry_keeps_the_cluster():
    env = srun_exec.srun_env({"PATH": "/bin", "SLURM_CONF": "/c/slurm.conf", "SLURM_NTASKS": "4", "SLURM_JOB_ID": "9",
                       "SLURM_NTASKS_PER_NODE": "2"})
    assert env == {"PATH": "/bin", "SLURM_CONF": "/c/slurm.conf", "RUST_BACKTRACE": "0"}


def test_signal_script_checks_the_handler_on_the_node(tmp_path):
    """The script srun runs on the node: exit NO_PROCESS for a missing pid, NO_HANDLER when SIGUSR1 is not caught
    (it would kill the rank), and the signal only when it is: run here against real processes."""
    import subprocess
    import sys
    gone = subprocess.run(rs.signal_argv(2 ** 22 + 12345), capture_output=True)
    assert gone.returncode == rs.NO_PROCESS
    plain = subprocess.Popen([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"],
                             stdout=subprocess.PIPE, text=True)
    caught = subprocess.Popen([sys.executable, "-c", "import faulthandler, signal, sys, time\n"
                               "faulthandler.register(signal.SIGUSR1, all_threads=True)\n"
                               "print('up', flush=True); time.sleep(60)"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert plain.stdout.readline().strip() == "up" and caught.stdout.readline().strip() == "up"
        assert subprocess.run(rs.signal_argv(plain.pid)).returncode == rs.NO_HANDLER
        assert plain.poll() is None  # not signalled
        assert subprocess.run(rs.signal_argv(caught.pid)).returncode == 0
        said: list[str] = []  # its stderr, a line at a time (each read waits for the next line)
        wait_until(lambda: said.append(caught.stderr.readline()) or "most recent call first" in "".join(said), 30,
                   "a faulthandler dump after the script's SIGUSR1", step=0, seen=lambda: "".join(said))
        assert caught.poll() is None  # dumped, still running
    finally:
        for p in (plain, caught):
            p.kill()
            p.wait()
            p.stdout.close()
        caught.stderr.close()


# ---- reading srun's end ------------------------------------------------------------------------------------------
# srun -v's stderr as Slurm 22.05 wrote it on the test cluster (options table left out)
STEP = ("srun: jobid 1: nodes(2):`node[0-1]', cpu counts: 1(x2)\n"
        "srun: launch/slurm: launch_p_step_launch: CpuBindType=(null type)\n"
        "srun: launching StepId=1.2 on host node1, 1 tasks: 0\n"
        "srun: route/default: init: route default plugin loaded\n")
STARTED = STEP + "srun: launch/slurm: _task_start: Node node1, 1 tasks started\n"


def test_outcome_ok():
    assert srun_exec.outcome("node1", 0, "[]", STARTED + "srun: launch/slurm: _task_finish: node1: task 0: Completed\n",
                      5, "py-spy") == srun_exec.Outcome("[]")


def test_outcome_timeouts_tell_the_node_from_the_controller_and_the_task():
    o = srun_exec.outcome("node1", None, "", STEP, 5, "py-spy")  # launched, no task started: the node does not answer
    assert o.unreachable and o.error == "srun could not reach node1: no task started there within 5 s"
    o = srun_exec.outcome("node1", None, "", STARTED, 5, "py-spy")  # it runs there: py-spy is what hangs
    assert not o.unreachable and o.error == "py-spy on node1 did not finish within 5 s"
    o = srun_exec.outcome("node1", None, "", "", 5, "py-spy")  # no step at all: the controller, not the node
    assert not o.unreachable and o.error == "srun got no job step on node1 within 5 s (slurmctld did not answer)"


def test_outcome_task_failed_on_the_node_is_not_unreachable():
    err = (STARTED + "srun: launch/slurm: _task_finish: Received task exit notification for 1 task of StepId=1.2 "
           "(status=0x0100).\nsrun: error: node1: task 0: Exited with exit code 1\n"
           "Error: Failed to find python version from target process\n")
    o = srun_exec.outcome("node1", 1, "", err, 5, "py-spy")
    assert not o.unreachable and o.task_rc == 1
    assert o.error == "py-spy on node1: Failed to find python version from target process"


def test_outcome_program_missing_on_the_node():
    err = (STARTED + "srun: error: node1: task 0: Exited with exit code 2\n"
           "slurmstepd-node1: error: execve(): /venv/bin/py-spy: No such file or directory\n")
    o = srun_exec.outcome("node1", 2, "", err, 5, "py-spy")
    assert not o.unreachable and o.task_rc == 2 and "No such file or directory" in o.error


def test_outcome_node_that_cannot_be_reached():
    err = (STEP + "srun: error: Task launch for StepId=1.2 failed on node node1: Communication connection failure\n"
           "srun: error: Application launch failed: Communication connection failure\nsrun: Job step aborted\n")
    o = srun_exec.outcome("node1", 1, "", err, 5, "py-spy")
    assert o.unreachable
    assert o.error.startswith("srun could not reach node1: Task launch for StepId=1.2 failed on node node1")


def test_outcome_controller_that_does_not_answer_is_not_a_lost_node():
    err = ("srun: error: Unable to create step for job 1: Communication connection failure\n"
           "srun: error: Unable to contact slurm controller (connect failure)\n")
    o = srun_exec.outcome("node1", 1, "", err, 5, "py-spy")
    assert not o.unreachable and o.error.startswith("srun on node1 failed: Unable to create step for job 1")


def test_outcome_job_gone_is_an_srun_failure_not_a_lost_node():
    o = srun_exec.outcome("node1", 1, "", "srun: error: Slurm job 1 has expired\n", 5, "py-spy")
    assert not o.unreachable and o.error == "srun on node1 failed: Slurm job 1 has expired"
    err = "srun: error: Unable to create step for job 1: Requested node configuration is not available\n"
    o = srun_exec.outcome("node7", 1, "", err, 5, "py-spy")  # a node not in the job
    assert not o.unreachable
    assert o.error == "srun on node7 failed: Unable to create step for job 1: Requested node configuration is not available"


# ---- collect's error paths, through a failing srun stub on PATH ----------------------------------------------------
def _srun_stub(tmp_path: Path, monkeypatch, body: str) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "srun"
    exe.write_text("#!/bin/sh\n" + body + "\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")


def test_no_job_to_reach_a_remote_rank_through():
    res = rs.collect([rs.RemoteTarget(1, 123, "node1")], None)
    assert res[1].method.startswith("unavailable: rank 1 runs on node1, not here")
    assert not res[1].unreachable and res[1].node == "node1"


@pytest.mark.timeout(60)
def test_srun_that_never_answers_marks_the_node_unreachable_and_is_ended(tmp_path, monkeypatch):
    pidfile = tmp_path / "srun.pid"
    _srun_stub(tmp_path, monkeypatch, f'echo $$ > {pidfile}\necho "srun: launching StepId=7.1 on host $5, 1 tasks: 0" >&2\n'
                                      'exec sleep 60')
    t0 = time.monotonic()
    res = rs.collect([rs.RemoteTarget(1, 123, "node1", None), rs.RemoteTarget(2, 124, "node2", None)], "7",
                     pyspy="/x/py-spy", timeout=1.0)
    took = time.monotonic() - t0
    for r in (1, 2):
        assert res[r].unreachable, res[r]
        assert res[r].method == f"unavailable: srun could not reach node{r}: no task started there within 1 s"
    assert took < 1.0 + srun_exec.STOP_WAIT + 5  # both at once, no faulthandler try on an unreachable node
    import psutil
    assert not psutil.pid_exists(int(pidfile.read_text()))  # our own srun, ended


@pytest.mark.timeout(60)
def test_srun_saying_the_node_is_unreachable(tmp_path, monkeypatch):
    _srun_stub(tmp_path, monkeypatch, 'echo "srun: error: Task launch for StepId=7.1 failed on node node1: '
                                      'Communication connection failure" >&2; exit 1')
    res = rs.collect([rs.RemoteTarget(1, 123, "node1", None)], "7", pyspy="/x/py-spy", timeout=10)
    assert res[1].unreachable and "srun could not reach node1: Task launch" in res[1].method


@pytest.mark.timeout(60)
def test_pyspy_failing_on_the_node_falls_back_to_faulthandler_and_says_both(tmp_path, monkeypatch):
    # py-spy fails on the node; the faulthandler script finds no handler there: both failures in the result
    _srun_stub(tmp_path, monkeypatch, 'case "$*" in *py-spy*) echo "Error: Permission denied (os error 13)" >&2;'
                                      ' echo "srun: error: node1: task 0: Exited with exit code 1" >&2; exit 1;;'
                                      f' *) echo "srun: error: node1: task 0: Exited with exit code {rs.NO_HANDLER}"'
                                      f' >&2; exit {rs.NO_HANDLER};; esac')
    err = tmp_path / "rank1.err"
    err.write_text("")
    res = rs.collect([rs.RemoteTarget(1, 123, "node1", str(err))], "7", pyspy="/x/py-spy", timeout=10)
    assert res[1].method == "unavailable: py-spy failed and no faulthandler on SIGUSR1"
    assert res[1].error == "py-spy on node1: Permission denied (os error 13)"
    assert not res[1].unreachable


@pytest.mark.timeout(60)
def test_without_the_ranks_stderr_file_no_signal_is_sent(tmp_path, monkeypatch):
    calls = tmp_path / "calls"
    _srun_stub(tmp_path, monkeypatch, f'echo "$*" >> {calls}; echo "Error: boom" >&2; '
                                      'echo "srun: error: node1: task 0: Exited with exit code 1" >&2; exit 1')
    res = rs.collect([rs.RemoteTarget(1, 123, "node1", str(tmp_path / "missing.err"))], "7", pyspy="/x/py-spy")
    assert res[1].method.startswith("unavailable: py-spy failed and no stderr file")
    assert len(calls.read_text().splitlines()) == 1 and "py-spy" in calls.read_text()  # no kill -USR1 srun


def test_unreachable_nodes_name_each_lost_node_once_with_its_ranks():
    why = "srun could not reach node1: no answer within 10 s"
    results = {0: stack_types.StackResult(0, 10, "py-spy"),
               1: stack_types.StackResult(1, 11, f"unavailable: {why}", error=why, node="node1", unreachable=True),
               2: stack_types.StackResult(2, 12, f"unavailable: {why}", error=why, node="node1", unreachable=True),
               3: stack_types.StackResult(3, 13, "unavailable: py-spy on node2: boom", error="py-spy on node2: boom",
                                     node="node2")}
    assert rs.unreachable_nodes(results) == {"node1": ((1, 2), f"{why} (taking stacks of ranks 1, 2)")}
