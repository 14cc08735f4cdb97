"""The Flight Recorder dumps NCCL's watchdog writes itself at a timeout (RUN/fr/nccl_trace_rank_<R>, torch's pickle)
name the collective in the crash verdict and in summary.json's crash section. The dumps in tests/data/fr/nccl_timeout
were written by real gloo ranks through the same Flight Recorder code (_dump_fr_trace, prefix + rank: see
tests/data/fr/record.py); there is no GPU here to make NCCL time out."""
from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import pytest

from ddptui.runners import events as ev
from ddptui.runners.evidence import fr_analysis
from ddptui.runners.edge import nccl_dumps
from ddptui.runners.evidence import nccl_finding
from ddptui.runners.judge.conclusion import Conclusion, Launcher
from ddptui.runners.launch.profile.load import load_profile
from ddptui.runners.judge.rank_lifecycle import RankLifecycle
from ddptui.runners.judge.run_state import EXIT_FAILED, RunState
from ddptui.runners.session import Session
from ddptui.runners.judge.stack_verdicts import StackVerdicts

from tests.support.engine import Recorder

pytestmark = pytest.mark.any_python

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data" / "fr" / "nccl_timeout"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
T0, W0 = 1000.0, 1_764_682_000.0
# rank 0 in the all_reduce of gloo_timeout.py, rank 1 asleep before it: what the crash verdict adds
MISSING = ("Flight Recorder (NCCL's own dump at the timeout): collective #1 (all_reduce, 1 tensor [4] float32, "
           "default group): rank 0 entered it, rank 1 never did (its first collective in this group not reached)")


def test_the_dump_files_are_prefix_and_rank_only():
    assert nccl_dumps.PREFIX == "nccl_trace_rank_"
    assert nccl_dumps.rank_files(["nccl_trace_rank_0", "nccl_trace_rank_12", "nccl_trace_rank_1.tmp", "rank_0",
                                  "nccl_trace_rank_", "xnccl_trace_rank_3"]) == {0: "nccl_trace_rank_0",
                                                                                12: "nccl_trace_rank_12"}


def test_reading_the_recorded_dumps_and_refusing_what_is_not_one(tmp_path):
    dumps, problems = nccl_dumps.read(DATA / "gloo_timeout")
    assert sorted(dumps) == [0, 1] and problems == {}
    assert dumps[0]["entries"][0]["profiling_name"] == "gloo:all_reduce" and dumps[1]["entries"] == []
    shutil.copy(DATA / "gloo_timeout" / "nccl_trace_rank_0", tmp_path / "nccl_trace_rank_0")
    (tmp_path / "nccl_trace_rank_1").write_bytes((DATA / "gloo_timeout" / "nccl_trace_rank_1").read_bytes()[:40])
    (tmp_path / "nccl_trace_rank_2").write_bytes(pickle.dumps(Path("/etc/passwd")))  # names a class: not plain data
    (tmp_path / "nccl_trace_rank_3").write_bytes(pickle.dumps(["not", "a", "dump"]))
    dumps, problems = nccl_dumps.read(tmp_path)
    assert sorted(dumps) == [0]
    assert problems[1].startswith("fr/nccl_trace_rank_1 unreadable (")
    assert problems[2].startswith("fr/nccl_trace_rank_2 unreadable (UnpicklingError: names pathlib")
    assert problems[3] == "fr/nccl_trace_rank_3 is not a Flight Recorder dump"
    assert nccl_dumps.read(tmp_path / "none") == ({}, {})


def test_a_rank_that_never_entered_the_collective_is_named_missing_at_seq_1():
    """Rank 1's dump records no collective at all (it slept before its first): it is missing from #1, not a rank
    without a dump; and #1 is the first collective (-1: nothing completed), not #0."""
    f = nccl_finding.finding(nccl_dumps.read(DATA / "gloo_timeout")[0], 2)
    assert (f.kind, f.seq, f.entered, f.missing, f.absent, f.culprits) == ("missing", 1, (0,), (1,), (), (1,))
    assert f.call == fr_analysis.Call("all_reduce", ((4,),), ("Float",))


def test_gloo_noting_completion_late_does_not_hide_the_frontier():
    """skip_one_allreduce's rank 0 had noted completion up to #15 of its 20 while rank 1 had completed #19: #16-#19
    went through (a member completed them), so the frontier is #20, where rank 0 calls all_reduce and rank 1 the
    barrier, and nobody went through it."""
    dumps, _ = nccl_dumps.read(DATA / "skip_one_allreduce")
    assert (dumps[0]["pg_status"]["0"]["last_completed_collective"],
            dumps[1]["pg_status"]["0"]["last_completed_collective"]) == (15, 19)
    f = nccl_finding.finding(dumps, 2)
    assert (f.kind, f.seq, f.completed, f.culprits) == ("op mismatch", 20, False, (0, 1))
    assert nccl_finding.words(f) == (
        "Flight Recorder (NCCL's own dump at the timeout): ranks disagree at collective #20 in the default group: "
        "rank 0 called all_reduce [33], rank 1 barrier (a rank-conditional collective)")


def test_words_with_no_finding_or_unreadable_files():
    assert nccl_finding.words(None) == ""
    assert nccl_finding.words(fr_analysis.Finding("none")) == (
        "Flight Recorder (NCCL's own dump at the timeout): every collective of every rank completed")
    assert nccl_finding.words(None, {1: "fr/nccl_trace_rank_1 unreadable (EOFError: x)"}) == (
        "Flight Recorder (NCCL's own dump at the timeout): fr/nccl_trace_rank_1 unreadable (EOFError: x)")
    crash = ev.CrashVerdict("rank 0 failed first (exit 1)", 0, (1,), "exit 1", (), W0)
    assert nccl_finding.with_dumps(crash, {}, {}, 2) is crash and nccl_finding.with_dumps(None, {0: {}}, {}, 2) is None


def test_the_crash_verdict_and_summary_name_the_collective():
    s = RunState(load_profile(ROOT / "profiles" / "cpu-ddp.yaml", ["nproc=2", "replica_check=false"]), T0, W0)
    s.begin(2, 1)
    life = RankLifecycle(s)
    end = Conclusion(s, life, StackVerdicts(s))
    for r in (0, 1):
        s.tracks[r].pid, s.tracks[r].ran = 100 + r, True
    # the timeout's own exception, as the rank's stderr shows it (an exit 1 without one is the program's own choice)
    s.tracks[0].err_tail.extend(["Traceback (most recent call last):",
                                 "torch.distributed.DistBackendError: [Rank 0] Timed out in all_reduce"])
    life.deaths([(100, W0 + 2.0, 1)], own=set())
    s.mono, s.wall = T0 + 3.0, W0 + 3.0
    end.settle()
    got = end.conclude(None, None, [Launcher("torchrun", 1)], nccl=nccl_dumps.read(DATA / "gloo_timeout"))
    assert got == ("failed", EXIT_FAILED)
    assert s.crash.root_rank == 0 and s.crash.text.endswith("; " + MISSING), s.crash.text
    assert s.crash.collective["kind"] == "missing" and s.crash.collective["culprits"] == [1]
    assert ev.from_json(json.loads(json.dumps(s.crash.to_json()))).collective["seq"] == 1
    summary = json.loads(json.dumps(end.summary("failed", EXIT_FAILED, "runs/x", 3.0, 0.1, [], [])))
    assert summary["crash"]["collective"]["seq"] == 1 and summary["crash"]["collective"]["missing"] == [1]
    assert summary["crash"]["text"] == s.crash.text


@pytest.mark.timeout(120)
def test_a_run_that_ends_with_nccl_dumps_in_its_record_names_the_collective(tmp_path):
    """Real ranks: gloo_timeout.py's rank 0 times out (3 s) in the all_reduce rank 1, asleep, never entered, the
    gloo shape of a NCCL watchdog timeout. NCCL's own dumps, which gloo does not write, are put in the run's fr/
    folder by the test before the run (the ones recorded from this same program: a stand-in for what the watchdog
    writes there through TORCH_FR_DUMP_TEMP_FILE); the crash verdict, its event and summary.json name the
    collective, and the files stay in the record."""
    profile = tmp_path / "nccl-timeout.yaml"
    profile.write_text(f"name: nccl-timeout\nrunner: torchrun\nnproc: 2\nbackend: gloo\ntimeout: 90\n"
                       f"env:\n  PG_TIMEOUT: '3'\n  LATE_BY: '8'\nworkload:\n  script: {FIXTURES / 'gloo_timeout.py'}\n")
    rec = Recorder()
    session = Session(load_profile(profile), tmp_path / "runs", emit=rec)
    (session.run_dir / "fr").mkdir(parents=True, exist_ok=True)
    for r in (0, 1):
        shutil.copy(DATA / "gloo_timeout" / f"nccl_trace_rank_{r}", session.run_dir / "fr" / f"nccl_trace_rank_{r}")
    assert session.run() == EXIT_FAILED
    crash = rec.one(ev.CrashVerdict)
    assert crash.root_rank == 0 and "Timed out" in crash.text and crash.text.endswith("; " + MISSING), crash.text
    summary = json.loads((session.run_dir / "summary.json").read_text())
    assert summary["crash"]["text"] == crash.text and summary["crash"]["collective"]["seq"] == 1
    assert summary["crash"]["collective"]["entered"] == [0] and summary["crash"]["collective"]["missing"] == [1]
    assert sorted(p.name for p in (session.run_dir / "fr").iterdir()) == ["nccl_trace_rank_0", "nccl_trace_rank_1"]
