"""`ddptui PROFILE` of a Slurm batch run: submit the job, whose engine runs inside it, say where its record is, then
follow its record (tui/slurm_follow.py: the console, or the dashboard) until the job's run ends; with --detach, return
at once. Only a viewer: its terminal closing (SIGHUP) or a SIGKILL leaves the job judging itself; Ctrl-C/SIGTERM of
the console ask the engine to stop the run, as for any launched run."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from ..runners.edge import slurm_job
from ..runners.edge.record import new_run_dir
from ..runners.launch.slurm import prepare, submit_mode
from ..runners.session import make_plan
from .attach_words import attach_command
from .slurm_follow import follow


def is_batch(profile) -> bool:
    """The profile runs as a batch job ddptui submits (runner slurm, submit sbatch or auto outside an allocation)."""
    if profile.runner != "slurm" or profile.workload.command:
        return False  # an srun command line is a step or its own job, watched from here
    return submit_mode(profile.slurm.submit, os.environ)[0] == "sbatch"


def submit(profile, runs_dir: str, ui: bool = False, detach: bool = False) -> int:
    """Submit, print the job id, the record and how to follow it; then follow it here (ui: in the dashboard), unless
    detach. Exit code: the run's (0 detached)."""
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
    print(f"ddptui: follow it from any shell: {attach_command(run_dir)}  (or: ddptui attach --slurm {job_id})",
          flush=True)
    if detach:
        return 0
    return follow(job_id, run_dir, stops=True, ui=ui)
