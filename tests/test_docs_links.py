"""The docs hold only links that work in any checkout: relative links resolve inside the repo, no machine paths."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")  # [text](target "title")
MACHINE_PATH = re.compile(r"(?<![\w.~-])/(?:work|root)/")  # where one machine keeps its checkouts and home


def links(text: str) -> list[str]:
    return LINK.findall(text)


def broken(doc: Path, target: str) -> str | None:
    """Why a link target of `doc` does not work in every checkout, or None."""
    if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):  # https:, mailto: ...
        return None if target.startswith(("https://", "http://", "mailto:")) else "not a web link"
    path = target.split("#", 1)[0]
    if not path:
        return None  # an anchor in the same page
    if path.startswith("/"):
        return "absolute path"
    resolved = (doc.parent / path).resolve()
    if not resolved.is_relative_to(ROOT):
        return "points outside the repository"
    return None if resolved.exists() else "no such file in the repository"


def test_link_checker_catches_what_breaks_elsewhere(tmp_path):
    doc = ROOT / "docs" / "x.md"
    assert links('see [a](b.md) and ![img](screenshots/x.svg "t") and [w](https://x.org/y)') == \
        ["b.md", "screenshots/x.svg", "https://x.org/y"]
    assert broken(doc, "/work/shared/reference/x.md") == "absolute path"
    assert broken(doc, "../../outside.md") == "points outside the repository"
    assert broken(doc, "missing.md") == "no such file in the repository"
    assert broken(doc, "file:///etc/passwd") == "not a web link"
    assert broken(doc, "profiles.md#errors") is None and broken(doc, "#top") is None
    assert MACHINE_PATH.search("from /work/shared/notes/x.md") and MACHINE_PATH.search("`/root/.cache`")
    assert not MACHINE_PATH.search("runs/20261202/x and ~/.cache/ddptui and bench/work/x")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_doc_links_resolve_inside_the_repo(doc):
    text = doc.read_text()
    bad = [(t, why) for t in links(text) if (why := broken(doc, t))]
    assert not bad, f"{doc.relative_to(ROOT)}: {bad}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_doc_names_no_path_of_one_machine(doc):
    found = [(n, ln.strip()) for n, ln in enumerate(doc.read_text().splitlines(), 1) if MACHINE_PATH.search(ln)]
    assert not found, f"{doc.relative_to(ROOT)}: {found}"
