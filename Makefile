# ddptui: `make run` opens the dashboard on the default CPU profile, `make test` lints, runs the whole suite, then on the other Pythons.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint test-pythons venv xla-venv slurm-deps chromium-deps bench screenshots clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch==2.13.0 pinned: the CPU build from this machine's disk (a range may pull a CUDA build).
	$(BIN)/pip install -q -e '.[ranks,test]'
	touch $(STAMP)

venv: $(STAMP)

run: $(STAMP)
	$(BIN)/ddptui profiles/cpu-ddp.yaml

xla-venv:
	bash scripts/xla-venv.sh

# The tests' real Slurm cluster: Debian's slurmctld/slurmd/slurm-client (a no-op once installed; without root or
# apt-get it says why and the Slurm tests skip with that reason).
slurm-deps:
	bash scripts/slurm-deps.sh

# The browser test of `ddptui serve` (tests/test_serve_browser.py): Debian's chromium, driven headless (a no-op once
# installed; without root or apt-get it says why and that test skips with that reason).
chromium-deps:
	bash scripts/chromium-deps.sh

# ruff and mypy on runners/ and tui/ (pyproject.toml's [tool.ruff] and [tool.mypy]); a finding fails the build
lint: $(STAMP)
	BIN=$(BIN) bash scripts/lint.sh

test: $(STAMP) lint xla-venv slurm-deps chromium-deps
	$(BIN)/python -m pytest -q --durations=25 tests
	$(MAKE) --no-print-directory test-pythons

# The engine's and the dashboard's own tests (modules marked any_python) on Python 3.10, 3.12 and 3.13, each in a
# venv without torch (~/.cache/ddptui/py3.X-venv); their ranks run on this .venv's python. A missing Python is skipped.
test-pythons: $(STAMP)
	bash scripts/test-pythons.sh

# section 7 (2 nodes x 2 ranks under Slurm vs 4 ranks on one node) runs on the tests' Slurm cluster
bench: $(STAMP) slurm-deps
	$(BIN)/python bench/run.py

# The screenshots of README and docs/dashboard.md (docs/screenshots/*.svg) from the current build: the committed
# records replayed at 160x50; `$(BIN)/python scripts/screenshots.py stall.svg` redoes one
screenshots: $(STAMP)
	$(BIN)/python scripts/screenshots.py

clean:
	rm -rf $(VENV) runs build *.egg-info
