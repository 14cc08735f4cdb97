"""The docs hold only links that work in any checkout: relative links resolve inside the repo, to a heading that
exists where they name one, no machine paths; the README stays a page a newcomer reads through."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.any_python

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")  # [text](target "title")
MACHINE_PATH = re.compile(r"(?<![\w.~-])/(?:work|root)/")  # where one machine keeps its checkouts and home
README_MOST_LINES = 150  # what it is, a screenshot, install, the main commands, links: the rest lives in docs/


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


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation other than hyphens and underscores dropped, each
    space a hyphen."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(doc: Path) -> set[str]:
    """The anchors of a page's headings (outside code blocks); a repeated heading's get -1, -2, ... as on GitHub."""
    seen: dict[str, int] = {}
    out, fenced = set(), False
    for line in doc.read_text().splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)):
            s = slug(m.group(1))
            out.add(f"{s}-{seen[s]}" if s in seen else s)
            seen[s] = seen.get(s, 0) + 1
    return out


def missing_anchor(doc: Path, target: str) -> str | None:
    """Why the #anchor of a link from `doc` to a page of the repository names no heading there, or None."""
    if "#" not in target or re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):
        return None
    path, anchor = target.split("#", 1)
    page = (doc.parent / path).resolve() if path else doc
    if page.suffix != ".md" or not page.is_file():
        return None
    return None if anchor in anchors(page) else f"no heading #{anchor} in {page.name}"


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


def test_anchor_checker_reads_headings_as_github_does(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("# Title\n## Overrides: `--set key=value`\n```sh\n# not a heading\n```\n## The rank → line\n"
                    "## Keys\n### Keys\n")
    assert anchors(page) == {"title", "overrides---set-keyvalue", "the-rank--line", "keys", "keys-1"}
    assert missing_anchor(page, "#keys-1") is None and missing_anchor(page, "p.md#title") is None
    assert missing_anchor(page, "#not-a-heading") == "no heading #not-a-heading in p.md"
    assert missing_anchor(page, "https://x.org/#y") is None and missing_anchor(page, "other.md#x") is None


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_doc_anchors_name_a_heading(doc):
    bad = [(t, why) for t in links(doc.read_text()) if (why := missing_anchor(doc, t))]
    assert not bad, f"{doc.relative_to(ROOT)}: {bad}"


def test_readme_stays_short():
    n = len((ROOT / "README.md").read_text().splitlines())
    assert n <= README_MOST_LINES, f"README.md has {n} lines; move the detail into docs/"
