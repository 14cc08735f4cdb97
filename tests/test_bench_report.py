"""bench/run.py's report with --only: the sections not run keep their figures and their text as the earlier run
wrote them (a --quick run of one section must not tell the others' figures with its own sizes and repeats)."""
from __future__ import annotations

import copy
import importlib.util
import json
import sys
from argparse import Namespace
from pathlib import Path

import pytest

pytestmark = pytest.mark.any_python

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _bench_run():
    sys.path.insert(0, str(BENCH))  # run.py imports its sibling modules as top-level ones
    try:
        spec = importlib.util.spec_from_file_location("bench_run", BENCH / "run.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCH))


def _sections(md: str) -> dict[str, str]:
    parts = md.split("\n## ")
    return {p.split("\n", 1)[0]: p for p in parts[1:]}


def test_a_quick_run_of_one_section_keeps_the_other_sections_text(tmp_path):
    run = _bench_run()
    full = json.loads((BENCH / "results.json").read_text(encoding="utf-8"))
    full["meta"].pop("kept", None)  # an earlier full run: every section measured then
    full["meta"].update(quick=False, repeats=3)
    before = copy.deepcopy(full)
    md_before = run.write_report(before, Namespace(quick=False, repeats=3, mem_small=1_000_000))
    (tmp_path / "results.json").write_text(json.dumps(before), encoding="utf-8")

    only = "ui"  # `bench/run.py --only ui --quick`: 1 repeat, smaller sizes
    quick = Namespace(quick=True, repeats=1, mem_small=200_000)
    res = {"meta": {**full["meta"], "date": "2026-12-05 09:00", "quick": True, "repeats": 1}, only: full[only]}
    not_run = [name for name in full if name not in ("meta", "errors", "text", only)]
    res = run.keep_sections_not_run(res, tmp_path / "results.json", not_run)
    md_after = run.write_report(res, quick)

    old, new = _sections(md_before), _sections(md_after)
    assert set(old) == set(new) and len(old) >= 10, sorted(new)
    assert [title for title in old if old[title] != new[title] and not title.startswith("6. Dashboard")] == []
    memory = new["4. Memory: the engine process"]
    assert "ingesting 1,000,000 lines" in memory and "200,000" not in memory  # the earlier run's size, not --quick's
    assert "QUICK smoke run, 1 repeat(s)" in md_after
    assert f"are kept as the runs that measured them wrote them: {', '.join(not_run)} from the run of " \
        f"{full['meta']['date']}" in md_after
    again = run.write_report(json.loads(json.dumps(res)), quick)  # --report-only: from the JSON it wrote
    assert _sections(again) == new


def test_a_second_run_of_other_sections_says_when_each_kept_one_was_measured(tmp_path):
    """--only ui at 09:00, then --only viewer at 10:00: ui is kept from the 09:00 run, the rest from the full one."""
    run = _bench_run()
    full = json.loads((BENCH / "results.json").read_text(encoding="utf-8"))
    full["meta"].pop("kept", None)
    full["meta"].update(date="2026-12-03 12:48", load_start="0.8", repeats=3, total_s=692)
    path = tmp_path / "results.json"
    path.write_text(json.dumps(full), encoding="utf-8")
    cfg = Namespace(quick=False, repeats=2, mem_small=1_000_000)
    names = [name for name in full if name not in ("meta", "errors", "text")]

    def only(name: str, date: str, load: str) -> str:
        res = {"meta": {**full["meta"], "date": date, "load_start": load, "repeats": 2, "total_s": 61}, name: full[name]}
        res = run.keep_sections_not_run(res, path, [n for n in names if n != name])
        md = run.write_report(res, cfg)
        path.write_text(json.dumps(res), encoding="utf-8")
        return md.split("\n## ", 1)[0]

    only("ui", "2026-12-05 09:00", "1.2")
    head = only("viewer", "2026-12-05 10:00", "1.9")
    assert "Measured 2026-12-05 10:00" in head and "Only viewer measured in this run" in head
    assert "ui from the run of 2026-12-05 09:00 (load average at start 1.2" in head, head
    rest = ", ".join(n for n in names if n not in ("ui", "viewer"))
    assert f"{rest} from the run of 2026-12-03 12:48 (load average at start 0.8" in head, head
    assert "that run's whole bench: 692 s" in head and "that run's whole bench: 61 s" in head
