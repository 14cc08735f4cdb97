"""Jobs started outside ddptui as a user starts them (torchrun in the background), found once their ranks run, and
ended."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import psutil

from ddptui.runners.attach.find import NotAJob, find_job

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
TORCHRUN = str(Path(sys.executable).parent / "torchrun")


def job_env() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1"}


def torchrun(tmp_path: Path, script: str, *opts: str, out: Path | None = None) -> subprocess.Popen:
    """`torchrun --nproc-per-node 2 [opts] script > out 2>&1 &`, the way a user starts it in a shell."""
    port = str(random.randint(20000, 29999))
    f = open(out or os.devnull, "wb")
    try:
        return subprocess.Popen([TORCHRUN, "--nproc-per-node", "2", "--master-port", port, *opts,
                                 str(FIXTURES / script)], stdout=f, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=job_env(), cwd=tmp_path)
    finally:
        f.close()


def stop(job: subprocess.Popen) -> None:
    """The test's own job: SIGTERM to its launcher (torchrun forwards it; spawn children die with their parent),
    then SIGKILL to whatever of its tree is left."""
    try:
        tree = psutil.Process(job.pid).children(recursive=True)
    except psutil.Error:
        tree = []
    if job.poll() is None:
        job.send_signal(signal.SIGTERM)
        try:
            job.wait(timeout=30)
        except subprocess.TimeoutExpired:
            job.kill()
            job.wait()
    _gone, alive = psutil.wait_procs(tree, timeout=10)
    for p in alive:
        p.kill()
    psutil.wait_procs(alive, timeout=10)


def job_with_ranks(pid: int, n: int = 2):
    """find_job once every rank has started (a job just launched has its agent before its ranks)."""
    try:
        j = find_job(pid)
    except NotAJob:
        return None
    return j if len(j.ranks) == n else None
