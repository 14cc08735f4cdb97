"""compare's and export's pure parts over plain events: the figures of a run (pace, step-time percentiles, samples/s,
time to first step), losses at matching steps, runs with different rank counts, the tables export writes."""
from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import pytest

from ddptui.runners import events as ev
from ddptui.tui import compare_table, export_rows
from ddptui.tui.run_series import fold
from ddptui.tui.widgets.compare_chart import compare_chart_data

pytestmark = pytest.mark.any_python

T0 = 1_700_000_000.0


def run_events(ranks: int, steps: int, step_time: float, samples: int | None = 32, first: float = 3.0,
               per_event: int = 5, loss=lambda r, s: 10.0 / s + r, slow: dict | None = None) -> list:
    """A finished run: RunStarted, each rank's Progress every `per_event` steps (read `first` s after the start, then
    every step's `step_time`: `slow` rank -> its own), losses for every step, RunFinished ok."""
    out: list = [ev.RunStarted("/runs/x", "p", "torchrun", ranks, steps, T0)]
    for r in range(ranks):
        st = (slow or {}).get(r, step_time)
        for s in range(per_event, steps + 1, per_event):
            pts = tuple((k, loss(r, k)) for k in range(s - per_event + 1, s + 1))
            out.append(ev.Progress(r, s, pts[-1][1], T0 + first + s * st, "hook", pts, samples, st))
    out.sort(key=lambda e: e.wall)
    out.append(ev.ReplicaVerdict("identical", "all ranks hold byte-identical weights", None, (), (), {}, T0 + 100))
    out.append(ev.RunFinished("ok", 0, "/runs/x/summary.json", T0 + 101, {}))
    return out


def test_weighted_percentile_counts_each_value_its_weight():
    assert compare_table.weighted_percentile([(1.0, 1), (2.0, 1), (3.0, 1), (4.0, 1)], 50) == 2.0
    assert compare_table.weighted_percentile([(1.0, 94), (9.0, 6)], 95) == 9.0
    assert compare_table.weighted_percentile([(1.0, 95), (9.0, 5)], 95) == 1.0
    assert compare_table.weighted_percentile([], 50) is None
    assert compare_table.weighted_percentile([(5.0, 0)], 50) is None


def test_figures_of_one_run():
    run = fold(run_events(2, 100, 0.05, samples=32, first=3.0), "a")
    f = compare_table.run_figures(run)
    assert (f.ranks, f.status, f.steps) == (2, "ok", 100)
    assert f.verdict == "ok: all ranks hold byte-identical weights"
    assert f.steps_per_s == pytest.approx(20.0)
    assert f.p50 == f.p95 == pytest.approx(0.05)
    assert f.samples_per_s == pytest.approx(2 * 32 * 20.0)  # each rank's share, summed
    assert f.first_step_s == pytest.approx(3.0 + 5 * 0.05)  # the first Progress holds 5 steps
    assert f.losses[10] == pytest.approx((1.0 + 2.0) / 2)  # mean over the ranks


def test_a_slow_rank_sets_the_run_pace_and_its_percentiles():
    run = fold(run_events(4, 100, 0.05, slow={3: 0.2}), "a")
    f = compare_table.run_figures(run)
    assert f.steps_per_s == pytest.approx(5.0)  # the slowest rank's
    assert f.ranks_figures[3].p50 == pytest.approx(0.2) and f.ranks_figures[0].p50 == pytest.approx(0.05)
    assert f.p50 == pytest.approx(0.05) and f.p95 == pytest.approx(0.2)  # a quarter of every rank's steps are slow


def test_spikes_reach_p95_not_p50():
    events = [ev.RunStarted("/r", "p", "env", 1, 100, T0)]
    for s in range(1, 101):
        events.append(ev.Progress(0, s, 1.0, T0 + s, "hook", ((s, 1.0),), None, 1.0 if s % 10 else 4.0))
    f = compare_table.run_figures(fold(events, "x"))
    assert f.p50 == 1.0 and f.p95 == 4.0 and f.samples_per_s is None
    assert f.status == "incomplete" and f.verdict == "incomplete"  # no RunFinished


def test_a_record_without_step_times_is_timed_by_its_read_times():
    events = [ev.RunStarted("/r", "p", "env", 1, 50, T0)]
    for s in range(5, 55, 5):
        events.append(ev.Progress(0, s, 1.0, T0 + s * 0.1, "hook", ((s, 1.0),)))  # step_time False: older records
    f = compare_table.run_figures(fold(events, "old"))
    assert f.p50 == pytest.approx(0.1, rel=0.01)
    assert f.steps_per_s == pytest.approx(10.0)


def test_only_the_last_attempt_counts():
    events = run_events(1, 20, 0.5)
    restart = [ev.AttemptStarted(1, "torchrun restarted", T0 + 50)]
    restart += [ev.Progress(0, s, 5.0, T0 + 50 + s * 0.1, "hook", ((s, 5.0),), 8, 0.1) for s in range(1, 11)]
    f = compare_table.run_figures(fold(events[:-2] + restart + events[-2:], "r"))
    assert f.steps == 10 and f.p50 == pytest.approx(0.1) and f.losses == {s: 5.0 for s in range(1, 11)}


def test_runs_with_different_rank_counts_compare_per_rank_where_they_can():
    two = fold(run_events(2, 100, 0.05), "two")
    four = fold(run_events(4, 100, 0.1), "four")
    c = compare_table.compare([two, four])
    rows = {r.label: r for r in c.rows}
    assert rows["ranks"].cells == ("2", "4")
    assert rows["rank 3 step p50"].values == (None, pytest.approx(0.1)) and rows["rank 3 step p50"].cells[0] == "—"
    assert rows["rank 1 step p50"].values == (pytest.approx(0.05), pytest.approx(0.1))
    assert rows["steps/s"].cells[1].endswith("(-50%)")
    assert any("2 and 4 ranks" in n for n in c.notes)
    assert c.common_steps == 100
    assert [r.label for r in c.rows if r.label.startswith("loss at")] == [
        f"loss at step {s}" for s in (1, 21, 41, 60, 80, 100)]
    assert rows["loss at step 100"].values == (pytest.approx(0.1 + 0.5), pytest.approx(0.1 + 1.5))
    text = "\n".join(compare_table.table_lines(c))
    assert "A: two  ok: all ranks" in text and "B: four" in text
    data = json.loads(json.dumps(compare_table.to_json(c), allow_nan=False))
    assert [r["ranks"] for r in data["runs"]] == [2, 4]
    assert data["runs"][1]["per_rank"]["3"]["step_time_p50_s"] == pytest.approx(0.1)
    assert "3" not in data["runs"][0]["per_rank"]
    assert data["matching_steps"]["count"] == 100 and len(data["matching_steps"]["steps"]) == 100


def test_no_matching_step_is_said():
    a = fold(run_events(1, 10, 0.1), "a")
    b = fold(run_events(1, 10, 0.1, loss=lambda r, s: math.nan), "b")
    c = compare_table.compare([a, b])
    assert c.common_steps == 0 and "no step has a loss in every run" in c.notes


def test_step_rows_one_per_rank_and_step():
    run = fold(run_events(2, 20, 0.5, samples=16), "a")
    rows = export_rows.step_rows(run)
    keys = [(r[0], r[2]) for r in rows]
    assert keys == [(r, s) for r in (0, 1) for s in range(1, 21)]
    by = {(r[0], r[2]): dict(zip(export_rows.STEP_COLUMNS, r, strict=True)) for r in rows}
    at10 = by[(1, 10)]  # a step a Progress event reached: read time, step time, samples and samples/s
    assert at10["wall"] == pytest.approx(T0 + 3 + 5.0) and at10["t"] == pytest.approx(8.0)
    assert (at10["step_time_s"], at10["samples"], at10["samples_per_s"]) == (0.5, 16, 32.0)
    assert at10["loss"] == pytest.approx(2.0)
    assert by[(1, 9)]["wall"] is None and by[(1, 9)]["loss"] == pytest.approx(10 / 9 + 1)  # only its loss


def _written(rows, cols, fmt) -> str:
    out = io.StringIO()
    export_rows.write(rows, cols, fmt, out)
    return out.getvalue()


def test_tables_as_csv_and_json():
    events = run_events(1, 10, 0.5)
    events.insert(3, ev.StallDetected((0,), (), T0 + 4, 10.0, T0 + 5, "no step for 10 s"))
    run = fold(events, "a")
    steps = list(csv.DictReader(io.StringIO(_written(export_rows.step_rows(run), export_rows.STEP_COLUMNS, "csv"))))
    assert len(steps) == 10 and steps[0]["wall"] == "" and float(steps[4]["samples_per_s"]) == 64.0
    evs = list(csv.DictReader(io.StringIO(_written(export_rows.event_rows(run), export_rows.EVENT_COLUMNS, "csv"))))
    assert [e["kind"] for e in evs] == ["run_started", "stall", "replica_verdict", "run_finished"]
    assert evs[1]["text"] == "no step for 10 s" and json.loads(evs[1]["fields"])["stalled"] == [0]
    rows = export_rows.step_rows(run)
    rows[0] = rows[0][:5] + (math.nan,) + rows[0][6:]  # a NaN loss is null in JSON
    data = json.loads(_written(rows, export_rows.STEP_COLUMNS, "json"))
    assert data[0]["loss"] is None and data[4]["samples_per_s"] == 64.0 and len(data) == 10
    data = json.loads(_written(export_rows.event_rows(run), export_rows.EVENT_COLUMNS, "json"))
    assert data[1]["fields"]["reason"] == "no step for 10 s" and data[0]["rank"] is None


def test_chart_data_one_curve_a_run():
    two = fold(run_events(2, 100, 0.05), "two")
    four = fold(run_events(4, 100, 0.1), "four")
    loss = compare_chart_data([two, four], "loss", columns=60)
    assert [s.name for s in loss.series] == ["A", "B"]
    assert len(loss.series[0].xs) <= 120 and loss.series[0].xs[-1] == 100
    steps = compare_chart_data([two, four], "step time")
    assert steps.series[0].ys[0] == pytest.approx(0.05) and steps.series[1].ys[0] == pytest.approx(0.1)
    assert compare_chart_data([fold([], "e")], "loss").series == ()


# ---- the reader: Progress lines read by the writer's pattern, the same as decoded one by one ----

def _record(tmp_path, events, extra_lines=()) -> Path:
    from ddptui.runners.edge.record import RunRecord
    rec = RunRecord(tmp_path / "rec")
    for e in events:
        rec.event(e)
    rec.close()
    with open(tmp_path / "rec" / "events.jsonl", "a", encoding="utf-8") as f:
        for line in extra_lines:
            f.write(line + "\n")
    return tmp_path / "rec"


def _same(a, b) -> None:
    assert sorted(a.ranks) == sorted(b.ranks)
    for r in a.ranks:
        x, y = a.ranks[r], b.ranks[r]
        assert (x.steps, x.walls, x.samples, x.attempts) == (y.steps, y.walls, y.samples, y.attempts)
        assert x.step_times == pytest.approx(y.step_times, nan_ok=True)
        assert (x.loss_attempts, x.loss_steps) == (y.loss_attempts, y.loss_steps)
        assert x.loss_values == pytest.approx(y.loss_values, nan_ok=True)
    assert (a.status, a.verdict, a.attempt, len(a.others)) == (b.status, b.verdict, b.attempt, len(b.others))


def test_the_fast_reader_reads_what_the_events_say(tmp_path):
    from ddptui.runners.edge.record import _PROGRESS_LINE
    from ddptui.tui.record_tables import read_run
    events = run_events(2, 30, 0.1, per_event=3, loss=lambda r, s: math.nan if s == 7 else 1.0 / s)
    events.insert(5, ev.Progress(0, None, None, T0 + 3.1, "parsed", (), None, None))  # no step yet
    events.insert(6, ev.Progress(1, 3, 2.5, T0 + 3.2, "parsed", (), None, None))  # a loss without points
    restart = [ev.AttemptStarted(1, "torchrun restarted", T0 + 50)]
    restart += [ev.Progress(0, s, 5.0, T0 + 50 + s, "hook", ((s, 5.0), (s, 4.0)), 8, 1e-5) for s in (1, 2)]
    events = events[:-2] + restart + events[-2:]
    run_dir = _record(tmp_path, events)
    line = (run_dir / "events.jsonl").read_text().splitlines()[1]
    assert _PROGRESS_LINE.match(line), line  # the shape RunRecord writes is the pattern's: else every line is slow
    got = read_run(run_dir)
    assert got.problems == []
    _same(got, fold(events, "rec"))
    assert got.ranks[0].loss_values[-1] == 4.0 and got.attempt == 1


def test_the_reader_says_a_bad_line_and_reads_the_rest(tmp_path):
    from ddptui.tui.record_tables import read_run
    events = run_events(1, 10, 0.1)
    bad = '{"rank": "zero", "step": 3, "loss": 1.0, "wall": 1.0, "source": "hook", "losses": [], "kind": "progress"}'
    older = '{"rank": 0, "step": 12, "loss": 0.5, "wall": 1700000010.0, "source": "report", "losses": [[12, 0.5]], ' \
            '"kind": "progress"}'  # a record from before samples and step_time: decoded one by one
    run_dir = _record(tmp_path, events[:-1], [bad, older, json.dumps(events[-1].to_json())])
    with open(run_dir / "events.jsonl", "a", encoding="utf-8") as f:
        f.write('{"rank": 0, "step": 13, "loss": 0.4, "wall": 17')  # the engine stopped while writing it
    got = read_run(run_dir)
    assert got.ranks[0].steps[-1] == 12 and got.ranks[0].loss_steps[-1] == 12 and got.status == "ok"
    assert any("1 malformed line" in p and "progress.rank" in p for p in got.problems), got.problems
    assert any("the last, is cut short" in p for p in got.problems), got.problems
