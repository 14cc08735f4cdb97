#!/usr/bin/env bash
# Install Debian's chromium for the browser test of `ddptui serve` (tests/test_serve_browser.py drives it headless
# over the DevTools protocol); without it that test skips, saying why (scripts/apt-deps.sh).
exec bash "${BASH_SOURCE[0]%/*}/apt-deps.sh" chromium-deps "the browser test of ddptui serve will skip" \
  chromium:chromium
