"""A plain gloo job a user starts with srun on the namespaced cluster (one task a node), and what its ranks wrote."""
from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

from ddptui.runners.launch import rankenv

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "allreduce_waits_for_sleeping_rank.py"
WAITS_LINE = next(i for i, ln in enumerate(FIXTURE.read_text().splitlines(), 1) if "# WAITS_HERE" in ln)


def first_report(path: Path, kind: str) -> dict | None:
    """The first `@ddptui` report of `kind` in a rank's output file, once it is there."""
    if not path.exists():
        return None
    for ln in path.read_text(errors="replace").splitlines():
        if ln.startswith("@ddptui ") and f'"{kind}"' in ln:
            rep = json.loads(ln.split(" ", 1)[1])
            if rep.get("k") == kind:
                return rep
    return None


def hello_of(path: Path) -> dict | None:
    return first_report(path, "hello")


def start_job(cluster, logs: Path, name: str, extra_env: dict[str, str] | None = None) -> subprocess.Popen:
    """The plain gloo job, one task on each node, submitted from node0 (the login node) as a user's srun would be."""
    port = random.randint(20000, 29999)  # inside node0's own namespace: only the test cluster's daemons listen there
    env = {**rankenv.activation({}), "MASTER_ADDR": cluster.hostnames[0], "MASTER_PORT": str(port),
           "OMP_NUM_THREADS": "1", **(extra_env or {})}
    return cluster.on_node(0, ["srun", "-N2", "--ntasks-per-node=1", f"--job-name={name}",
                               f"--output={logs}/rank%t.out", f"--error={logs}/rank%t.err",
                               # as a batch script does it: RANK for the injected hello, from Slurm's task id
                               "/bin/sh", "-c", 'export RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS; exec "$@"', "sh",
                               sys.executable, "-u", str(FIXTURE)], env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def rank_files(logs: Path) -> dict[str, str]:
    """The end of each rank file of the job (written by slurmstepd on the rank's node)."""
    return {p.name: p.read_text(errors="replace")[-800:] for p in sorted(logs.glob("*"))}
