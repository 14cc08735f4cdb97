#!/usr/bin/env bash
# Install what the tests' real Slurm cluster needs (Debian's slurmctld, slurmd, slurm-client; iproute2 and
# util-linux for the namespaced "hosts"); without them the Slurm tests skip, saying why (scripts/apt-deps.sh).
exec bash "${BASH_SOURCE[0]%/*}/apt-deps.sh" slurm-deps "the Slurm cluster tests will skip" \
  slurmctld:slurmctld slurmd:slurmd sinfo:slurm-client srun:slurm-client sbatch:slurm-client \
  ip:iproute2 nsenter:util-linux unshare:util-linux
