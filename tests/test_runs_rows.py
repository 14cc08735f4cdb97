"""`ddptui runs`'s decisions (runners/evidence/runs_list.py) on what was read of records: the rows of the suite's real
records, a live run, a dead engine's cut record, another user's folder, the filters, what a prune removes (never a
live run's record); and a wrapped command's record named after its script."""
from __future__ import annotations

import json

import pytest

from ddptui.runners.edge import runs_read, slurm_job
from ddptui.runners.edge.runs_read import read_record
from ddptui.runners.evidence import runs_list as rl
from ddptui.runners.evidence.slurm_state import JobInfo
from ddptui.runners.launch.profile.load import adhoc_name
from tests.support.replay import RECORDS

pytestmark = pytest.mark.any_python
NOW = 1796400000.0


def seen(path="/r/x", summary=None, first=None, last=None, state="finished", line="", problems=(), mtime=0.0,
         profile=None) -> rl.Seen:
    return rl.Seen(path, summary, first, last, state, line or f"{path}: {state}", tuple(problems), mtime, 0, profile)


def started(wall: float, profile="p", world=2) -> dict:
    return {"kind": "run_started", "profile": profile, "runner": "torchrun", "world_size": world, "wall": wall}


def test_the_suite_records_read_as_rows_newest_first_with_their_verdicts(tmp_path):
    rows = rl.rows_of([read_record(RECORDS / n) for n in ("crash", "hang", "cpu-ddp", "slow-collectives")], NOW)
    assert [r.name for r in rows] == ["cpu-ddp", "crash", "hang", "slow"]  # by start, newest first
    by = {r.name: r for r in rows}
    assert (by["crash"].status, by["crash"].runner, by["crash"].ranks, by["crash"].nodes) == ("failed", "torchrun", 2, 1)
    assert by["crash"].verdict.startswith("rank 1 failed first (exit 1): RuntimeError: injected crash on rank 1")
    assert by["hang"].status == "stalled" and by["hang"].verdict.startswith("collective #16 (all_reduce")
    assert by["cpu-ddp"].verdict == "ok after 3000 steps" and by["cpu-ddp"].duration == pytest.approx(12.916)
    assert all(r.state == "finished" and not r.held and r.problem == "" for r in rows)
    line = rl.table_lines(rows)[2]
    assert "crash" in line and "2×1" in line and "failed" in line and line.endswith(str(RECORDS / "crash"))
    assert json.loads(json.dumps([r.to_json() for r in rows]))[1]["live"] is False


def test_a_live_run_a_dead_engine_and_another_users_folder_each_say_so():
    live = rl.row_of(seen(first=started(NOW - 90), state="live", line="/r/x: live, its engine is pid 7"), NOW)
    assert (live.status, live.held, live.duration, live.verdict) == ("live", True, 90, "live, its engine is pid 7")
    dead = rl.row_of(seen(first=started(NOW - 90), last={"kind": "progress", "wall": NOW - 80}, state="dead",
                          line="/r/x: the engine (pid 7) died: the record is incomplete",
                          problems=["events.jsonl ends in a cut line (the engine was killed while writing, or the "
                                    "file was cut)"]), NOW)
    assert (dead.status, dead.held, dead.duration) == ("incomplete", False, 10)
    assert dead.verdict.startswith("events.jsonl ends in a cut line") and "died" in dead.verdict
    gone = rl.row_of(seen(path="/r/theirs", state="unreadable",
                          line="/r/theirs: the folder is unreadable (permission denied: it belongs to bob (uid 7))"), NOW)
    assert (gone.name, gone.status, gone.started) == ("theirs", "unreadable", None)
    assert "belongs to bob" in gone.verdict
    cut_summary = rl.row_of(seen(first=started(NOW - 5), state="finished",
                                 problems=["summary.json is cut short or not JSON (12 bytes)"]), NOW)
    assert cut_summary.status == "incomplete" and "summary.json is cut short" in cut_summary.verdict


def test_filters_status_profile_since():
    rows = rl.rows_of([seen("/r/a", {"profile": "cpu-ddp", "status": "ok"}, started(NOW - 86400 * 3, "cpu-ddp")),
                       seen("/r/b", {"profile": "adhoc-train", "status": "failed"}, started(NOW - 3600, "adhoc-train")),
                       seen("/r/c", None, started(NOW - 60, "adhoc-eval"), state="live")], NOW)
    assert [r.path for r in rl.select(rows, status="live")] == ["/r/c"]
    assert [r.path for r in rl.select(rows, status="failed")] == ["/r/b"]
    assert [r.path for r in rl.select(rows, profile="adhoc-*")] == ["/r/c", "/r/b"]
    assert [r.path for r in rl.select(rows, since=rl.parse_since("1d", NOW))] == ["/r/c", "/r/b"]
    assert rl.parse_age("7d") == 7 * 86400 and rl.parse_age("12h") == 43200 and rl.parse_age("2w") == 14 * 86400
    with pytest.raises(ValueError, match="expected an age"):
        rl.parse_age("soon")
    with pytest.raises(ValueError, match="expected an age .* or a date"):
        rl.parse_since("last tuesday", NOW)


def test_prune_keeps_the_newest_and_never_a_record_an_engine_holds():
    rows = rl.rows_of([seen(f"/r/{i}", {"status": "ok"}, started(NOW - 86400 * i)) for i in range(5)]
                      + [seen("/r/live-old", None, started(NOW - 86400 * 30), state="live"),
                         seen("/r/busy", None, started(NOW - 86400 * 31), state="busy"),
                         seen("/r/batch", None, started(NOW - 86400 * 32), state="elsewhere"),
                         seen("/r/theirs", state="unreadable"),
                         seen("/r/pending", state="not-a-record", mtime=NOW - 86400 * 40)], NOW)
    keep2 = rl.to_prune(rows, NOW, keep=2)
    assert [r.path for r in keep2.remove] == ["/r/2", "/r/3", "/r/4"]
    assert {r.path for r in keep2.keep_held} == {"/r/live-old", "/r/busy", "/r/batch", "/r/theirs", "/r/pending"}
    week = rl.to_prune(rows, NOW, older_than=rl.parse_age("3d"))
    assert [r.path for r in week.remove] == ["/r/4"]  # 4 days old; 3 days is not older than 3 days
    assert "/r/live-old" in {r.path for r in week.keep_held}
    assert rl.to_prune(rows, NOW, keep=100).remove == ()


@pytest.mark.parametrize("cmd, name", [
    (["python", "train.py", "--lr", "1"], "adhoc-train"),
    (["/venv/bin/python3.11", "-u", "/src/train.py"], "adhoc-train"),
    (["torchrun", "--standalone", "--nproc-per-node", "2", "train.py"], "adhoc-train"),
    (["python", "-m", "torch.distributed.run", "--nproc_per_node", "3", "jobs/fit.py"], "adhoc-fit"),
    (["python", "-m", "pkg.trainer"], "adhoc-trainer"),
    (["srun", "-N", "2", "./prog", "--epochs", "3"], "adhoc-prog"),
    (["python", "-c", "print(1)"], "adhoc"),
])
def test_a_wrapped_command_is_named_after_its_script(cmd, name):
    assert adhoc_name(cmd) == name


def test_prune_keeps_a_finished_record_whose_slurm_job_slurm_still_holds(tmp_path, monkeypatch):
    """A requeued batch job pending for its next attempt has attempt 0's summary; its engine writes there again."""
    record = tmp_path / "20261205-080839-slurm-ddp"
    record.mkdir()
    (record / "events.jsonl").write_text("")
    (record / "summary.json").write_text(json.dumps({"status": "failed", "job": {"id": "77", "state": "FAILED"}}))
    said: list[str] = []

    def poll(self):
        said.append(self.job_id)
        return JobInfo("77", state, "BeginTime", "")
    monkeypatch.setattr(slurm_job.SlurmJobWatch, "poll", poll)
    state = "PENDING"
    assert runs_read.remove_record(record) == f"{record}: its Slurm job 77 is PENDING (a requeued job's next " \
                                              "attempt writes into it)"
    assert record.is_dir() and said == ["77"]
    state = "FAILED"  # Slurm is done with it
    assert runs_read.remove_record(record) is None and not record.exists()
