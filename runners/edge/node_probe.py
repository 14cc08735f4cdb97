"""Whether a node of the job still answers, and the state of given processes there: one `srun --overlap` per node."""
from __future__ import annotations

import os
import shutil

from ..judge.job_follow import NodeAnswer
from . import srun_exec

# On the node: each pid and the State line of its /proc status ("T (stopped)"), or "gone"; nothing of ddptui needed
_STATE_SCRIPT = ('for p; do s=$(sed -n "s/^State:[[:space:]]*//p" /proc/$p/status 2>/dev/null); '
                 'echo "$p ${s:-gone}"; done')


def argv(srun: str, job_id: str, node: str, pids) -> list[str]:
    return srun_exec.srun_argv(srun, job_id, node, ["/bin/sh", "-c", _STATE_SCRIPT, "sh", *map(str, pids)])


def states(out: str) -> dict[int, str]:
    """pid -> its state as the script printed it ("S (sleeping)", "T (stopped)", "gone")."""
    got = {}
    for line in out.splitlines():
        pid, _, state = line.strip().partition(" ")
        if pid.isdigit() and state:
            got[int(pid)] = state.strip()
    return got


def answer(node: str, rc: int | None, out: str, err: str, timeout: float) -> NodeAnswer:
    """One srun's end read as the node's answer: it answered (the states of the pids there), srun could not reach
    it (srun_exec.outcome's words), or neither could be told (the job gone, the controller silent)."""
    o = srun_exec.outcome(node, rc, out, err, timeout, "the state probe")
    if o.error is None:
        return NodeAnswer("answered", "", states(o.out))
    return NodeAnswer("unreachable" if o.unreachable else "unknown", short(o.error.removeprefix(
        f"srun could not reach {node}: ")), {})


def short(said: str) -> str:
    """srun's reasons without their prefixes: "Task launch for StepId=1.2 failed on node node1: Communication
    connection failure; Application launch failed: Communication connection failure" -> "Communication connection
    failure"."""
    return "; ".join(dict.fromkeys(part.rsplit(": ", 1)[-1].strip() for part in said.split("; ") if part.strip()))


def probe(job_id: str | None, nodes: dict[str, tuple[int, ...]], timeout: float = srun_exec.REMOTE_TIMEOUT,
          srun: str = "srun") -> dict[str, NodeAnswer]:
    """node -> its answer, every node asked at the same time inside job `job_id`, all within `timeout` (+ srun's own
    stop wait). `nodes`: node -> the pids whose state to read there."""
    exe = shutil.which(srun)
    if not job_id or exe is None or not nodes:
        why = "no Slurm job to ask through" if not job_id else f"{srun} not found here"
        return {node: NodeAnswer("unknown", why, {}) for node in nodes}
    ran = srun_exec.run_all({node: argv(exe, job_id, node, pids) for node, pids in nodes.items()},
                                srun_exec.srun_env(dict(os.environ)), timeout)
    return {node: answer(node, rc, out, err, timeout) for node, (rc, out, err) in ran.items()}
