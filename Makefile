# ddptui: `make run` opens the dashboard on the default CPU profile, `make test` runs the whole suite.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test venv xla-venv bench clean

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

test: $(STAMP) xla-venv
	$(BIN)/python -m pytest -q tests

bench: $(STAMP)
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV) runs build *.egg-info
