"""A ddptui batch job followed from the login node (tui/slurm_follow.py), without a cluster: the job's state and
reason said while its engine has not started, the follow begun once it started its attempt (a requeue's earlier ends
do not end it), and an engine on another host stopped through Slurm and its dump refused in words."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from ddptui.runners import events as ev
from ddptui.runners.edge.record import event_line
from ddptui.runners.evidence.slurm_state import JobInfo
from ddptui.tui import follow, slurm_follow

pytestmark = pytest.mark.any_python


def _append(run: Path, *events: ev.Event) -> None:
    with open(run / "events.jsonl", "a") as f:
        for e in events:
            f.write(json.dumps(e.to_json()) + "\n")


class FakeWatch:
    """squeue's answers, one per poll (the last one repeated; None: Slurm did not answer); the test's hook runs at
    each poll."""

    def __init__(self, answers: list[JobInfo | None], at_poll=None) -> None:
        self.answers, self.at_poll, self.polls = answers, at_poll, 0
        self.last: JobInfo | None = None
        self.error = ""
        self.cancelled = 0
        self.unanswered = False

    def poll(self) -> JobInfo | None:
        self.polls += 1
        if self.at_poll is not None:
            self.at_poll(self.polls)
        info = self.answers[min(self.polls, len(self.answers)) - 1]
        self.unanswered = info is None
        if info is not None:
            self.last = info
        return info

    def cancel(self) -> str:
        self.cancelled += 1
        return "job 7"


@pytest.mark.timeout(20)
def test_a_pending_job_is_said_then_followed_once_its_engine_started_its_attempt(tmp_path, monkeypatch, capsys):
    run = tmp_path / "run"
    run.mkdir()
    wall = time.time()
    _append(run, ev.AttemptStarted(0, "", wall), ev.RunFinished("failed", 1, str(run), wall + 1, {}))  # attempt 0
    monkeypatch.setattr(slurm_follow, "POLL", 0.01)

    def engine_starts(poll: int) -> None:
        if poll == 3:  # requeued: the batch script's engine starts attempt 1
            _append(run, ev.AttemptStarted(1, "Slurm requeued job 7", wall + 5))

    pending = JobInfo("7", "PENDING", "BeginTime", "")
    watch = FakeWatch([pending, pending, JobInfo("7", "RUNNING", "", "node[0-1]")], engine_starts)
    seen = slurm_follow._wait_for_engine("7", run, watch, [], stops=True)  # type: ignore[arg-type]
    out = capsys.readouterr().out
    assert out.count("ddptui: job 7 is PENDING (BeginTime); waiting for its engine to start") == 1, out
    assert "job 7 is RUNNING; waiting for its engine to start" in out
    assert isinstance(seen, slurm_follow.AttemptsSeen) and (seen.started, seen.finished) == (2, 1)
    # the follow goes past attempt 0's end, to attempt 1's, reading on from where the wait read to: each event of the
    # record decoded once
    decoded: list = []
    monkeypatch.setattr(follow, "event_line", lambda line: decoded.append(line) or event_line(line))
    monkeypatch.setattr(slurm_follow, "event_line", follow.event_line, raising=False)
    source = slurm_follow.JobFollowSource("7", run, seen.finished, watch, seen)  # type: ignore[arg-type]
    got: list = []
    source.prepare(got.extend)
    _append(run, ev.RunFinished("ok", 0, str(run), wall + 9, {}))
    assert source.run() == 0
    assert [e.status for e in got if isinstance(e, ev.RunFinished)] == ["failed", "ok"]
    assert [e.attempt for e in got if isinstance(e, ev.AttemptStarted)] == [0, 1]
    assert len(decoded) == 1  # the wait read the first three: only the last is read by the follow
    # a viewer asked to leave while the job is pending leaves; a submitter's Ctrl-C cancels a job not yet started
    watch = FakeWatch([pending])
    assert slurm_follow._wait_for_engine("8", tmp_path / "none", watch, ["SIGINT"], stops=False) is None
    assert watch.cancelled == 0 and "job 8 goes on judging itself" in capsys.readouterr().out
    gone = JobInfo("9", "CANCELLED", "", "")
    watch = FakeWatch([pending, gone, JobInfo("9", "PENDING", "BeginTime", ""), gone])  # requeued: not ended yet
    assert slurm_follow._wait_for_engine("9", tmp_path / "none", watch, ["SIGINT"], stops=True) == 1
    assert watch.cancelled == 1 and watch.polls == 4 + slurm_follow.ENDED_POLLS - 1
    out = capsys.readouterr()
    assert "SIGINT: job 9's engine has not started: cancelling the job" in out.out
    assert "job 9 ended (CANCELLED) and its engine left no record" in out.err


@pytest.mark.timeout(20)
def test_slurm_not_answering_for_a_while_is_not_the_job_s_end(tmp_path, monkeypatch):
    """On a loaded login node squeue and scontrol may time out for seconds in a row: the requeued job is still
    waited for, and followed once its engine starts (before, five unanswered polls read as the job's end)."""
    run = tmp_path / "run"
    run.mkdir()
    wall = time.time()
    _append(run, ev.AttemptStarted(0, "", wall), ev.RunFinished("failed", 1, str(run), wall + 1, {}))
    monkeypatch.setattr(slurm_follow, "POLL", 0.01)
    silent = 3 * slurm_follow.ENDED_POLLS

    def engine_starts(poll: int) -> None:
        if poll == silent + 2:
            _append(run, ev.AttemptStarted(1, "Slurm requeued job 7", wall + 5))

    answers: list[JobInfo | None] = [JobInfo("7", "PENDING", "BeginTime", ""), *[None] * silent,
                                     JobInfo("7", "RUNNING", "", "n1")]
    seen = slurm_follow._wait_for_engine("7", run, FakeWatch(answers, engine_starts), [], stops=True)  # type: ignore[arg-type]
    assert isinstance(seen, slurm_follow.AttemptsSeen) and (seen.started, seen.finished) == (2, 1)


@pytest.mark.timeout(20)
def test_an_engine_on_another_host_is_stopped_through_slurm_and_its_dump_refused_in_words(tmp_path, monkeypatch):
    run = tmp_path / "run"
    run.mkdir()
    (run / "events.jsonl").write_text("")
    (run / "engine.json").write_text(json.dumps({"pid": 4242, "host": "node17", "run_dir": str(run.resolve()),
                                                 "socket": str(run / "control.sock")}))
    signalled: list = []
    monkeypatch.setattr(slurm_follow.slurm_job, "signal_engine", lambda job, sig: signalled.append((job, sig)))
    watch = FakeWatch([JobInfo("7", "RUNNING", "", "node17")])
    source = slurm_follow.JobFollowSource("7", run, 0, watch)  # type: ignore[arg-type]
    shown: list = []
    source.prepare(shown.extend)
    said = source.stop_run()
    assert signalled == [("7", "TERM")] and "asked Slurm to signal job 7's engine (scancel --signal=TERM --batch)" \
        in said, said
    assert source.request_dump() is False
    (line,) = [t for e in shown for t in e.lines]
    assert "job 7's engine runs on node17" in line and "stacks cannot be asked from this host" in line
    assert source.alive()  # the job runs: a lock taken on another host is not what says so
    watch.answers = [JobInfo("7", "FAILED", "", "node17")]
    assert not source.alive()
