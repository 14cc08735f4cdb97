"""`ddptui PROFILE` of a Slurm batch run: submit the job, whose engine runs inside it, say where its record is, then
follow that engine's console until the job ends. Only a viewer: its terminal closing (SIGHUP) or a SIGKILL leaves
the job judging itself; Ctrl-C/SIGTERM ask the engine to stop the run, as for any launched run."""
from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

from ..runners.edge import slurm_job
from ..runners.edge.record import new_run_dir
from ..runners.edge.slurm_job import SlurmJobWatch
from ..runners.evidence import slurm_state
from ..runners.launch.plan import SlurmJob
from ..runners.launch.slurm import prepare, submit_mode
from ..runners.session import make_plan

POLL = 1.0  # seconds between looks at the console file and the job's state


def is_batch(profile) -> bool:
    """The profile runs as a batch job ddptui submits (runner slurm, submit sbatch or auto outside an allocation)."""
    if profile.runner != "slurm" or profile.workload.command:
        return False  # an srun command line is a step or its own job, watched from here
    return submit_mode(profile.slurm.submit, os.environ)[0] == "sbatch"


def submit(profile, runs_dir: str) -> int:
    """Submit, print the job id, the record and how to follow it; then follow it here. Exit code: the run's."""
    run_dir = new_run_dir(Path(runs_dir).resolve(), profile.name)
    plan = make_plan(profile, run_dir, 0, None)
    assert plan.job is not None and plan.job.mode == "sbatch", "is_batch() chose this path"
    prepare(plan, run_dir)
    job_id, why = slurm_job.submit(list(plan.procs[0].argv), plan.procs[0].cwd)
    if job_id is None:
        print(f"ddptui: sbatch failed: {why}", file=sys.stderr)
        return 1
    print(f"ddptui: submitted Slurm job {job_id}; its engine runs inside the job and writes the record {run_dir}",
          flush=True)
    print(f"ddptui: follow it from any shell: ddptui attach {run_dir}  (or: ddptui attach --slurm {job_id})",
          flush=True)
    return follow(job_id, run_dir, stops=True)


def follow(job_id: str, run_dir: Path, stops: bool) -> int:
    """Print what the job's engine says (slurm/batch.out) until the job ends; the run's exit code from summary.json.
    stops: Ctrl-C/SIGTERM ask the engine to stop the run (a second Ctrl-C cancels the job); else they detach."""
    asked: list[str] = []

    def on_signal(signum, frame) -> None:
        asked.append(signal.Signals(signum).name)
    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for s in old:
        signal.signal(s, on_signal)
    watch = SlurmJobWatch(SlurmJob("sbatch", "srun", "", job_id))
    console, offset, sent = run_dir / "slurm" / "batch.out", 0, 0
    try:
        while True:
            offset = _relay(console, offset)
            if asked and not stops:
                print(f"ddptui: detached; job {job_id} goes on judging itself (ddptui attach {run_dir})")
                return 0
            if len(asked) > sent:
                sent = len(asked)
                if sent == 1:
                    print(f"ddptui: {asked[0]}: asking the engine of job {job_id} to stop the run", flush=True)
                    problem = slurm_job.signal_engine(job_id, "TERM")
                else:
                    print(f"ddptui: {asked[-1]} again: cancelling job {job_id}", flush=True)
                    watch.cancel()
                    problem = None
                if problem:
                    print(f"ddptui: {problem}", file=sys.stderr)
            info = watch.poll()
            if info is None and watch.last is None and watch.error:
                print(f"ddptui: cannot follow job {job_id}: {watch.error}", file=sys.stderr)
                return 1
            if info is None or info.state in slurm_state.ENDED:
                break
            time.sleep(POLL)
        _relay(console, offset)
        return _end_code(run_dir, job_id, watch.last)
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _relay(path: Path, offset: int) -> int:
    """The console lines written since `offset`, to stdout; the new offset (whole lines only)."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except OSError:
        return offset
    end = data.rfind(b"\n") + 1
    if end:
        sys.stdout.write(data[:end].decode("utf-8", "replace"))
        sys.stdout.flush()
    return offset + end


def _end_code(run_dir: Path, job_id: str, last) -> int:
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
        return int(summary["exit_code"])
    except (OSError, ValueError, KeyError, TypeError):
        state = last.state if last is not None else "unknown"
        print(f"ddptui: job {job_id} ended ({state}) and its engine left no summary in {run_dir}", file=sys.stderr)
        return 1
