"""Commands run on a job's nodes through srun (a step inside the allocation): argv, environment, running them side
by side, and what came back."""
from __future__ import annotations

import re
import subprocess
import time
from dataclasses import dataclass

from ..evidence import stack_types

REMOTE_TIMEOUT = 10.0  # seconds for every srun to come back (a step starts in well under 1 s on a live node)
STOP_WAIT = 3.0  # seconds our own srun gets to cancel its step after SIGTERM, before SIGKILL
# srun's own words when the node (its slurmd) could not be reached or is down, as opposed to a task that ran and
# failed, a job that is gone, or a controller that did not answer (the same socket errors, not naming a node)
_UNREACHABLE = re.compile(r"Task launch for \S+ failed on node|Required node not available|Node not responding|"
                          r"on node \S+: (Communication connection failure|Socket timed out|Zero Bytes were transmitted)")
_TASK_EXIT = re.compile(r"^srun: error: \S+: tasks? [\d,-]+: (Exited with exit code (\d+)|.*)$")


def short_host(host: str) -> str:
    return host.strip().lower().split(".", 1)[0]


def is_local(host: str, here: str) -> bool:
    """A rank runs on this machine when the host its hello gave is this machine's host name (short names compared:
    one side may say node1.cluster, the other node1). No host yet (no hello): local, as every rank was before
    multi-node runs. In a one-host Slurm cluster (several slurmd on one machine) every rank's host is this host, so
    its pid is local and py-spy and psutil reach it directly."""
    return not host or short_host(host) == short_host(here)


def srun_argv(srun: str, job_id: str, node: str, command: list[str]) -> list[str]:
    """One task on `node` inside job `job_id`, sharing the job's resources with the running ranks (--overlap: a
    step of its own would otherwise wait for CPUs the ranks hold)."""
    # -v: srun says when the step is launched and when its task started, which tells a node that does not answer
    # from a controller that does not, or a task that hangs
    return [srun, "--overlap", "--jobid", str(job_id), "-w", node, "-N1", "-n1", "-v",
            "--job-name", "ddptui-stacks", *command]


def srun_env(environ: dict[str, str]) -> dict[str, str]:
    """Our environment for srun without the SLURM_* variables of an allocation ddptui may run in (SLURM_NTASKS,
    SLURM_NTASKS_PER_NODE... are srun's input too and would contradict -N1 -n1); SLURM_CONF finds the cluster."""
    env = {k: v for k, v in environ.items() if not k.startswith("SLURM_") or k == "SLURM_CONF"}
    env["RUST_BACKTRACE"] = "0"
    return env


@dataclass(frozen=True)
class Outcome:
    """What one srun came back with: stdout, and the failure in words (None: the task ran and exited 0)."""

    out: str
    error: str | None = None
    unreachable: bool = False  # the node could not be reached (srun timed out, or said it could not talk to it)
    task_rc: int | None = None  # the task's own exit code when it ran and failed


def outcome(node: str, rc: int | None, out: str, err: str, timeout: float, what: str) -> Outcome:
    """Reads one srun's end (run with -v: its stderr says whether the step was launched and the task started);
    `rc` None means it did not finish within `timeout` seconds. `what`: the task's program, for the words."""
    srun_errors, task_lines, task_rc, ran = [], [], None, False
    for ln in err.splitlines():
        ln = ln.strip()
        m = _TASK_EXIT.match(ln)
        if m:
            ran = True
            task_rc = int(m.group(2)) if m.group(2) else task_rc
            if not m.group(2):
                task_lines.append(m.group(1))  # "Killed", "Segmentation fault"...
        elif ln.startswith("srun: error: "):
            srun_errors.append(ln.removeprefix("srun: error: "))
        elif ln and not ln.startswith("srun: "):  # the task's own stderr (and slurmstepd's words about it)
            task_lines.append(ln)
    if rc is None:
        if "tasks started" in err:  # it runs there: the node answers, the task is what hangs
            return Outcome(out, f"{what} on {node} did not finish within {timeout:g} s")
        if "launching StepId=" in err:  # the step exists, its task never started on the node
            return Outcome(out, f"srun could not reach {node}: no task started there within {timeout:g} s", True)
        return Outcome(out, f"srun got no job step on {node} within {timeout:g} s (slurmctld did not answer)")
    if rc == 0:
        return Outcome(out)
    if ran or (task_lines and not srun_errors):  # the task ran on the node and failed there
        said = stack_types.pyspy_error("\n".join(task_lines), task_rc)
        return Outcome(out, f"{what} on {node}: {said}", False, task_rc if task_rc is not None else rc)
    words = "; ".join(dict.fromkeys(srun_errors)) or f"srun exited {rc}"
    if _UNREACHABLE.search(err):
        return Outcome(out, f"srun could not reach {node}: {words}", True)
    return Outcome(out, f"srun on {node} failed: {words}")


def run_all(argvs: dict, env: dict[str, str], timeout: float) -> dict:
    """key -> (rc or None if timed out, stdout, stderr), every argv run at the same time, all within `timeout`."""
    procs: dict = {}
    done: dict[object, tuple[int | None, str, str]] = {}
    for key, argv in argvs.items():
        try:
            procs[key] = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          stdin=subprocess.DEVNULL, env=env)
        except OSError as e:
            done[key] = (127, "", f"srun: error: cannot run {argv[0]}: {e.strerror or e}")
    deadline = time.monotonic() + timeout
    late = []
    for key, p in procs.items():
        try:
            out, err = p.communicate(timeout=max(0.0, deadline - time.monotonic()))
            done[key] = (p.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))
        except subprocess.TimeoutExpired:
            p.terminate()  # our own srun: on SIGTERM it cancels the step it started
            late.append(key)
    stop = time.monotonic() + STOP_WAIT
    for key in late:
        p = procs[key]
        try:
            out, err = p.communicate(timeout=max(0.0, stop - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
        done[key] = (None, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))
    return done
