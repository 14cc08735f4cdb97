"""Each job of the judge reached directly over a RunState (run_state, ingest, rank_lifecycle, watch, stack_verdicts,
conclusion), with a fake clock and no processes; tests/test_judge.py drives the same through the Judge facade."""
from __future__ import annotations

import pytest

import ast
import json
from pathlib import Path

from ddptui.runners import events as ev
from ddptui.runners.judge.conclusion import Conclusion, Launcher
from ddptui.runners.judge.ingest import Ingest
from ddptui.runners.launch.profile.load import load_profile
from ddptui.runners.judge.rank_lifecycle import RankLifecycle
from ddptui.runners.judge.run_state import EXIT_FAILED, EXIT_OK, CollectStacks, RunState, TearDown
from ddptui.runners.judge.stack_verdicts import StackVerdicts
from ddptui.runners.judge.watch import CRASH_GRACE, Watch

pytestmark = pytest.mark.any_python

ROOT = Path(__file__).resolve().parent.parent
T0, W0 = 1000.0, 1_764_682_000.0
PARTS = ("run_state", "ingest", "rank_lifecycle", "watch", "stack_verdicts", "conclusion", "judge", "job_follow",
         "slurm_state", "rank_learn", "own_exit", "kill_reading")


def state(*over: str, world: int = 2) -> RunState:
    s = RunState(load_profile(ROOT / "profiles" / "cpu-ddp.yaml", [f"nproc={world}", *over]), T0, W0)
    s.begin(world, 1)
    return s


def at(s: RunState, dt: float) -> None:
    s.mono, s.wall = T0 + dt, W0 + dt


def of(outs, cls) -> list:
    return [o for o in outs if isinstance(o, cls)]


def test_the_outbox_hands_out_what_was_decided_in_order_once():
    s = state()
    s.say("ddptui: one")
    s.set_status(s.tracks[1], "running", "")
    s.set_status(s.tracks[1], "running", "")  # no change, no detail: nothing said
    out = s.take()
    assert [type(o) for o in out] == [ev.LogLines, ev.RankState] and out[0].lines == ("ddptui: one",)
    assert s.take() == []


def test_ingest_reads_steps_and_reports_into_the_tracks_and_coalesces_progress():
    s = state()
    ing = Ingest(s, RankLifecycle(s))
    at(s, 1.0)
    ing.lines(0, "out", ["epoch 1 step 3 loss 0.52", "@ddptui " + json.dumps({"k": "hello", "r": 0, "pid": 41}),
                         "@ddptui " + json.dumps({"k": "exc", "r": 0, "type": "ValueError", "msg": "m"})],
              W0 + 1.0, T0 + 1.0)
    t = s.tracks[0]
    assert (t.step, t.loss, t.pid, t.status, t.exc["type"]) == (3, 0.52, 41, "running", "ValueError")
    assert t.first_failure_wall == W0 + 1.0
    out = s.take()
    assert [o.lines for o in of(out, ev.LogLines)] == [("epoch 1 step 3 loss 0.52",)] and of(out, ev.Progress) == []
    ing.progress()
    assert [(p.rank, p.step) for p in s.take()] == [(0, 3)]


def test_ingest_hands_torchruns_exit_codes_to_the_lifecycle():
    s = state()
    life = RankLifecycle(s)
    ing = Ingest(s, life)
    record = ROOT / "tests" / "fixtures" / "records" / "crash"
    for r, pid in ((0, 16323), (1, 16324)):
        s.tracks[r].pid, s.tracks[r].ran = pid, True
    life.deaths([(16324, W0 + 2.0, None), (16323, W0 + 2.4, None)], own=set())
    at(s, 3.0)
    lines = [ln.split(" err ", 1)[1] for ln in (record / "launcher.log").read_text().splitlines() if " err " in ln]
    ing.lines(None, "err", lines, W0 + 3.0, T0 + 3.0)
    assert (s.tracks[1].status, s.tracks[1].returncode) == ("failed", 1)
    assert (s.tracks[0].status, s.tracks[0].outcome) == ("killed", "stopped by the launcher after rank 1 failed")


def test_lifecycle_a_death_after_ddptuis_teardown_began_is_ddptuis_doing():
    s = state()
    life = RankLifecycle(s)
    for r in (0, 1):
        s.tracks[r].pid, s.tracks[r].ran = 100 + r, True
    at(s, 2.0)
    life.deaths([(101, W0 + 2.0, 1)], own=set())
    assert s.tracks[1].status == "failed" and s.first_failure == T0 + 2.0
    at(s, 8.0)
    life.teardown_began("failed")
    life.deaths([(100, W0 + 8.1, -15)], own=set())
    assert s.tracks[0].outcome == "torn down by ddptui after rank 1 failed"
    assert life.stopped_by(s.tracks[0]) == "ddptui" and life.oom_suspects() == [] and life.watched_pids() == set()


def test_lifecycle_a_launcher_exiting_0_ends_every_rank_it_ran_as_exited():
    s = state()
    life = RankLifecycle(s)
    life.process_exited("torchrun", (0, 1), 99, 0, W0 + 5.0, launcher=True)
    out = s.take()
    assert of(out, ev.ProcessExited)[0].returncode == 0
    assert [(t.status, t.outcome) for t in s.tracks.values()] == [("exited", "exited 0")] * 2


def test_watch_timeout_and_crash_grace_ask_for_a_teardown():
    s = state("timeout=30")
    w = Watch(s, StackVerdicts(s))
    at(s, 29.0)
    w.check()
    assert of(s.take(), TearDown) == []
    at(s, 31.0)
    w.check()
    assert of(s.take(), TearDown) == [TearDown("timeout", EXIT_FAILED)]
    s = state()
    w = Watch(s, StackVerdicts(s))
    s.first_failure = T0 + 1.0
    at(s, 1.0 + CRASH_GRACE + 0.1)
    w.check()
    assert of(s.take(), TearDown) == [TearDown("failed", EXIT_FAILED)]


def test_watch_stall_then_no_stacks_gives_the_verdict_in_words_and_dump_keeps_the_stalled_ranks():
    s = state("stall_after=10", "startup_grace=1", "on_stall=dump")
    w = Watch(s, StackVerdicts(s))
    at(s, 12.0)
    w.check()
    (req,) = of(s.take(), CollectStacks)
    assert req.judged == "stall" and s.stall_info["stalled"] == [0, 1]
    w.dump_requested()
    assert s.take() == [CollectStacks("on request", (0, 1), req.since)]
    w.stacks_collected(req, {}, "stacks/01-stall")
    (hv,) = of(s.take(), ev.HangVerdict)
    assert s.hang is hv and hv.text.startswith("ranks 0, 1 made no progress since")


def test_stack_verdicts_on_request_and_without_live_ranks_say_so_and_judge_nothing():
    s = state()
    sv = StackVerdicts(s)
    assert sv.read(CollectStacks("on request"), None, None) is None
    assert sv.read(CollectStacks("on request"), {0: None}, "stacks/01") is None
    said = [ln for o in s.take() for ln in o.lines]
    assert said == ["ddptui: no live rank to collect stacks from",
                    "ddptui: stacks of rank 0 recorded in stacks/01 (no rank is stalled: no verdict)"]
    assert s.hang is None and sv.targets() == []


def test_conclusion_settles_the_rest_as_stopped_and_sums_up():
    s = state("replica_check=false")
    life = RankLifecycle(s)
    end = Conclusion(s, life, StackVerdicts(s))
    for r in (0, 1):
        s.tracks[r].pid, s.tracks[r].ran = 100 + r, True
    life.deaths([(101, W0 + 2.0, -11)], own=set())
    at(s, 3.0)
    end.settle()  # rank 0 never ended: it ends now, stopped (by the launcher: no teardown of ours began)
    assert end.conclude(None, None, [Launcher("torchrun", 1)]) == ("failed", EXIT_FAILED)
    assert s.tracks[0].outcome == "stopped by the launcher after rank 1 failed"
    # its exit is unknown: the crash verdict names only what its evidence decides
    first = "failed first (SIGSEGV (segmentation fault))"
    assert s.crash.root_rank == 1 and s.crash.stopped == () and s.crash.outcomes == {1: first}
    summ = json.loads(json.dumps(end.summary("failed", EXIT_FAILED, "runs/x", 3.0, 0.1, [], [])))
    assert summ["ranks"]["0"]["status"] == "killed" and summ["crash"]["outcomes"] == {"1": first}
    s = state("replica_check=false")
    end = Conclusion(s, RankLifecycle(s), StackVerdicts(s))
    RankLifecycle(s).process_exited("torchrun", (0, 1), 99, 0, W0 + 5.0, launcher=True)
    end.settle()
    assert end.conclude(None, None, [Launcher("torchrun", 0)]) == ("ok", EXIT_OK) and s.crash is None


def test_the_judges_parts_do_no_io():
    """Decisions only: no module of the judge imports what reads files, processes, sockets or threads."""
    io = {"os", "psutil", "subprocess", "socket", "threading", "pathlib", "shutil", "signal", "select"}
    for name in PARTS:
        (path,) = (ROOT / "runners").glob(f"*/{name}.py")
        tree = ast.parse(path.read_text())
        imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module
                     and n.level == 0}
        assert not imported & io, (name, imported & io)
