"""What Slurm's own words say about a job: squeue/scontrol/sbatch output parsed, when to ask again, what its end means."""
from __future__ import annotations

import re
from dataclasses import dataclass

# the job has not started its processes yet: the ranks' stall clocks do not run
WAITING = frozenset({"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD",
                     "SUSPENDED", "STOPPED", "RESIZING"})
RUNNING = frozenset({"RUNNING", "COMPLETING", "STAGE_OUT", "SIGNALING"})
# a node of the job failed: the run lost a node
NODE_FAILED = frozenset({"NODE_FAIL", "BOOT_FAIL"})
ENDED = frozenset({"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "BOOT_FAIL", "PREEMPTED",
                   "DEADLINE", "OUT_OF_MEMORY", "REVOKED", "SPECIAL_EXIT"})
# still holding processes or nodes: teardown waits until the job is in none of these
HOLDING = frozenset({"RUNNING", "COMPLETING", "CONFIGURING", "STAGE_OUT", "SIGNALING", "SUSPENDED", "STOPPED"})

POLL_WAITING, POLL_RUNNING = 1.0, 3.0  # seconds between polls while the job waits for nodes / while it runs


@dataclass(frozen=True)
class JobInfo:
    """One answer of Slurm about a job."""
    job_id: str
    state: str  # Slurm's JobState, upper case; "" when unknown
    reason: str  # "" when Slurm says None
    nodelist: str  # Slurm's compressed form ("n[1-2]"); "" while pending
    exit_code: str = ""  # scontrol's ExitCode ("0:15"); "" from squeue
    end: str = ""  # scontrol's EndTime ("2026-12-04T19:05:32", Slurm's local time), set once the job ended; "" else


def sbatch_job_id(text: str) -> str | None:
    """The job id `sbatch --parsable` printed: its first line, "ID" or "ID;CLUSTER"; None until it is complete."""
    if "\n" not in text:
        return None  # the line may still be being written
    first = text.split("\n", 1)[0].strip()
    jid = first.split(";", 1)[0].strip()
    return jid if jid.isdigit() else None


def _reason(text: str) -> str:
    text = text.strip()
    return "" if text in ("None", "(null)", "") else text


def parse_squeue(out: str, job_id: str) -> JobInfo | None:
    """`squeue -h -j ID -o '%i|%T|%r|%N'`: the job's line, None when squeue no longer lists it."""
    for line in out.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 4 and parts[0].strip() == job_id:
            return JobInfo(job_id, parts[1].strip().upper(), _reason(parts[2]), parts[3].strip())
    return None


_KEY = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z:/_]*)=")


def fields(line: str) -> dict[str, str]:
    """One line of `scontrol show ... -o`: its Key=Value fields. A value runs to the next " Key=": Slurm does not
    quote it, and a path (StdOut, WorkDir, Command) may hold spaces."""
    keys = list(_KEY.finditer(line))
    return {m.group(1): line[m.end():nxt.start() if nxt is not None else len(line)].strip()
            for m, nxt in zip(keys, [*keys[1:], None], strict=False)}


def parse_scontrol(out: str, job_id: str) -> JobInfo | None:
    """`scontrol show job ID -o`: one line of Key=Value fields; None when Slurm no longer knows the job."""
    for line in out.splitlines():
        kv = fields(line)
        if kv.get("JobId") == job_id and "JobState" in kv:
            nodes = kv.get("NodeList", "")
            end = kv.get("EndTime", "")
            return JobInfo(job_id, kv["JobState"].upper(), _reason(kv.get("Reason", "")),
                           "" if nodes == "(null)" else nodes, kv.get("ExitCode", ""),
                           end if end[:1].isdigit() else "")
    return None


def parse_steps(out: str, name: str) -> str | None:
    """`squeue -h -s -j ID -o '%i|%j'`: the id ("JOB.STEP") of the step called `name`, None when not listed."""
    for line in out.splitlines():
        step, _, step_name = line.strip().partition("|")
        if step_name.strip() == name and "." in step:
            return step.strip()
    return None


def step_nodes(out: str, name: str) -> str | None:
    """`squeue -h -s -j ID -o '%i|%j|%N'`: the node list of the step called `name`, None when it is not listed."""
    for line in out.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 3 and parts[1].strip() == name and "." in parts[0]:
            return parts[2].strip()
    return None


def config_value(out: str, key: str) -> str | None:
    """One setting of `scontrol show config` ("SlurmdTimeout           = 300 sec" -> "300 sec"), None if absent or
    unset ("(null)")."""
    for line in out.splitlines():
        k, sep, v = line.partition("=")
        if sep and k.strip() == key:
            v = v.strip()
            return None if v in ("(null)", "None", "") else v
    return None


def released_words(what: str, seconds: float, running: list[str], held: tuple[str, ...] | None, lost: set[str],
                   slurmd_timeout: str | None) -> str:
    """What teardown waited for after its scancel, and what it did not wait for, in one line: the launchers
    (`running`: still running), the nodes Slurm still holds the job on (`held`: None when it could not be asked);
    a lost node's share of the job Slurm releases only once it marks the node down (SlurmdTimeout)."""
    if running or (held and not set(held) <= lost):
        on = f" on {', '.join(held)}" if held else ""
        return (f"ddptui: Slurm still holds {what}{on} {seconds:.0f} s after scancel"
                + (f"; {', '.join(running)} still running" if running else ""))
    if held is None:
        return f"ddptui: its launcher exited {seconds:.1f} s after scancel; Slurm could not be asked about {what}"
    if not held:
        return f"ddptui: {what} ended {seconds:.1f} s after scancel (its launcher exited, Slurm holds nothing of it)"
    nodes = ", ".join(held)
    until = f" (SlurmdTimeout {slurmd_timeout})" if slurmd_timeout else ""
    return (f"ddptui: its launcher exited {seconds:.1f} s after scancel; Slurm keeps {what} COMPLETING on {nodes}, "
            f"lost, until it marks {'it' if len(held) == 1 else 'them'} down{until}: not waited for")


_NODE_FAILURE = re.compile(r"srun: error: Node failure on (\S+)")
NODE_FAILURE_NEEDLE = "Node failure on"


def node_failure(line: str) -> str | None:
    """The node srun says failed under the job ("srun: error: Node failure on n2"), or None."""
    m = _NODE_FAILURE.search(line)
    return m.group(1) if m else None


_TASK_END = re.compile(r"srun: error: \S+: tasks? ([\d,\-]+): (.+?)\s*$")
_TASK_SIGNAL = {"Killed": -9, "Terminated": -15, "Aborted": -6, "Segmentation fault": -11, "Bus error": -7,
                "Illegal instruction": -4, "Floating point exception": -8, "Interrupt": -2, "Hangup": -1}
TASK_END_NEEDLE = "srun: error: "


def _tasks(spec: str) -> list[int]:
    out: list[int] = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        if lo.isdigit() and (not hi or hi.isdigit()):
            out += range(int(lo), int(hi or lo) + 1)
    return out


def task_ends(line: str) -> list[tuple[int, int]]:
    """(task, Popen-style return code) pairs srun reports for tasks that ended badly: "srun: error: n2: task 1: Killed"
    -> [(1, -9)]; "srun: error: n1: tasks 0-1: Exited with exit code 3" -> [(0, 3), (1, 3)]."""
    m = _TASK_END.search(line)
    if not m:
        return []
    what = m.group(2)
    code = int(what.rsplit(" ", 1)[1]) if what.startswith("Exited with exit code ") else _TASK_SIGNAL.get(
        what.split(" (core dumped)")[0])
    return [] if code is None else [(t, code) for t in _tasks(m.group(1))]


def poll_interval(state: str | None) -> float:
    """How long to wait before asking Slurm again: often while the job waits (its start ends the pending display),
    rarely while it runs (the ranks' own output says more, sooner)."""
    return POLL_RUNNING if state in RUNNING else POLL_WAITING


def changed(prev: JobInfo | None, now: JobInfo) -> bool:
    """Worth a JobState event: the state, the reason or the nodes differ from what was said last."""
    return prev is None or (prev.state, prev.reason, prev.nodelist) != (now.state, now.reason, now.nodelist)


def gone(info: JobInfo | None) -> bool:
    """Teardown may stop waiting: Slurm no longer knows the job, or it holds no process or node any more."""
    return info is None or info.state not in HOLDING


def end_words(info: JobInfo) -> str:
    """The job's end for the summary and the console: "CANCELLED", "FAILED (NonZeroExitCode, exit 1:0)"."""
    extra = [x for x in (info.reason, f"exit {info.exit_code}" if info.exit_code else "") if x]
    return info.state + (f" ({', '.join(extra)})" if extra else "")


# What Slurm itself records of who ended a job, strongest first: slurmctld's log names the uid of every kill request
# (`_slurm_rpc_kill_job: REQUEST_KILL_JOB JobId=4 uid 0`, at info level; scontrol and squeue keep no canceller, and
# sacct needs accounting storage); slurmstepd writes when and why into the tasks' stderr and the batch output
# (`slurmstepd-n1: error: *** STEP 4.0 ON n1 CANCELLED AT 2026-12-04T19:32:02 ***`, "... DUE TO TIME LIMIT ***").
CANCEL_NEEDLE = "CANCELLED AT"
_STEPD_CANCEL = re.compile(r"\*\*\* (STEP|JOB) (\S+) ON (\S+) CANCELLED AT (\S+?)(?: DUE TO ([^*]*?))? \*\*\*")
_KILL_REQUEST = re.compile(r"^\[(\S+)\] _slurm_rpc_kill_job: REQUEST_KILL_JOB JobId=(\S+) uid (\d+)")
# the DUE TO words of a slurmstepd cancel line that still mean "Slurm stopped the ranks", and how to say them
_DUE = {"": "cancelled", "TIME LIMIT": "ended at its time limit", "PREEMPTION": "preempted"}


@dataclass(frozen=True)
class Cancel:
    """slurmstepd's word that Slurm cancelled a step or a job: what, on which node, when (Slurm's local time), why."""
    what: str  # "STEP 4.0" | "JOB 4"
    node: str
    at: str  # "2026-12-04T19:32:02"
    due: str  # "" (a cancel: scancel, anyone's), "TIME LIMIT", "PREEMPTION", "NODE FAILURE, SEE SLURMCTLD LOG ..."


def stepd_cancel(line: str) -> Cancel | None:
    """The cancel slurmstepd wrote into a task's stderr or the batch output, or None."""
    m = _STEPD_CANCEL.search(line)
    return Cancel(f"{m.group(1)} {m.group(2)}", m.group(3), m.group(4), (m.group(5) or "").strip()) if m else None


def cancel_words(due: str) -> str | None:
    """How Slurm stopped the ranks, in words ("cancelled", "ended at its time limit", "preempted"); None for a cancel
    that is no stop of the job as such (a node failure: a node lost; a requeue)."""
    return _DUE.get(due)


def kill_requests(log_text: str, job_id: str) -> list[tuple[str, int]]:
    """(time as slurmctld wrote it, uid) of every kill request of the job in slurmctld's log, in the log's order."""
    out = []
    for line in log_text.splitlines():
        m = _KILL_REQUEST.match(line)
        if m and m.group(2) == job_id:
            out.append((m.group(1), int(m.group(3))))
    return out


def slurm_time(text: str) -> float | None:
    """Slurm's local time "2026-12-04T19:32:02" (or with ".835", as its logs write it) as a wall-clock time."""
    import time
    head, _, frac = text.partition(".")
    try:
        wall = time.mktime(time.strptime(head, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None
    return wall + (float(f"0.{frac}") if frac.isdigit() else 0.0)


def ddptui_record(out: str, job_id: str) -> str | None:
    """The record a ddptui-submitted batch job writes, from `scontrol show job ID -o`: its name is ddptui-<record's
    folder name> and its StdOut that folder's slurm/batch.out (runners/launch/slurm.py); None for any other job."""
    for line in out.splitlines():
        kv = fields(line)
        if kv.get("JobId") != job_id:
            continue
        name, out_path = kv.get("JobName", ""), kv.get("StdOut", "")
        parts = out_path.rsplit("/", 3)
        if len(parts) == 4 and parts[2:] == ["slurm", "batch.out"] and name == f"ddptui-{parts[1]}":
            return out_path[: -len("/slurm/batch.out")]
    return None
