#!/usr/bin/env bash
# Install Debian's chromium for the browser test of `ddptui serve` (tests/test_serve_browser.py drives it headless
# over the DevTools protocol). Idempotent: a fast no-op when it is there. When it cannot install (not root, no
# apt-get, the install fails) it says why and exits 0: the browser test then skips with that reason.
set -uo pipefail

if command -v chromium >/dev/null 2>&1; then
  echo "chromium-deps: chromium already installed ($(command -v chromium))"
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "chromium-deps: not root, cannot install chromium: the browser test of ddptui serve will skip"
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "chromium-deps: no apt-get on this machine, cannot install chromium: the browser test of ddptui serve will skip"
  exit 0
fi

echo "chromium-deps: apt-get install chromium"
start=$SECONDS
export DEBIAN_FRONTEND=noninteractive
if apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium; then
  echo "chromium-deps: installed chromium in $((SECONDS - start)) s"
else
  echo "chromium-deps: apt-get install chromium failed (exit $?): the browser test of ddptui serve will skip"
fi
exit 0
