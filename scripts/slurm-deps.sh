#!/usr/bin/env bash
# Install what the tests' real Slurm cluster needs (Debian's slurmctld, slurmd, slurm-client; iproute2 and
# util-linux for the namespaced "hosts"). Idempotent: a fast no-op when everything is there. When it cannot
# install (not root, no apt-get, the install fails) it says why and exits 0: the Slurm tests then skip with a reason.
set -uo pipefail

need=()
for cmd in slurmctld:slurmctld slurmd:slurmd sinfo:slurm-client srun:slurm-client sbatch:slurm-client \
           ip:iproute2 nsenter:util-linux unshare:util-linux; do
  command -v "${cmd%%:*}" >/dev/null 2>&1 || need+=("${cmd#*:}")
done
if [[ ${#need[@]} -eq 0 ]]; then
  echo "slurm-deps: slurmctld, slurmd, slurm-client, iproute2, util-linux already installed"
  exit 0
fi
mapfile -t need < <(printf '%s\n' "${need[@]}" | sort -u)

if [[ $(id -u) -ne 0 ]]; then
  echo "slurm-deps: not root, cannot install ${need[*]}: the Slurm cluster tests will skip"
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "slurm-deps: no apt-get on this machine, cannot install ${need[*]}: the Slurm cluster tests will skip"
  exit 0
fi

echo "slurm-deps: apt-get install ${need[*]}"
start=$SECONDS
export DEBIAN_FRONTEND=noninteractive
if apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need[@]}"; then
  echo "slurm-deps: installed ${need[*]} in $((SECONDS - start)) s"
else
  echo "slurm-deps: apt-get install ${need[*]} failed (exit $?): the Slurm cluster tests will skip"
fi
exit 0
