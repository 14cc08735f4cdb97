"""Every test module says its family once, in its own `pytestmark`: on every supported Python (any_python), or on the
main suite's only (main_suite, with why)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.any_python

HERE = Path(__file__).resolve().parent
FAMILIES = ("any_python", "main_suite")


def module_marks(path: Path) -> list[ast.Call | ast.Attribute]:
    """The marks in the module's top-level `pytestmark`, read without importing it (some import torch)."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in node.targets):
            return list(node.value.elts) if isinstance(node.value, ast.List) else [node.value]
    return []


def mark_name(mark) -> str:
    attr = mark.func if isinstance(mark, ast.Call) else mark
    return attr.attr if isinstance(attr, ast.Attribute) else ""


def test_every_module_says_its_family_once():
    for path in sorted(HERE.glob("test_*.py")):
        marks = module_marks(path)
        families = [m for m in marks if mark_name(m) in FAMILIES]
        assert len(families) == 1, f"{path.name}: pytestmark = pytest.mark.any_python or pytest.mark.main_suite(why)"
        (family,) = families
        if mark_name(family) == "main_suite":
            assert isinstance(family, ast.Call) and len(family.args) == 1 and isinstance(family.args[0], ast.Constant) \
                and family.args[0].value, f"{path.name}: say why it needs the ranks' interpreter"


def test_the_marker_follows_the_module(request):
    assert request.node.get_closest_marker("any_python") is not None  # this module's pytestmark



def test_no_test_module_imports_another():
    """What tests share lives in tests/support/: a test module is never another's helper library."""
    found = []
    for path in sorted([*HERE.glob("test_*.py"), *(HERE / "support").glob("*.py"), HERE / "conftest.py"]):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                [a.name for a in node.names] if isinstance(node, ast.Import) else []
            found += [f"{path.name}: {n}" for n in names if n.startswith("tests.test_") or n.startswith("test_")]
    assert found == []
