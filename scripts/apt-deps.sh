#!/usr/bin/env bash
# Install the Debian packages some tests need, for scripts/slurm-deps.sh and scripts/chromium-deps.sh:
#
#   bash scripts/apt-deps.sh NAME "WHAT SKIPS WITHOUT THEM" COMMAND:PACKAGE ...
#
# Idempotent: a fast no-op when every COMMAND is on PATH. When it cannot install (not root, no apt-get, the install
# fails) it says why and exits 0: the tests that need them then skip with that reason.
set -uo pipefail

name=$1 skips=$2
shift 2
need=()
for cmd in "$@"; do
  command -v "${cmd%%:*}" >/dev/null 2>&1 || need+=("${cmd#*:}")
done
if [[ ${#need[@]} -eq 0 ]]; then
  have=""
  for cmd in "$@"; do  # the packages in the order given, once each
    [[ ", $have, " == *", ${cmd#*:}, "* ]] || have+="${have:+, }${cmd#*:}"
  done
  echo "$name: $have already installed"
  exit 0
fi
mapfile -t need < <(printf '%s\n' "${need[@]}" | sort -u)

if [[ $(id -u) -ne 0 ]]; then
  echo "$name: not root, cannot install ${need[*]}: $skips"
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "$name: no apt-get on this machine, cannot install ${need[*]}: $skips"
  exit 0
fi

echo "$name: apt-get install ${need[*]}"
start=$SECONDS
export DEBIAN_FRONTEND=noninteractive
if apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need[@]}"; then
  echo "$name: installed ${need[*]} in $((SECONDS - start)) s"
else
  echo "$name: apt-get install ${need[*]} failed (exit $?): $skips"
fi
exit 0
