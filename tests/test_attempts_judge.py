"""torchrun's restarts as attempts, decided by the judge on a fake clock: a failure with restarts left ends the attempt
(its own verdict), not the run; the next attempt's first hello begins it with fresh tracks; a hang with restarts left
ends the attempt's ranks for torchrun to restart them. The profile field and the wrapped command's flag."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from ddptui.runners import events as ev
from ddptui.runners.edge.record import RunRecord
from ddptui.runners.evidence.hints import HintMatcher
from ddptui.runners.evidence.launcher_log import TorchrunLog
from ddptui.runners.judge.judge import (
    CRASH_GRACE,
    EXIT_FAILED,
    EXIT_OK,
    CollectStacks,
    EndAttempt,
    Judge,
    Launcher,
    TearDown,
)
from ddptui.runners.judge.runner_traits import RunnerTraits
from ddptui.runners.launch.profile.errors import ProfileError
from ddptui.runners.launch.profile.load import load_profile
from ddptui.runners.launch.registry import traits_of
from ddptui.runners.launch.torchrun import plan
from ddptui.runners.launch.torchrun_argv import max_restarts, script_start
from tests.support.judge import PIDS, ROOT, T0, W0, at, of, say, texts

pytestmark = pytest.mark.any_python


def judge(restarts: int, *over: str) -> tuple[Judge, list]:
    profile = load_profile(ROOT / "profiles" / "cpu-ddp.yaml", ["nproc=2", *over])
    j = Judge(profile, T0, W0, runner=RunnerTraits(max_restarts=restarts))
    return j, j.begin(2, 1)


def hello(j: Judge, rank: int, dt: float, attempt: int, pid: int) -> list:
    return say(j, rank, dt, "@ddptui " + json.dumps({"k": "hello", "r": rank, "pid": pid, "host": "localhost",
                                                     "world": 2, "attempt": attempt}))


def crash_attempt(j: Judge, t: float, pids: dict[int, int], attempt: int) -> None:
    """Both ranks of `attempt` say hello and step; rank 1 raises and dies, torchrun stops rank 0 (SIGTERM)."""
    for r in (0, 1):
        hello(j, r, t, attempt, pids[r])
        say(j, r, t + 1, "step 3 loss 0.52")
    say(j, 1, t + 2, "Traceback (most recent call last):", '  File "train.py", line 9, in <module>',
        "RuntimeError: bad batch", stream="err")
    at(j, t + 2.1)
    j.deaths([(pids[1], W0 + t + 2.0, 1)], own=set())
    at(j, t + 2.6)
    j.deaths([(pids[0], W0 + t + 2.5, -15)], own=set())


def test_a_crash_with_restarts_left_ends_the_attempt_and_the_next_hello_begins_the_next():
    j, begun = judge(2)
    assert of(begun, ev.AttemptStarted) == [ev.AttemptStarted(0, "", W0)]
    crash_attempt(j, 1.0, PIDS, 0)
    at(j, 3.1 + CRASH_GRACE + 20)  # past the crash grace and the agents' grace: torchrun restarts, nobody tears down
    assert of(j.check(), TearDown) == [] and of(j.watchdog([]), TearDown) == []
    out = hello(j, 0, 30.0, 1, 900)
    ended, started = of(out, ev.AttemptEnded), of(out, ev.AttemptStarted)
    assert [(e.attempt, e.status) for e in ended] == [(0, "failed")]
    assert ended[0].verdict.startswith("rank 1 failed first: exit 1 at step 3") and "bad batch" in ended[0].verdict
    assert ended[0].wall == W0 + 3.5  # when its last rank died, not when the next attempt said hello
    assert started == [ev.AttemptStarted(1, "torchrun restarted every rank (1 of 2 restart(s) left)", W0 + 30.0)]
    assert out.index(ended[0]) < out.index(started[0]) < out.index(of(out, ev.RankHello)[0])
    assert j.crash is None and j.tracks[0].pid == 900 and j.tracks[1].pid is None
    assert j.tracks[1].status == ev.RankStatus.STARTING and j.tracks[0].step is None
    hello(j, 1, 30.5, 1, 901)
    for r in (0, 1):
        say(j, r, 31.0, "step 30 loss 0.10")
    at(j, 32.0)
    j.deaths([(900, W0 + 31.9, 0), (901, W0 + 31.9, 0)], own=set())
    j.settle()
    out, status, code = j.conclude(None, None, [Launcher("torchrun", 0)])
    assert (status, code) == ("ok", EXIT_OK) and j.crash is None
    assert [(e.attempt, e.status, e.verdict) for e in of(out, ev.AttemptEnded)] == [(1, "ok", "")]
    summary = j.summary(status, code, "RUN", 32.0, 0.1, [], [])
    assert [(a["attempt"], a["status"], a["began"], a["ended"]) for a in summary["attempts"]] == [
        (0, "failed", W0, W0 + 3.5), (1, "ok", W0 + 30.0, W0 + 32.0)]
    assert summary["attempts"][0]["crash"]["root_rank"] == 1 and summary["restarts"] == 1
    assert summary["ranks"][0]["pid"] == 900 and summary["crash"] is None


def test_without_restarts_nothing_is_said_of_attempts_and_a_crash_is_torn_down_as_before():
    j, begun = judge(0)
    assert of(begun, ev.AttemptStarted) == []
    crash_attempt(j, 1.0, PIDS, 0)
    hello(j, 0, 3.0, 1, 900)  # a hello naming an attempt this run cannot have changes nothing but its pid
    assert j.state.attempt == 0
    assert "attempts" not in j.summary("failed", EXIT_FAILED, "RUN", 3.0, 0.1, [], [])


def test_the_last_attempt_is_the_runs_end_once_no_restart_is_left():
    j, _ = judge(1)
    crash_attempt(j, 1.0, PIDS, 0)
    hello(j, 0, 10.0, 1, 900)
    hello(j, 1, 10.0, 1, 901)
    say(j, 0, 11.0, "step 3 loss 0.52")
    say(j, 1, 11.5, "RuntimeError: again", stream="err")
    at(j, 12.0)
    j.deaths([(901, W0 + 11.9, 1)], own=set())
    say(j, 1, 12.0, '@ddptui {"k": "exc", "r": 1, "type": "RuntimeError", "msg": "again"}')
    at(j, 12.0 + CRASH_GRACE + 0.5)
    assert of(j.check(), TearDown) == [TearDown("failed", EXIT_FAILED)]  # rank 0 still runs: no restart will stop it


def test_a_hang_with_restarts_left_ends_the_attempts_ranks_for_torchrun_to_restart_them():
    j, _ = judge(1, "stall_after=5", "on_stall=stop")
    for r in (0, 1):
        hello(j, r, 0.5, 0, PIDS[r])
        say(j, r, 1.0, "step 1 loss 0.5")
        say(j, r, 1.2, "step 2 loss 0.4")
    at(j, 8.0)
    req = of(j.check(), CollectStacks)
    assert req and req[0].why == "stall"
    out = j.stacks_collected(req[0], None, "RUN/stacks/01-attempt0-stall")
    assert of(out, EndAttempt) == [EndAttempt(0, (PIDS[0], PIDS[1]))] and of(out, TearDown) == []
    assert any("ending attempt 0's ranks so that torchrun restarts them" in t for t in texts(out))
    at(j, 60.0)
    assert j.check() == []  # the ranks go: no stall, no crash grace, while torchrun restarts them
    at(j, 61.0)
    j.deaths([(PIDS[0], W0 + 60.5, -15), (PIDS[1], W0 + 60.5, -15)], own=set())
    out = hello(j, 0, 62.0, 1, 900)
    ended = of(out, ev.AttemptEnded)[0]
    assert (ended.attempt, ended.status, ended.stacks) == (0, "stalled", "RUN/stacks/01-attempt0-stall")
    assert ended.verdict.endswith("ddptui ended its ranks for torchrun to restart them (on_stall: stop)")
    assert j.state.stall_info is None and not j.state.ending_attempt
    at(j, 90.0)  # the next attempt has no restart left: a stall there stops the run as before
    hello(j, 1, 62.0, 1, 901)
    for r in (0, 1):
        say(j, r, 63.0, "step 1 loss 0.5")
        say(j, r, 63.2, "step 2 loss 0.4")
    at(j, 70.0)
    req = of(j.check(), CollectStacks)
    out = j.stacks_collected(req[0], None, "RUN/stacks/02-attempt1-stall")
    assert of(out, TearDown) == [TearDown("stalled", 3)] and of(out, EndAttempt) == []


def test_torchruns_restart_line_is_read_and_names_the_groups_state():
    log = TorchrunLog()
    log.now = W0
    log.feed("I1205 05:10:36.083000 17515 torch/distributed/elastic/agent/server/api.py:942] [default] Worker group "
             "FAILED. 3/3 attempts left; will restart worker group", False)
    assert log.restart is not None and (log.restart.state, log.restart.left, log.restart.most) == ("FAILED", 3, 3)
    j, _ = judge(3)
    say(j, None, 1.0, "I1205 05:10:36.083000 17515 torch/distributed/elastic/agent/server/api.py:942] [default] "
        "Worker group FAILED. 3/3 attempts left; will restart worker group")
    out = hello(j, 0, 2.0, 1, 900)
    assert of(out, ev.AttemptStarted)[0].why == \
        "torchrun restarted every rank after its worker group failed (2 of 3 restart(s) left)"


# ---- the profile field and the wrapped command ------------------------------------------------------------------
def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "p.yaml"
    p.write_text(text)
    return p


def test_max_restarts_is_validated_at_its_line_and_only_for_torchrun(tmp_path):
    base = "name: r\nworkload:\n  script: train.py\n"
    (tmp_path / "train.py").write_text("")
    with pytest.raises(ProfileError, match=r"p.yaml:4:15: field 'max_restarts': expected an integer >= 0, got -1"):
        load_profile(write(tmp_path, base + "max_restarts: -1\n"))
    with pytest.raises(ProfileError, match=r"p.yaml:5:15: field 'max_restarts': max_restarts is torchrun's"):
        load_profile(write(tmp_path, base + "runner: env\nmax_restarts: 2\n"))
    with pytest.raises(ProfileError, match=r":5:15: field 'max_restarts': torchrun's static rendezvous keeps its "
                                           r"store across restarts.*use rdzv_backend: c10d"):
        load_profile(write(tmp_path, base + "nnodes: 2\nmax_restarts: 2\n"))
    p = load_profile(write(tmp_path, base + "max_restarts: 2\n"))
    assert p.max_restarts == 2 and traits_of(p).max_restarts == 2
    argv = plan(p, tmp_path / "run", 29500).procs[0].argv
    assert argv[argv.index("--max-restarts") + 1] == "2"
    assert "--max-restarts" not in plan(load_profile(write(tmp_path, base)), tmp_path / "run", 29500).procs[0].argv


def test_the_wrapped_torchruns_own_max_restarts_is_read_before_its_script():
    argv = ["torchrun", "--standalone", "--nproc-per-node=2", "--max-restarts", "3", "train.py", "--max-restarts", "9"]
    assert script_start(argv) == 5 and max_restarts(argv) == 3
    assert max_restarts(["python", "-m", "torch.distributed.run", "--max_restarts=1", "t.py"]) == 1
    assert max_restarts(["torchrun", "t.py", "--max-restarts", "4"]) == 0


def test_a_restarted_attempt_refused_in_connectfullmesh_raises_the_stale_store_hint():
    j, _ = judge(1)
    j.matcher = HintMatcher()
    crash_attempt(j, 1.0, PIDS, 0)
    assert not [h for h in j.hints if h["code"] == "restart-stale-store"]  # attempt 0's crash is no restart's
    for r in (0, 1):
        hello(j, r, 10.0, 1, 900 + r)
    say(j, 0, 12.0, "RuntimeError: Gloo connectFullMesh failed with [pair.cc:152] timed out connecting: SO_ERROR: "
        "Connection refused, remote=[127.0.0.1]:4483$0", stream="err")
    at(j, 12.5)
    j.deaths([(900, W0 + 12.4, 1)], own=set())
    at(j, 13.0)
    j.deaths([(901, W0 + 12.9, -15)], own=set())
    j.settle()
    j.conclude(None, None, [Launcher("torchrun", 1)])
    (hint,) = [h for h in j.hints if h["code"] == "restart-stale-store"]
    assert hint["rank"] == 0 and "PrefixStore" in hint["fix"]


def test_the_stacks_folder_names_its_attempt_once(tmp_path):
    """stacks/NN-attemptK-why/: the attempt tag is made in one place (the record, from the judge's attempt), also when
    a requeued Slurm job's engine runs torchrun with restarts (it was `attemptK-` twice: the record's and the loop's)."""
    record = RunRecord(tmp_path)
    plain, _ = judge(0)
    restarts, _ = judge(2)
    both, _ = judge(2)
    both.requeued(1, "12", [])
    named = [record.stacks(n, j.attempts.stacks_attempt, "stall", {0: "stack"}, {}, {}).name
             for n, j in enumerate((plain, restarts, both), 1)]
    assert named == ["01-stall", "02-attempt0-stall", "03-attempt1-stall"]
    assert (tmp_path / "stacks" / "03-attempt1-stall" / "rank0.txt").read_text() == "stack"
    record.close()
