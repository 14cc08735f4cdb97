#!/usr/bin/env bash
# ruff and mypy on the engine (runners/) and the dashboard (tui/), as pyproject.toml configures them; `make lint`.
#
# mypy runs twice. runners/ and tui/ install as ddptui.runners and ddptui.tui (pyproject's package-dir) and import
# each other relatively (tui's `from ..runners import events`), so the first run reads them through a
# build/mypy/ddptui/ folder of links, and its messages are shown with the repository's paths. The ranks' side
# (runners/inject/, runners/workloads/) runs as top-level modules on the ranks' PYTHONPATH (`import ddptui_report`,
# `import _faults`), so the second run puts those folders on mypy's path and checks them against torch's types.
# Exit status: non-zero when any of the three found something.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bin="${BIN:-.venv/bin}"
links=build/mypy
rc=0

"$bin/ruff" check runners tui || rc=1

rm -rf "$links" && mkdir -p "$links/ddptui" || exit 2
for d in runners tui profiles; do ln -s "../../../$d" "$links/ddptui/$d" || exit 2; done
MYPYPATH="$links" "$bin/mypy" --exclude '/runners/(inject|workloads)/' "$links/ddptui/runners" "$links/ddptui/tui" \
  | sed "s|^$links/ddptui/||"
(( PIPESTATUS[0] == 0 )) || rc=1

ranks=()
for f in runners/inject/*.py runners/workloads/*.py; do [[ $f == */__init__.py ]] || ranks+=("$f"); done
MYPYPATH=runners/inject:runners/workloads "$bin/mypy" "${ranks[@]}" || rc=1
exit $rc
