#!/usr/bin/env bash
# Install ddptui (no torch) on every other supported Python and run the engine's and the dashboard's own tests there.
#
#   bash scripts/test-pythons.sh [VERSION ...]   default: 3.10 3.12 3.13 (3.11 is the main suite's .venv)
#
# Per version: a venv ${DDPTUI_PY_VENV_ROOT:-$HOME/.cache/ddptui}/py<VERSION>-venv with `pip install -e '.[test]'`,
# rebuilt only when pyproject.toml, the interpreter or the checkout's path changed (an editable install points at
# one checkout), then `pytest -m any_python`: the tests tests/conftest.py classifies as needing no torch in the
# test process. Their ranks run on DDPTUI_PYTHON (default: this checkout's .venv/bin/python, torch 2.13), the
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
failed=()
for v in "${versions[@]}"; do
  start=$SECONDS
  if ! py="$(find_python "$v")"; then
    echo "test-pythons: SKIP python$v: no interpreter (not on PATH, not in ${PYENV_ROOT:-$HOME/.pyenv}/versions)"
    continue
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
  ) || { echo "test-pythons: python$v: FAILED to build $venv"; failed+=("$v (install)"); continue; }
  built=$((SECONDS - start))
  echo "test-pythons: python$v ($("$venv/bin/python" -c 'import platform; print(platform.python_version())')):" \
       "ddptui's own tests, ranks on $rank_python"
  # A shared hold on the venv's lock while its tests run: another checkout's rebuild waits for them.
  (cd "$here" && DDPTUI_PYTHON="$rank_python" flock -s "$root/.py$v-venv.lock" \
     "$venv/bin/python" -m pytest -q -p no:cacheprovider -m any_python tests)
  rc=$?
  echo "test-pythons: python$v: exit $rc, ${built}s install + $((SECONDS - start - built))s tests"
  [[ $rc -eq 0 ]] || failed+=("$v")
done

if [[ ${#failed[@]} -gt 0 ]]; then
  echo "test-pythons: FAILED on python ${failed[*]}"
  exit 1
fi
