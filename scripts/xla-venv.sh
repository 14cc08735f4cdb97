#!/usr/bin/env bash
# Build (once) the torch_xla venv the XLA ranks run in, outside the checkout, and print its path.
#
#   bash scripts/xla-venv.sh               build if missing or the lock changed, print the path
#   bash scripts/xla-venv.sh --print-path  only print the path (exit 0 whether or not it is built)
#
# Path: ${DDPTUI_XLA_VENV_ROOT:-$HOME/.cache/ddptui}/xla-<first 12 hex of sha256 of the lock>, plus a
# stable symlink ${root}/xla-venv pointing at it (the profiles name that one). The venv is built in a
# temporary folder, stamped, then renamed into place, so a present path is always a complete build.
# DDPTUI_XLA_PYTHON picks the interpreter (default python3.11).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
lock="$here/xla-requirements.txt"
root="${DDPTUI_XLA_VENV_ROOT:-$HOME/.cache/ddptui}"
hash="$(sha256sum "$lock" | cut -c1-12)"
name="xla-$hash"
venv="$root/$name"
stamp=".ddptui-complete"
py="${DDPTUI_XLA_PYTHON:-python3.11}"

case "${1:-}" in
  --print-path) echo "$venv"; exit 0 ;;
  "") ;;
  *) echo "usage: $0 [--print-path]" >&2; exit 2 ;;
esac

link_it() {
  # Replace the symlink atomically (rename over it), so readers never see it missing.
  ln -sfn "$name" "$root/.xla-venv.$$"
  mv -fT "$root/.xla-venv.$$" "$root/xla-venv"
}

mkdir -p "$root"
# One build at a time (two `make test` at once would otherwise download 4 GB twice).
exec 9>"$root/.xla-venv.lock"
flock 9

if [[ -f "$venv/$stamp" ]]; then
  link_it
  echo "$venv"
  exit 0
fi

rm -rf "$venv"  # a folder without the stamp is not ours to trust
tmp="$root/.$name.tmp.$$"
trap 'rm -rf "$tmp" "$root/.xla-venv.$$"' EXIT
rm -rf "$tmp"
echo "building $venv (torch + torch_xla, ~4 GB download, ~7 GB on disk) ..." >&2
"$py" -m venv "$tmp"
"$tmp/bin/python" -m pip install -q --disable-pip-version-check --no-input -r "$lock" >&2
PJRT_DEVICE=CPU "$tmp/bin/python" -c "import torch, torch_xla; assert torch.__version__.startswith('2.9.0'), torch.__version__" >&2
# bin/python is a symlink and the venv finds itself through it; only the console scripts' shebangs
# and the activate scripts name the build folder, so point them at the final one before the rename.
grep -rlIF -- "$tmp" "$tmp/bin" | while read -r f; do sed -i "s#$tmp#$venv#g" "$f"; done
sha256sum "$lock" > "$tmp/$stamp"  # written last: marks a complete build
mv -T "$tmp" "$venv"
trap - EXIT
link_it
for old in "$root"/xla-[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]; do
  [[ -d "$old" && "$old" != "$venv" ]] && echo "note: older XLA venv $old can be removed" >&2
done
echo "$venv"
