"""Following and ending the Slurm job (or step) of a run: squeue/scontrol polls, node lists, scancel. The I/O edge only:
runners/evidence/slurm_state.py reads what Slurm says, the judge (job_follow.py) decides what it means."""
from __future__ import annotations

import subprocess

from ..evidence import slurm_state
from ..evidence.slurm_state import JobInfo
from ..launch.plan import SlurmJob

CMD_TIMEOUT = 5.0  # seconds one Slurm client call may take (slurmctld answers in milliseconds when it is up)
# seconds teardown waits, after scancel, for the job to leave RUNNING/COMPLETING (KillWait ~5 s); within the stopper's
# 30 s bound on a stopped ddptui (tui/stopper.py), with the rank teardown's deadline (5 s + 2 s) after it. Once the
# launchers exited, a node known lost is not waited for (Slurm holds it until SlurmdTimeout).
GONE_DEADLINE = 20.0
LOG_TAIL = 4 << 20  # bytes of slurmctld's log read from its end for a job's kill requests


class SlurmJobWatch:
    """One run's Slurm job: its id (an srun outside any allocation: found by its name), its state as Slurm reports it,
    and scancel. Every command takes the environment as it is (SLURM_CONF). Mode "sbatch": a ddptui batch job followed
    from outside it (tui/slurm_follow.py), its id known; the engine's own job is a step of it ("step" mode)."""

    def __init__(self, job: SlurmJob) -> None:
        self.job = job
        self._id = job.job_id
        self.step: str | None = None  # "JOB.STEP" of our srun, step mode
        self.last: JobInfo | None = None
        self.error: str | None = None  # the last client failure, said once per kind
        self.unanswered = False  # the last poll got no answer from Slurm (a client timeout, slurmctld busy or down)
        self._hostnames: dict[str, tuple[str, ...]] = {}
        self._ctld_log: str | None = None  # slurmctld's log file, as `scontrol show config` names it
        # an srun run outside any allocation makes its own job: followed and ended as a job, found by its name; a batch
        # job followed from outside is ended as a job too
        self.own_job = job.mode == "sbatch" or job.job_id is None

    def _find_by_name(self) -> str | None:
        out = self._run(["squeue", "-h", "--name", self.job.name, "-o", "%i"])
        ids = [x.strip() for x in (out or "").splitlines() if x.strip().isdigit()]
        return ids[0] if ids else None

    # ---- the job id ------------------------------------------------------------------------------------
    @property
    def job_id(self) -> str | None:
        return self._id

    # ---- Slurm's answers -------------------------------------------------------------------------------
    def _run(self, argv: list[str]) -> str | None:
        try:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=CMD_TIMEOUT, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as e:
            self.error = f"{argv[0]}: {e}"
            return None
        if r.returncode != 0:
            self.error = f"{' '.join(argv[:2])}: {(r.stderr or r.stdout).strip()[:200]}"
            return None
        return r.stdout

    def poll(self) -> JobInfo | None:
        """The job as Slurm sees it now: squeue while it lists it, then scontrol (which keeps it MinJobAge seconds);
        None while the id is not known or Slurm has forgotten the job."""
        jid = self.job_id
        if jid is None and self.job.mode == "step":
            jid = self._id = self._find_by_name()
        if jid is None:
            return None
        out = self._run(["squeue", "-h", "-j", jid, "-o", "%i|%T|%r|%N"])
        info = slurm_state.parse_squeue(out, jid) if out is not None else None
        answered = out is not None
        if info is None or info.state in slurm_state.ENDED:
            out = self._run(["scontrol", "show", "job", jid, "-o"])
            info = (slurm_state.parse_scontrol(out, jid) if out is not None else None) or info
            answered = answered or out is not None or "Invalid job id" in (self.error or "")
        self.unanswered = info is None and not answered
        if info is not None:
            self.last = info
        return info

    def hostnames(self, nodelist: str) -> tuple[str, ...]:
        """`n[1-2]` -> ("n1", "n2") as Slurm expands it."""
        if not nodelist:
            return ()
        if nodelist not in self._hostnames:
            out = self._run(["scontrol", "show", "hostnames", nodelist])
            if out is None:
                return (nodelist,)
            self._hostnames[nodelist] = tuple(x.strip() for x in out.splitlines() if x.strip())
        return self._hostnames[nodelist]

    def down_nodes(self, nodes: tuple[str, ...]) -> tuple[str, ...]:
        """Which of `nodes` Slurm has down, failing or not responding (the ones a NODE_FAIL job lost)."""
        if not nodes:
            return ()
        out = self._run(["sinfo", "-h", "-N", "-n", ",".join(nodes), "-t", "down,fail,failing,no_respond,drain",
                         "-o", "%N"])
        return tuple(sorted({x.strip() for x in (out or "").splitlines() if x.strip()}))

    def find_step(self) -> str | None:
        """Step mode: the id of the step our srun started (by the name ddptui gave it)."""
        if self.step is None and self.job_id is not None:
            out = self._run(["squeue", "-h", "-s", "-j", self.job_id, "-o", "%i|%j"])
            self.step = slurm_state.parse_steps(out, self.job.name) if out is not None else None
        return self.step

    def kill_requests(self) -> tuple[list[tuple[float, int, str]], str]:
        """Who asked Slurm to kill the job, as slurmctld logged it: (wall time, uid, user name) of each request, and
        where that was read (or why it could not be: on most clusters the controller's log is not readable here)."""
        jid = self.job_id
        if jid is None:
            return [], "the job id is not known"
        if self._ctld_log is None:
            out = self._run(["scontrol", "show", "config"])
            self._ctld_log = slurm_state.config_value(out or "", "SlurmctldLogFile") or ""
        path = self._ctld_log
        if not path:
            return [], "slurmctld writes no log file ddptui could read (SlurmctldLogFile unset)"
        try:
            with open(path, "rb") as fh:
                fh.seek(max(0, fh.seek(0, 2) - LOG_TAIL))
                text = fh.read().decode("utf-8", "replace")
        except OSError as e:
            return [], f"slurmctld's log {path} is not readable here ({e.strerror or e})"
        reqs = []
        for when, uid in slurm_state.kill_requests(text, jid):
            wall = slurm_state.slurm_time(when)
            if wall is not None:
                reqs.append((wall, uid, _user(uid)))
        return reqs, path

    # ---- ending it -------------------------------------------------------------------------------------
    def cancel(self) -> str:
        """scancel the job (a step: only the step, the allocation is the user's). Returns what was cancelled."""
        if not self.own_job:
            step = self.find_step()
            if step is None:
                return "no step found to cancel (our srun is ended with TERM)"
            self._run(["scancel", step])
            return f"step {step}"
        jid = self.job_id or self._find_by_name()
        if jid is None:  # srun's job is not listed (yet): the job's name is ddptui's own and unique to the run
            self._run(["scancel", "--name", self.job.name])
            return f"job named {self.job.name}"
        self._run(["scancel", jid])
        return f"job {jid}"

    def held_on(self) -> tuple[str, ...] | None:
        """The nodes Slurm still holds the job on (step mode: our step), () once it holds nothing; None when Slurm
        could not be asked. A job COMPLETING on a node that is gone is held there until Slurm marks it down."""
        if not self.own_job:
            if self.step is None or self.job_id is None:
                return ()
            out = self._run(["squeue", "-h", "-s", "-j", self.job_id, "-o", "%i|%j|%N"])
            if out is None:
                return None
            nodes = slurm_state.step_nodes(out, self.job.name)
            return () if nodes is None else self.hostnames(nodes)
        if self.job_id is None:
            return ()
        info = self.poll()
        return self.hostnames(info.nodelist) if info is not None and info.state in slurm_state.HOLDING else ()

    def slurmd_timeout(self) -> str | None:
        """How long Slurm waits for a silent slurmd before it marks its node down ("300 sec"), None if not said."""
        out = self._run(["scontrol", "show", "config"])
        return slurm_state.config_value(out, "SlurmdTimeout") if out is not None else None

    def gone(self) -> bool:
        """Slurm holds nothing of the job any more (step mode: the step is gone from squeue)."""
        if not self.own_job:
            if self.step is None or self.job_id is None:
                return True
            out = self._run(["squeue", "-h", "-s", "-j", self.job_id, "-o", "%i|%j"])
            return out is not None and slurm_state.parse_steps(out, self.job.name) is None
        return slurm_state.gone(self.poll()) if self.job_id is not None else True


def submit(argv: list[str], cwd: str) -> tuple[str | None, str]:
    """Run `sbatch --parsable ...`: (the job id, "") or (None, why it failed, in sbatch's words)."""
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=30, cwd=cwd, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"{argv[0]}: {e}"
    job = slurm_state.sbatch_job_id(r.stdout) if r.returncode == 0 else None
    return job, "" if job else (r.stderr or r.stdout).strip()[:300] or f"sbatch exited {r.returncode}"


def record_of(job_id: str) -> tuple[str | None, str]:
    """The record of a job ddptui submitted (its engine writes it), or (None, "") for another job; (None, why) when
    Slurm could not be asked."""
    watch = SlurmJobWatch(SlurmJob("sbatch", "srun", "", job_id))
    out = watch._run(["scontrol", "show", "job", job_id, "-o"])
    if out is None:
        return None, watch.error or "scontrol failed"
    return slurm_state.ddptui_record(out, job_id), ""


def ended_by_slurm(job_id: str) -> bool:
    """Whether Slurm is ending the job now (scancel, its time limit, a node failure): its state an ended one, or
    COMPLETING (slurmctld sets it before it signals the job's steps; `scancel --batch --signal=TERM`, ddptui's own
    stop from another host, leaves it RUNNING)."""
    info = SlurmJobWatch(SlurmJob("sbatch", "srun", "", job_id)).poll()
    return info is not None and (info.state in slurm_state.ENDED or info.state == "COMPLETING")


def signal_engine(job_id: str, sig: str) -> str | None:
    """Signal the engine a ddptui batch job runs (the batch step only: it tears its own step down); why not, or None."""
    watch = SlurmJobWatch(SlurmJob("sbatch", "srun", "", job_id))
    return None if watch._run(["scancel", "--batch", f"--signal={sig}", job_id]) is not None else watch.error


def _user(uid: int) -> str:
    """The user name of a uid on this machine, "" when it has none."""
    import pwd
    try:
        return pwd.getpwuid(uid).pw_name
    except (KeyError, OverflowError):
        return ""
