"""`ddptui compare` and `ddptui export` on the records of real runs at 2 and 4 ranks (one run each, shared): the
table and its JSON, the CSV / JSON tables pandas loads, bad input, the Compare screen under the pilot and `e` on the
run screen."""
from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import ROOT, ddptui, only_run
from tests.support.ui import aio, until

pytestmark = pytest.mark.main_suite("real torchrun runs of the built-in DDP workload (torch in the ranks)")
STEPS = 20


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The records of cpu-ddp at 2 and at 4 ranks, {2: dir, 4: dir}."""
    out = {}
    for n in (2, 4):
        where = tmp_path_factory.mktemp(f"ranks{n}")
        done = ddptui("cpu-ddp", "--no-ui", "--set", f"nproc={n}", "--set", f"steps={STEPS}", runs_dir=where,
                      timeout=150)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        out[n] = only_run(where)
    return out


HEADLESS = """
import sys, json
from ddptui.tui.compare_cli import compare_main
code = compare_main(sys.argv[1:])
print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'torch', 'textual_plotext'))))
sys.exit(code)
"""


@pytest.mark.timeout(200)
def test_compare_two_and_four_ranks(runs):
    two, four = runs[2], runs[4]
    table = ddptui("compare", str(two), str(four), runs_dir=two.parent)  # stdout a pipe: the table, no screen
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].startswith(f"A: {two.name}  ok") and lines[1].startswith(f"B: {four.name}  ok"), lines[:2]
    rows = {line[:20].strip(): line[20:].split() for line in lines[3:] if line[:20].strip()}
    assert rows["ranks"] == ["2", "4"] and rows["steps"][:2] == [str(STEPS), str(STEPS)], rows
    assert rows["rank 3 step p50"][0] == "—" and rows["rank 3 step p50"][1] != "—"  # only B has a rank 3
    assert rows["rank 1 step p50"][0] != "—" and rows["rank 1 step p50"][1] != "—"
    assert any(line.startswith("note: the runs have 2 and 4 ranks") for line in lines)
    assert any(k.startswith("loss at step ") for k in rows)

    got = subprocess.run([sys.executable, "-c", HEADLESS, str(two), str(four), "--json"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert got.returncode == 0, got.stderr
    body, imported = got.stdout.rsplit("\n", 2)[0], json.loads(got.stdout.rsplit("\n", 2)[1])
    assert imported == []  # headless: neither textual nor torch
    data = json.loads(body)
    a, b = data["runs"]
    assert (a["ranks"], b["ranks"], a["status"], b["status"]) == (2, 4, "ok", "ok")
    for run in (a, b):
        assert run["steps"] == STEPS and run["steps_per_s"] > 0
        assert 0 < run["step_time_p50_s"] <= run["step_time_p95_s"]
        assert run["samples_per_s"] > 0  # ddp_mlp's DDP model is hooked: its batch is counted
        assert 0 < run["time_to_first_step_s"] < 120
        for p in run["per_rank"].values():
            assert p["steps"] == STEPS and p["step_time_p50_s"] > 0 and p["samples_per_s"] > 0
    assert sorted(a["per_rank"]) == ["0", "1"] and sorted(b["per_rank"]) == ["0", "1", "2", "3"]
    assert b["samples_per_s"] == pytest.approx(sum(p["samples_per_s"] for p in b["per_rank"].values()))
    matching = data["matching_steps"]
    assert matching["count"] == STEPS and matching["steps"][0] == 1 and matching["steps"][-1] == STEPS
    assert all(len(pair) == 2 and all(isinstance(v, float) for v in pair) for pair in matching["losses"])


def _check_steps(rows: list[dict], ranks: int) -> None:
    keys = [(int(r["rank"]), int(r["step"])) for r in rows]
    assert len(keys) == len(set(keys))  # one row per rank and step
    assert {r for r, _ in keys} == set(range(ranks))
    for rank in range(ranks):
        losses = {int(r["step"]) for r in rows if int(r["rank"]) == rank and r["loss"] not in ("", None)}
        assert losses == set(range(1, STEPS + 1)), (rank, sorted(losses))
    timed = [r for r in rows if r["step_time_s"] not in ("", None)]
    assert timed and all(float(r["step_time_s"]) > 0 for r in timed)
    assert all(float(r["samples_per_s"]) > 0 for r in timed if r["samples_per_s"] not in ("", None))


@pytest.mark.timeout(120)
def test_export_csv_and_json(runs, tmp_path):
    two, four = runs[2], runs[4]
    done = ddptui("export", str(two), runs_dir=two.parent)
    assert done.returncode == 0, done.stderr
    steps, events = two / "export" / "steps.csv", two / "export" / "events.csv"
    assert done.stdout.split() == ["steps:", str(steps), "events:", str(events)]
    with open(steps, newline="") as f:
        _check_steps(list(csv.DictReader(f)), 2)
    with open(events, newline="") as f:
        kinds = [r["kind"] for r in csv.DictReader(f)]
    assert kinds[0] == "run_started" and kinds[-1] == "run_finished" and "progress" not in kinds
    assert "rank_hello" in kinds and "replica_verdict" in kinds

    out = tmp_path / "four.json"
    done = ddptui("export", str(four), "--format", "json", "--out", str(out), runs_dir=four.parent)
    assert done.returncode == 0, done.stderr
    _check_steps(json.loads(out.read_text()), 4)
    evs = json.loads((tmp_path / "four-events.json").read_text())
    assert evs[-1]["kind"] == "run_finished" and evs[-1]["fields"]["status"] == "ok"
    assert sum(e["kind"] == "rank_hello" for e in evs) == 4


@pytest.mark.timeout(120)
def test_pandas_loads_the_exports_as_they_are(runs, tmp_path):
    pd = pytest.importorskip("pandas", reason="pandas is not installed in this venv: the exports were checked with "
                                              "csv and json (test_export_csv_and_json)")
    four = runs[4]
    for fmt, read in (("csv", pd.read_csv), ("json", pd.read_json)):
        out = tmp_path / f"steps.{fmt}"
        assert ddptui("export", str(four), "--format", fmt, "--out", str(out), runs_dir=four.parent).returncode == 0
        df = read(out)
        assert list(df.columns) == ["rank", "attempt", "step", "wall", "t", "loss", "step_time_s", "samples",
                                    "samples_per_s"]
        assert not df.duplicated(["rank", "step"]).any() and set(df["rank"]) == {0, 1, 2, 3}
        assert df["loss"].notna().sum() == 4 * STEPS
        ev = read(tmp_path / f"steps-events.{fmt}")
        assert ev["kind"].iloc[0] == "run_started"


@pytest.mark.timeout(60)
def test_bad_input_is_one_line_and_exit_2(runs, tmp_path):
    (tmp_path / "plain").mkdir()
    for args in (("compare", str(runs[2]), str(tmp_path / "plain")), ("compare", str(runs[2])),
                 ("export", str(tmp_path / "missing")), ("compare", str(runs[2]), str(tmp_path / "missing"))):
        done = ddptui(*args, runs_dir=tmp_path)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr, done.stderr
        assert done.stderr.startswith(f"ddptui: {args[0]}: ")
    done = ddptui("compare", str(runs[2]), str(tmp_path / "plain"), runs_dir=tmp_path)
    assert done.stderr.strip() == f"ddptui: compare: {tmp_path / 'plain'}: not a ddptui run record (no events.jsonl)"


@aio
@pytest.mark.timeout(60)
async def test_the_compare_screen(runs):
    from ddptui.tui.screens.compare import CompareApp, CompareScreen
    from ddptui.tui.widgets.compare_chart import CompareChart
    from tests.support.ui import screen_text
    app = CompareApp([runs[2], runs[4]])
    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, CompareScreen) and app.screen.loaded, 30,
                    "the records to be read")
        screen = app.screen
        assert not screen.error
        text = screen_text(app)
        assert f"A: {runs[2].name}" in text and f"B: {runs[4].name}" in text and "2 and 4 ranks" in text
        loss, steps = screen.query_one("#compare-loss", CompareChart), screen.query_one("#compare-steps", CompareChart)
        assert [s.name for s in loss.data.series] == ["A", "B"] and loss.data.series[0].xs[-1] == STEPS
        assert [s.name for s in steps.data.series] == ["A", "B"] and steps.data.what == "step time"
        assert "loss" in text and "step time" in text
        await pilot.press("t")
        await pilot.pause()
        text = screen_text(app)
        assert "rank 3 step p50" in text and "time to first step" in text
        assert not screen.query_one("#compare-charts").display
        await pilot.press("q")
        await until(pilot, lambda: not app.is_running, 10, "q to close it")


@aio
@pytest.mark.timeout(60)
async def test_e_exports_the_run_on_screen(runs, tmp_path):
    import shutil

    from ddptui.tui.app import DdpApp
    from ddptui.tui.replay import ReplaySource
    from tests.support.replay import replayed
    record = tmp_path / runs[2].name
    shutil.copytree(runs[2], record, ignore=shutil.ignore_patterns("export"))
    app = DdpApp(source=ReplaySource(record))
    async with app.run_test(size=(160, 48)) as pilot:
        await replayed(pilot)
        await pilot.press("e")
        await until(pilot, lambda: any(n.title == "exported" for n in app._notifications), 20, "the export")
        said = next(n.message for n in app._notifications if n.title == "exported")
        assert said == f"steps: {record / 'export' / 'steps.csv'}\nevents: {record / 'export' / 'events.csv'}"
    with open(record / "export" / "steps.csv", newline="") as f:
        _check_steps(list(csv.DictReader(f)), 2)


def test_paths_beside_out():
    from ddptui.tui.record_tables import export_paths
    assert export_paths(Path("r"), "csv", "x/a.csv") == (Path("x/a.csv"), Path("x/a-events.csv"))
    assert export_paths(Path("r"), "json", "b") == (Path("b"), Path("b-events.json"))
    assert export_paths(Path("r"), "json", None) == (Path("r/export/steps.json"), Path("r/export/events.json"))
