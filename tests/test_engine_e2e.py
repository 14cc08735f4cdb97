"""End-to-end runs of every shipped CPU profile through the real engine: real torchrun, gloo ranks, faults."""
from __future__ import annotations

import io
import json
import math
import re

import pytest

from ddptui.runners import events as ev
from ddptui.runners.session import EXIT_FAILED, EXIT_OK, EXIT_REPLICAS, EXIT_STALLED
from tests.support.engine import run_profile
from tests.support.wait import wait_until
from ddptui.tui.console import Console

pytestmark = pytest.mark.main_suite("long end-to-end rank runs, some on the test's own interpreter")


def _assert_record(session, world: int) -> dict:
    d = session.run_dir
    summary = json.loads((d / "summary.json").read_text())
    assert json.loads((d / "profile.json").read_text())["name"] == session.profile.name
    assert json.loads((d / "plan.json").read_text())["world_size"] == world
    for r in range(world):
        log = (d / f"rank{r}.log").read_text()
        first = log.splitlines()[0]
        assert first[:4].isdigit() and first[10] == "T", first  # ISO wall time stamped at read time
    kinds = {json.loads(x)["kind"] for x in (d / "events.jsonl").read_text().splitlines()}
    assert {"run_started", "run_finished"} <= kinds
    return summary


@pytest.mark.timeout(120)
def test_cpu_ddp_clean_run(runs_dir):
    code, rec, session = run_profile("cpu-ddp", runs_dir)
    assert code == EXIT_OK
    summary = _assert_record(session, 2)
    assert summary["status"] == "ok"
    rep = rec.one(ev.ReplicaVerdict)
    assert rep.status == "identical" and set(rep.table) == {0, 1} and len(rep.params) >= 2
    assert "ddp_mlp_ok" in rec.lines(0) and "ddp_mlp_ok" not in rec.lines(1)
    assert not any(ln.startswith("@ddptui") for r in (0, 1) for ln in rec.lines(r)), "reports leak into logs"
    for r in (0, 1):
        info = summary["ranks"][str(r)]
        assert info["steps"] == 50 and info["returncode"] == 0
        assert info["first_loss"] > info["last_loss"]
        # one event per rank per turn, carrying every loss point since the previous one
        points = [p for e in rec.of(ev.Progress) if e.rank == r for p in e.losses]
        assert [p[0] for p in points] == list(range(1, 51)) and all(math.isfinite(p[1]) for p in points)
        assert [e.step for e in rec.of(ev.Progress) if e.rank == r][-1] == 50
    assert summary["ranks"]["0"]["workload_loss"]["steps"] == 50


@pytest.mark.timeout(120)
def test_overrides_change_world_size_and_steps(runs_dir):
    code, rec, session = run_profile("cpu-ddp", runs_dir, ["nproc=3", "steps=12"])
    assert code == EXIT_OK
    summary = _assert_record(session, 3)
    assert {r: i["steps"] for r, i in summary["ranks"].items()} == {"0": 12, "1": 12, "2": 12}
    assert rec.one(ev.ReplicaVerdict).status == "identical"


@pytest.mark.timeout(120)
def test_cpu_smoke(shared_run):
    code, rec, session = shared_run("cpu-smoke")
    assert code == EXIT_OK
    assert "dist_smoke_ok" in rec.lines(0)
    assert any("post all_reduce: tensor = 3.0" in ln for ln in rec.lines(0))
    assert any("current device" in ln for ln in rec.lines(1))
    assert not rec.of(ev.ReplicaVerdict)  # replica_check: false


@pytest.mark.timeout(120)
def test_multinode_env_without_launcher(shared_run):
    code, rec, session = shared_run("multinode-env", ["steps=5"])
    assert code == EXIT_OK
    started = rec.of(ev.ProcessStarted)
    assert [p.name for p in started] == ["rank0", "rank1"] and [p.ranks for p in started] == [(0,), (1,)]
    envs = [p.env for p in session.plan.procs]
    assert [e["RANK"] for e in envs] == ["0", "1"] and {e["WORLD_SIZE"] for e in envs} == {"2"}
    assert [e["NODE_RANK"] for e in envs] == ["0", "1"] and {e["LOCAL_RANK"] for e in envs} == {"0"}
    assert rec.one(ev.ReplicaVerdict).status == "identical"
    _assert_record(session, 2)


@pytest.mark.timeout(150)
def test_hang_is_detected_with_stacks_and_culprit(runs_dir):
    code, rec, session = run_profile("hang", runs_dir)
    assert code == EXIT_STALLED
    stall = rec.one(ev.StallDetected)
    assert set(stall.stalled) == {0, 1}
    assert stall.wall - stall.since <= 4 + 2, "detected within stall_after + 2 s"
    assert stall.threshold == 4 and re.fullmatch(r"no step or output for \d+ s \(stall_after 4 s\)", stall.reason)
    stacks = rec.of(ev.StacksCollected)[0]
    assert set(stacks.threads) == {0, 1}
    verdict = rec.of(ev.HangVerdict)[0]
    assert verdict.culprits == (1,) and verdict.waiting == (0,)
    assert verdict.where[1]["category"] == "sleep" and verdict.where[0]["category"] == "collective"
    assert "rank 1" in verdict.text and "step 10" in verdict.text
    files = sorted(p.name for p in (session.run_dir / "stacks").glob("*/*"))
    assert {"rank0.txt", "rank1.txt", "stacks.json", "verdict.txt"} <= set(files)
    summary = json.loads((session.run_dir / "summary.json").read_text())
    assert summary["status"] == "stalled" and summary["hang"]["culprits"] == [1]
    # ddptui's own teardown ended both ranks: neither "failed (SIGTERM)" nor "stopped by the launcher"
    assert {r: (i["status"], i["outcome"]) for r, i in summary["ranks"].items()} == {
        str(r): ("killed", "stopped by ddptui after the stall") for r in (0, 1)}


@pytest.mark.timeout(120)
def test_crash_root_cause_and_victims(runs_dir):
    code, rec, session = run_profile("crash", runs_dir)
    assert code == EXIT_FAILED
    crash = rec.one(ev.CrashVerdict)
    assert crash.root_rank == 1
    assert "injected crash on rank 1 at step 8" in crash.text
    assert any("injected crash" in ln for ln in crash.excerpt)
    states = {e.rank: e.status for e in rec.of(ev.RankState) if e.status in ("failed", "killed")}
    assert states[1] == "failed" and 0 in states  # rank 0 failed after it or was torn down
    assert 0 in crash.victims or states[0] == "killed"


@pytest.mark.timeout(120)
def test_diverge_names_parameter_and_rank(runs_dir):
    code, rec, session = run_profile("diverge", runs_dir)
    assert code == EXIT_REPLICAS
    rep = rec.one(ev.ReplicaVerdict)
    assert rep.status == "differ" and rep.ranks == (1,)
    assert rep.param == rep.params[0]  # the fault perturbs the first parameter only
    assert rep.table[0][1:] == rep.table[1][1:]  # every other parameter still identical
    summary = json.loads((session.run_dir / "summary.json").read_text())
    assert summary["status"] == "replicas differ" and summary["replica"]["param"] == rep.param
    # ddp_mlp's own check then exits 3 by design: its own status and words, no crash ("failed first")
    assert summary["crash"] is None and "failed first" not in json.dumps(summary)
    own = summary["own_exit"]
    assert "exited with status 3, the program's own" in own["text"], own
    assert "last words: 'replicas differ: weight checksums [" in own["text"], own


@pytest.mark.timeout(150)
def test_slow_rank_is_not_a_hang(runs_dir):
    code, rec, session = run_profile("slow", runs_dir)
    assert code == EXIT_OK
    assert not rec.of(ev.StallDetected)
    steps = [e.step for e in rec.of(ev.Progress) if e.rank == 1 and e.step]
    assert max(steps) == 40 and rec.one(ev.ReplicaVerdict).status == "identical"
    # Step times by the ranks' own clocks: rank 1's 0.5 s steps are ~100x its first steps' few ms, and in
    # lock-step rank 0 slows too; the stacks single out rank 1, the one not waiting in the all-reduce.
    slow = [e for e in rec.of(ev.RankState) if e.status == "slow"]
    assert [e.rank for e in slow] == [1] and slow[0].detail.startswith("steps take 0.5"), slow
    assert any(ln.startswith("ddptui: rank 1's steps take 0.5") for ln in rec.lines(None))
    assert session.slow_info["ranks"] == [1]
    for v in rec.of(ev.HangVerdict):
        assert v.text.startswith("the run slowed down (rank 1's steps take 0.5") and v.culprits == (1,), v.text
        assert v.reason == "slow" and "stuck" not in v.text and "lost peer" not in v.text, v.text
        assert re.search(r"\): rank 1 is in at_step\(\) at _faults\.py:\d+ \(calls time\.sleep\); rank 0 waits for it "
                         r"in ", v.text), v.text
    # summary.json: the slow-down under "slow", no hang; the console labels it slow, never stall
    summary = json.loads((session.run_dir / "summary.json").read_text())
    assert summary["hang"] is None and summary["slow"]["verdict"]["text"] == rec.of(ev.HangVerdict)[-1].text
    out = io.StringIO()
    Console(out, color=False).handle(rec.events)
    said = out.getvalue()
    assert "[slow] the run slowed down (rank 1's" in said and "\nslow: the run slowed down (rank 1's" in said
    assert "[stall]" not in said and "\nstall:" not in said
    # issue 23 items 8, 9: the slow-down's fix from its own evidence, and the finished dashboard still says it all
    fix = summary["slow"]["verdict"]["fix"]
    assert re.fullmatch(r"rank 1 is in at_step\(\) at _faults\.py:\d+ \(calls time\.sleep\) and every rank waits "
                        r"for it at the next collective: remove that sleep or shorten it", fix), fix
    assert f"\n    fix: {fix}\n" in said and f"\n  fix: {fix}\n" in said
    import asyncio
    from tests.support.replay import replayed_views
    views = asyncio.run(replayed_views(session.run_dir))
    assert "✓ run ok (exit code 0) · SLOW: the run slowed down (rank 1's" in views["banner"], views["banner"]
    assert "⚠ slow-down: the run slowed down (rank 1's" in views["verdict"] and f"fix: {fix}" in views["verdict"]
    assert re.search(r"✓ exited ok · ⚠ was slow \(steps take 0\.5", views["rows"]), views["rows"]
    assert f"fix: {fix}" in views["hints"]


@pytest.mark.timeout(60)
def test_exit_time_abort_after_completed_work_is_called_what_it_is(runs_dir, tmp_path):
    from ddptui.runners.launch.profile.load import adhoc_profile
    from ddptui.runners.session import Session
    from tests.support.engine import Recorder
    script = tmp_path / "abort_at_exit.py"
    script.write_text("import os, ddptui_report\nprint('step 1 loss 0.5')\n"
                      "ddptui_report.verdict(True, 'work done')\nos.abort()\n")
    import sys
    rec = Recorder()
    code = Session(adhoc_profile([sys.executable, str(script)], ["nnodes=2"]), runs_dir, emit=rec).run()
    assert code == EXIT_OK
    outcomes = {e.rank: e.detail for e in rec.of(ev.RankState) if e.status == "exited"}
    assert outcomes == {0: "completed, then died at exit (SIGABRT)", 1: "completed, then died at exit (SIGABRT)"}
    assert "exit-abort-no-barrier" in {h.code for h in rec.of(ev.HintRaised)}
    assert not rec.of(ev.CrashVerdict)


def run_until_verdict(runs_dir, overrides):
    """The hang profile in a thread until its HangVerdict (start-up on this loaded machine can take 20 s):
    then whether every rank still lives and the run still goes on, then a stop."""
    import threading

    import psutil

    from ddptui.runners.launch.profile.load import load_profile
    from ddptui.runners.session import Session
    from tests.support.engine import PROFILES, Recorder
    rec, codes = Recorder(), []
    session = Session(load_profile(PROFILES / "hang.yaml", overrides + ["timeout=200"]), runs_dir, emit=rec)
    th = threading.Thread(target=lambda: codes.append(session.run()))
    th.start()
    try:
        wait_until(lambda: rec.of(ev.HangVerdict) or not th.is_alive(), 180, "a hang verdict (or the run's end)")
        kept = th.is_alive() and all(t.pid and psutil.pid_exists(t.pid) for t in session.tracks.values())
    finally:
        session.request_stop()
        th.join(60)
    return codes[0], rec, session, kept


@pytest.mark.timeout(240)
def test_on_stall_dump_collects_and_keeps_running(runs_dir):
    code, rec, session, kept = run_until_verdict(runs_dir, ["on_stall=dump", "stall_after=3"])
    assert kept  # after the stall, its stacks and verdict, every rank still ran
    assert len(rec.of(ev.StacksCollected)) == 1 and rec.of(ev.HangVerdict)[0].culprits == (1,)
    assert code == EXIT_FAILED and json.loads((session.run_dir / "summary.json").read_text())["status"] == "stopped"


@pytest.mark.timeout(240)
def test_on_stall_wait_gives_a_verdict_without_touching_ranks(runs_dir):
    code, rec, session, kept = run_until_verdict(runs_dir, ["on_stall=wait", "stall_after=3"])
    assert kept and code == EXIT_FAILED and not rec.of(ev.StacksCollected)
    verdict = rec.one(ev.HangVerdict)
    assert "made no progress since" in verdict.text
    if verdict.collective:  # the ranks' live Flight Recorder reports came in before the stall: rank 1 never entered
        assert verdict.collective["kind"] == "missing" and verdict.culprits == (1,) and verdict.waiting == (0,), verdict
    else:
        assert set(verdict.waiting) == {0, 1}, verdict


@pytest.mark.timeout(120)
@pytest.mark.parametrize("flight_recorder, method", [(True, "torch debug server"), (False, "faulthandler")])
def test_hang_stacks_fall_back_when_pyspy_fails(runs_dir, flight_recorder, method):
    # without py-spy: torch's debug server in the rank answers (issue 14), and without it SIGUSR1's faulthandler
    code, rec, session = run_profile("hang", runs_dir, pyspy="/nonexistent/py-spy",
                                     overrides=[f"flight_recorder={str(flight_recorder).lower()}"])
    assert code == EXIT_STALLED
    stacks = rec.of(ev.StacksCollected)[0]
    assert set(stacks.method.values()) == {method}, stacks.method
    verdict = rec.of(ev.HangVerdict)[0]
    assert verdict.culprits == (1,) and verdict.where[1]["category"] == "sleep", verdict.text
    assert method in (session.run_dir / "stacks" / "01-stall" / "rank1.txt").read_text()


BATCHED = """
import sys, time, ddptui_report
for s in range(1, 1008):  # far faster than one report line per step
    ddptui_report.loss(s, 1.0 / s)
# quiet: the report thread must write step 1007 meanwhile, not the next call; wait until our own output has it
deadline, seen = time.monotonic() + 30, False
while not seen and time.monotonic() < deadline:
    time.sleep(0.02)
    with open("/proc/self/fd/1") as own:
        seen = "[1007," in own.read()
print("woke", seen, flush=True)
sys.stdout.write("half a line")  # print() under -u is two writes; a report landing between them glues on
sys.stdout.flush()
ddptui_report.verdict(True, "done")
sys.stdout.write("\\n")
"""


@pytest.mark.timeout(60)
def test_batched_progress_arrives_whole_and_on_time(runs_dir, tmp_path):
    from ddptui.runners.launch.profile.load import adhoc_profile
    from ddptui.runners.session import Session
    from tests.support.engine import Recorder
    import sys
    script = tmp_path / "batched.py"
    script.write_text(BATCHED)
    rec = Recorder()
    session = Session(adhoc_profile([sys.executable, str(script)], ["nnodes=2"]), runs_dir, emit=rec)
    assert session.run() == EXIT_OK
    raw = (session.run_dir / "raw" / "rank0.out").read_text()
    assert raw.count("@ddptui") < 20  # a handful of lines for 1007 losses
    for r in (0, 1):
        t = session.tracks[r]
        assert [p[0] for p in t.losses] == list(range(1, 1008)) and t.first_loss == 1.0  # every loss, in order
        assert t.verdict == {"ok": True, "text": "done"}  # the glued report was still read
        lines = rec.lines(r)
        assert "half a line" in lines and not any("@ddptui" in ln for ln in lines)
        assert "woke True" in lines  # step 1007 was written while the rank made no call (by the report thread)
        woke = next(e.wall for e in rec.of(ev.LogLines) if e.rank == r and "woke True" in e.lines)
        reached = min(e.wall for e in rec.of(ev.Progress) if e.rank == r and e.step == 1007)
        assert reached <= woke, woke - reached
