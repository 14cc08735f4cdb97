"""Every test module is classified once: on every supported Python (any_python), or on the main suite's only."""
from __future__ import annotations

from pathlib import Path

from tests.suites import ANY_PYTHON, OWN_INTERPRETER, RANKS_ONLY

HERE = Path(__file__).resolve().parent


def test_every_module_is_classified_once():
    modules = {p.stem for p in HERE.glob("test_*.py")}
    assert not ANY_PYTHON & RANKS_ONLY.keys(), "classified twice"
    assert modules - ANY_PYTHON - RANKS_ONLY.keys() == set(), "add it to tests/suites.py"
    assert (ANY_PYTHON | RANKS_ONLY.keys()) - modules == set(), "no such test module"
    assert all(RANKS_ONLY.values()), "say why it needs the ranks' interpreter"
    assert OWN_INTERPRETER <= modules, "no such test module"


def test_the_marker_follows_the_module(request):
    assert request.node.get_closest_marker("any_python") is not None  # this module is in ANY_PYTHON


