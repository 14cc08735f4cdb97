#!/usr/bin/env bash
# Install ddptui (no torch) on every other supported Python and run the engine's and the dashboard's own tests there.
#
#   bash scripts/test-pythons.sh [VERSION ...]   default: 3.10 3.12 3.13 (3.11 is the main suite's .venv)
#   DDPTUI_PY_JOBS=N: how many versions run at once (default: one more than the cores)
#
# Per version: a venv ${DDPTUI_PY_VENV_ROOT:-$HOME/.cache/ddptui}/py<VERSION>-venv with `pip install -e '.[test]'`,
# rebuilt only when pyproject.toml, the interpreter or the checkout's path changed (an editable install points at
# one checkout), then `pytest -m any_python`: the test modules that mark themselves so (they need no torch in the
# test process). Their ranks run on DDPTUI_PYTHON (default: this checkout's .venv/bin/python, torch 2.13), the
# interpreter ddptui gives a profile that names none. A version with no interpreter on PATH or under
# ~/.pyenv/versions is skipped with a line that says so. Exit status: non-zero if any version's tests failed.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
root="${DDPTUI_PY_VENV_ROOT:-$HOME/.cache/ddptui}"
rank_python="${DDPTUI_PYTHON:-$here/.venv/bin/python}"
versions=("$@")
[[ ${#versions[@]} -gt 0 ]] || versions=(3.10 3.12 3.13)

if [[ ! -x "$rank_python" ]]; then
  echo "test-pythons: no rank interpreter at $rank_python (make venv, or set DDPTUI_PYTHON)" >&2
  exit 2
fi

find_python() {  # python<VERSION> on PATH, else the newest under pyenv; one that does not run is no interpreter
  local v="$1" exe                 # (a pyenv shim is on PATH for every name, and fails for a version not selected)
  for exe in "$(command -v "python$v" 2>/dev/null)" \
             $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}/versions/$v".*/bin/"python$v" 2>/dev/null | sort -V -r); do
    [[ -n "$exe" && -x "$exe" ]] || continue
    if [[ "$("$exe" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" == "$v" ]]; then
      echo "$exe"
      return 0
    fi
  done
  return 1
}

mkdir -p "$root"
logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT

one_version() {  # builds (if needed) and tests one version; its last line says how it went
  local v="$1" start=$SECONDS py venv want log built rc
  if ! py="$(find_python "$v")"; then
    echo "test-pythons: SKIP python$v: no interpreter (not on PATH, not in ${PYENV_ROOT:-$HOME/.pyenv}/versions)"
    return 0
  fi
  venv="$root/py$v-venv"
  want="$(sha256sum "$here/pyproject.toml" | cut -c1-16) $(readlink -f "$py") $here"
  (
    # One build of a venv at a time (two checkouts testing at once share the cache).
    exec 9>"$root/.py$v-venv.lock"
    flock 9
    if [[ "$(cat "$venv/.ddptui-stamp" 2>/dev/null)" != "$want" ]]; then
      echo "test-pythons: building $venv from $py" >&2
      rm -rf "$venv"
      log="$root/py$v-venv.install.log"
      if "$py" -m venv "$venv" > "$log" 2>&1 &&
         "$venv/bin/python" -m pip install -q --no-input --disable-pip-version-check -e "$here[test]" >> "$log" 2>&1
      then
        echo "$want" > "$venv/.ddptui-stamp"  # written last: marks a complete build
      else
        tail -n 20 "$log" >&2
        exit 1
      fi
    fi
  ) || { echo "test-pythons: python$v: FAILED to build $venv"; return 1; }
  built=$((SECONDS - start))
  echo "test-pythons: python$v ($("$venv/bin/python" -c 'import platform; print(platform.python_version())')):" \
       "ddptui's own tests, ranks on $rank_python"
  # A shared hold on the venv's lock while its tests run: another checkout's rebuild waits for them. Each version's
  # pytest has its own basetemp: several run at once.
  (cd "$here" && DDPTUI_PYTHON="$rank_python" flock -s "$root/.py$v-venv.lock" \
     "$venv/bin/python" -m pytest -q -p no:cacheprovider --basetemp="$logs/tmp-$v" -m any_python tests)
  rc=$?
  echo "test-pythons: python$v: exit $rc, ${built}s install + $((SECONDS - start - built))s tests"
  return $rc
}

# The versions run side by side, one more at a time than this machine has cores (DDPTUI_PY_JOBS overrides): one
# after another they took 15 of CI's 45 minutes; on 2 cores two at a time took 9m10s, all three 5m50s (each
# version's pytest is under one core: the dashboard's pilot tests wait on frames and ranks).
jobs="${DDPTUI_PY_JOBS:-$(( $(nproc) + 1 ))}"
failed=()
declare -A pids=()
finish() {  # waits for the version that ends first, prints its whole output, notes a failure
  local done_pid v
  wait -n -p done_pid "${!pids[@]}"
  local rc=$?
  v="${pids[$done_pid]}"
  unset "pids[$done_pid]"
  cat "$logs/$v.log"
  [[ $rc -eq 0 ]] || failed+=("$v")
}
for v in "${versions[@]}"; do
  while [[ ${#pids[@]} -ge $jobs ]]; do finish; done
  one_version "$v" > "$logs/$v.log" 2>&1 &
  pids[$!]="$v"
done
while [[ ${#pids[@]} -gt 0 ]]; do finish; done

if [[ ${#failed[@]} -gt 0 ]]; then
  echo "test-pythons: FAILED on python ${failed[*]}"
  exit 1
fi
