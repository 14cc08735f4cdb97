"""`ddptui attach` end to end: real torchrun jobs started outside ddptui (plain rank scripts, output to files), attached
through the real CLI; the job runs on afterwards unless the test stops it (every test stops its own job)."""
from __future__ import annotations

import glob
import json
import re
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ddptui.runners.attach.find import find_job
from tests.support.cli import RAISED
from tests.support.outside_jobs import job_with_ranks, stop, torchrun
from tests.support.wait import exited, wait_until

pytestmark = [
    pytest.mark.main_suite(
        "long end-to-end rank runs (the engine and dashboard under them are in the any_python set); plain "
        "torchrun jobs started outside ddptui on the test's own interpreter"),
]

CLI = [sys.executable, "-m", "ddptui.tui.cli"]
LOGS = ("--log-dir", "logs", "--redirects", "3")  # each rank writes its own stdout.log / stderr.log


def rank_file(tmp_path: Path, rank: int, stream: str = "stdout") -> str | None:
    hits = glob.glob(str(tmp_path / "logs" / "*" / "attempt_0" / str(rank) / f"{stream}.log"))
    return hits[0] if hits else None


def text(path: str | None) -> str:
    try:
        return open(path, errors="replace").read() if path else ""
    except OSError:
        return ""


def attach(tmp_path: Path, pid: int, *opts: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(CLI + ["attach", str(pid), "--runs-dir", str(tmp_path / "runs"), *opts],
                          capture_output=True, text=True, timeout=timeout)


def record(tmp_path: Path) -> Path:
    (run,) = glob.glob(str(tmp_path / "runs" / "*-attach-*"))
    return Path(run)


def steps(path: str | None) -> int:
    return text(path).count(" loss ")


@pytest.mark.timeout(240)
def test_attach_no_ui_to_a_healthy_run_follows_it_and_leaves_it_running(tmp_path):
    job = torchrun(tmp_path, "healthy_ddp_loop.py", *LOGS, out=tmp_path / "agent.log")
    try:
        wait_until(lambda: job_with_ranks(job.pid), 90, "both ranks started", step=0.2, stop_if=exited(job))
        wait_until(lambda: all(steps(rank_file(tmp_path, r)) >= 2 for r in (0, 1)), 90, "training lines", step=0.2,
                   stop_if=exited(job))
        r = attach(tmp_path, job.pid, "--no-ui", "--stall-after", "30")
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
        out = r.stdout
        assert "run attach-" in out and "(attach, 2 ranks)" in out and "2 of 2 ranks found" in out
        assert "[rank 0] step " in out and "[rank 1] step " in out  # its last lines, then what it wrote while attached
        assert "[stall]" not in out and "[crash]" not in out and "status: detached (exit 0)" in out
        run = record(tmp_path)
        summary = json.loads((run / "summary.json").read_text())
        assert (summary["status"], summary["runner"], summary["hang"], summary["crash"]) == ("detached", "attach",
                                                                                             None, None)
        assert {summary["ranks"][str(r)]["pid"] for r in (0, 1)} == {a.pid for a in find_job(job.pid).ranks.values()}
        assert sorted(p.name for p in (run / "stacks").glob("01-on-request/rank*.txt")) == ["rank0.txt", "rank1.txt"]
        assert "healthy_ddp_loop.py" in (run / "stacks" / "01-on-request" / "rank0.txt").read_text()
        # the job runs on: attach signalled nothing
        before = steps(rank_file(tmp_path, 0))
        wait_until(lambda: steps(rank_file(tmp_path, 0)) > before, 60, "the job still trains after attach", step=0.2,
                   stop_if=exited(job))
        # the record replays as a launched run's does
        rep = subprocess.run(CLI + ["replay", str(run), "--no-ui"], capture_output=True, text=True, timeout=60)
        assert rep.returncode == 0, rep.stderr
        assert "[rank 1] step " in rep.stdout and "status: detached (exit 0)" in rep.stdout
    finally:
        stop(job)


@pytest.mark.timeout(240)
def test_attach_no_ui_to_a_hung_run_names_the_culprit_and_its_stack(tmp_path):
    job = torchrun(tmp_path, "hang_ddp.py", *LOGS, out=tmp_path / "agent.log")
    try:
        wait_until(lambda: "hanging at step 3" in text(rank_file(tmp_path, 1)), 120, "rank 1 hangs", step=0.2,
                   stop_if=exited(job))
        files = [rank_file(tmp_path, r) for r in (0, 1)]
        wait_until(lambda: all(time.time() - os.stat(f).st_mtime > 3 for f in files), 60, "both quiet 3 s", step=0.2,
                   stop_if=exited(job))
        r = attach(tmp_path, job.pid, "--no-ui", "--stall-after", "2")
        assert r.returncode == 3, r.stdout[-3000:] + r.stderr[-2000:]
        out = r.stdout
        assert "[stall] stall: ranks 0, 1" in out
        assert "rank 1 is stuck in culprit_wait() at hang_ddp.py:29 (calls time.sleep)" in out
        assert "rank 0 waits in all_reduce" in out and "culprit_wait() at hang_ddp.py:29" in out
        run = record(tmp_path)
        summary = json.loads((run / "summary.json").read_text())
        assert summary["status"] == "stalled" and summary["hang"]["culprits"] == [1]
        assert "culprit_wait" in (run / "stacks" / "01-stall" / "rank1.txt").read_text()
        assert job.poll() is None and all(a.pid for a in find_job(job.pid).ranks.values())  # still there
        rep = subprocess.run(CLI + ["replay", str(run), "--no-ui"], capture_output=True, text=True, timeout=60)
        assert rep.returncode == 0 and "rank 1 is stuck in culprit_wait()" in rep.stdout
    finally:
        stop(job)


@pytest.mark.timeout(240)
def test_attach_watch_a_rank_that_dies_while_attached_is_the_root_cause(tmp_path):
    die = tmp_path / "die-now"
    os.environ["DIE_FILE"] = str(die)  # the job's environment (torchrun() copies os.environ)
    try:
        job = torchrun(tmp_path, "rank_raises_when_file_appears.py", *LOGS, out=tmp_path / "agent.log")
    finally:
        del os.environ["DIE_FILE"]
    out_path = tmp_path / "attach.out"
    watcher = None
    try:
        wait_until(lambda: job_with_ranks(job.pid), 90, "both ranks started", step=0.2, stop_if=exited(job))
        wait_until(lambda: all(steps(rank_file(tmp_path, r)) >= 2 for r in (0, 1)), 90, "training lines", step=0.2,
                   stop_if=exited(job))
        with open(out_path, "w") as f:
            watcher = subprocess.Popen(CLI + ["attach", str(job.pid), "--watch", "--stall-after", "60",
                                              "--runs-dir", str(tmp_path / "runs")], stdout=f, stderr=subprocess.STDOUT)
        wait_until(lambda: "2 of 2 ranks found" in out_path.read_text(), 60, "attached", step=0.2, stop_if=exited(job))
        die.touch()
        assert watcher.wait(timeout=120) == 1, out_path.read_text()[-4000:]
        out = out_path.read_text()
        assert re.search(rf"\[crash\] rank 1 failed first \(({'|'.join(map(re.escape, RAISED))})\): "
                         r"RuntimeError: rank 1 found", out), out
        assert "rank_raises_when_file_appears.py:" in out.split("[crash]")[1].splitlines()[0]
        assert "ddptui: rank 1: exit status " in out and "the traceback in its stderr" in out
        summary = json.loads((record(tmp_path) / "summary.json").read_text())
        assert summary["crash"]["root_rank"] == 1 and summary["status"] == "failed"
        assert job.wait(timeout=60) != 0  # torchrun ended its job itself; ddptui signalled nothing
    finally:
        if watcher is not None and watcher.poll() is None:
            watcher.kill()
            watcher.wait()
        stop(job)


@pytest.mark.timeout(240)
def test_attach_watch_ctrl_c_detaches_and_stop_goes_through_the_launcher(tmp_path):
    job = torchrun(tmp_path, "healthy_ddp_loop.py", *LOGS, out=tmp_path / "agent.log")
    out_path = tmp_path / "attach.out"
    watcher = None
    try:
        found = wait_until(lambda: job_with_ranks(job.pid), 90, "both ranks started", step=0.2, stop_if=exited(job))
        with open(out_path, "w") as f:
            watcher = subprocess.Popen(CLI + ["attach", str(job.pid), "--watch", "--runs-dir", str(tmp_path / "runs")],
                                       stdout=f, stderr=subprocess.STDOUT)
        wait_until(lambda: "2 of 2 ranks found" in out_path.read_text(), 60, "attached", step=0.2, stop_if=exited(job))
        watcher.send_signal(signal.SIGINT)
        assert watcher.wait(timeout=60) == 0, out_path.read_text()[-3000:]
        assert "detaching; the job runs on" in out_path.read_text()
        assert job.poll() is None and find_job(job.pid).ranks.keys() == found.ranks.keys()

        # the dashboard's s (after asking): SIGTERM to torchrun's agent, which ends its ranks itself
        from ddptui.runners.attach.session import AttachSession
        got: list = []
        session = AttachSession(find_job(job.pid), tmp_path / "runs", emit=got.extend, watch=True, stall_after=60)
        t = threading.Thread(target=lambda: got.append(("code", session.run())))
        t.start()
        wait_until(lambda: any(type(e).__name__ == "RankHello" for e in got if not isinstance(e, tuple)), 60,
                   "attached in-process", step=0.2, stop_if=exited(job))
        assert session.stop_job() == f"SIGTERM sent to pid {job.pid}"
        t.join(90)
        assert not t.is_alive() and job.wait(timeout=60) is not None
        lines = [ln for e in got if type(e).__name__ == "LogLines" for ln in e.lines]
        assert "ddptui: every rank of the job has ended" in lines
    finally:
        if watcher is not None and watcher.poll() is None:
            watcher.kill()
            watcher.wait()
        stop(job)


@pytest.mark.timeout(60)
def test_attach_to_a_pid_that_is_no_job_is_one_line_and_exit_2(tmp_path):
    plain = subprocess.Popen(["sleep", "60"])
    try:
        r = attach(tmp_path, plain.pid, "--no-ui")
        assert r.returncode == 2 and r.stdout == ""
        assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("ddptui: "), r.stderr
        r = attach(tmp_path, "nonsense", "--no-ui")  # type: ignore[arg-type]
        assert r.returncode == 2 and r.stderr.strip() == "ddptui: attach: 'nonsense' is not a pid, nor a run record's folder"
        r = attach(tmp_path, "99999999999999999999", "--no-ui")  # type: ignore[arg-type]  # was an OverflowError
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert r.stderr.strip().startswith("ddptui: attach: '99999999999999999999' is not a pid (pids here are 1 to ")
        assert plain.poll() is None  # not signalled
        assert not (tmp_path / "runs").exists()
    finally:
        plain.kill()
        plain.wait()


def _states(job) -> dict:
    """Each rank's State and PPid as /proc says (for a failure's message)."""
    out = {}
    for r, a in job.ranks.items():
        try:
            st = dict(ln.split(":\t", 1) for ln in open(f"/proc/{a.pid}/status").read().splitlines() if ":\t" in ln)
            out[r] = (a.pid, st.get("State"), st.get("PPid"), st.get("TracerPid"), st.get("SigPnd"), st.get("ShdPnd"))
        except OSError:
            out[r] = (a.pid, "gone")
    return out


@pytest.mark.timeout(240)
def test_attach_dashboard_s_asks_n_keeps_the_job_y_stops_it_through_torchrun_q_detaches(tmp_path):
    from ddptui.tui.app import AttachSource, DdpApp
    from ddptui.tui.screens.confirm_stop_job import ConfirmStopJob
    from tests.support.ui import SIZE, aio, until

    job = torchrun(tmp_path, "healthy_ddp_loop.py", *LOGS, out=tmp_path / "agent.log")
    try:
        found = wait_until(lambda: job_with_ranks(job.pid), 90, "both ranks started", step=0.2, stop_if=exited(job))
        wait_until(lambda: all(steps(rank_file(tmp_path, r)) >= 2 for r in (0, 1)), 90, "training lines", step=0.2,
                   stop_if=exited(job))

        @aio
        async def drive():
            app = DdpApp(source=AttachSource(found, tmp_path / "runs", 60.0, 5.0))
            async with app.run_test(size=SIZE) as pilot:
                await until(pilot, lambda: app.model is not None and len(app.model.ranks) == 2 and all(
                    rv.pid for rv in app.model.ranks.values()), 60, "the attached ranks")
                await pilot.press("s")
                await until(pilot, lambda: isinstance(app.screen, ConfirmStopJob), 10, "the question")
                assert f"SIGTERM to torchrun's agent (pid {job.pid})" in app.screen.what
                await pilot.press("n")
                await until(pilot, lambda: not isinstance(app.screen, ConfirmStopJob), 10, "no")
                assert job.poll() is None and app.running
                await pilot.press("s")
                await until(pilot, lambda: isinstance(app.screen, ConfirmStopJob), 10, "the question again")
                await pilot.press("y")
                await until(pilot, lambda: not app.running, 90, "the job to end through torchrun, and attach with it",
                            step=0.2)
                assert not app.running, f"the job ended through torchrun, and attach with it: {_states(found)}"
                # the user's own stop, said as a launched run says it: no crash, no failure
                assert app.model.finished.status == "stopped" and app.model.crash is None, app.model.crash
                assert {rv.status for rv in app.model.ranks.values()} == {"killed"}
                # r: the job is gone; nothing to attach to again (never its dead pids)
                await pilot.press("r")
                await pilot.pause(0.5)
                assert not app.running and app.model.finished.status == "stopped"
                said = [n.message for n in app._notifications if n.message.startswith("cannot attach again: ")]
                # gone, reaped; gone, its launcher not reaped yet by this test; or a launcher left without ranks
                assert said and any(w in said[0] for w in ("no process", "has exited", "has no rank running")), said
                await pilot.press("q")
            app.shutdown(30)
            return app

        app = drive()
        assert job.wait(timeout=60) is not None
        assert app.model.finished is not None and app.model.finished.status == "stopped"
        run = record(tmp_path)  # one record: r attached to nothing
        lines = (run / "launcher.log").read_text()
        assert f"ddptui: stop asked: SIGTERM sent to pid {job.pid}" in lines
        summary = json.loads((run / "summary.json").read_text())
        assert (summary["status"], summary["crash"]) == ("stopped", None)
        assert {summary["ranks"][r]["outcome"] for r in ("0", "1")} == {"stopped by ddptui on request"}
    finally:
        stop(job)


@pytest.mark.timeout(240)
def test_attach_where_ptrace_is_refused_says_so_and_sends_no_signal(tmp_path):
    """Rank 1 is held by another tracer (as under a debugger): the kernel refuses py-spy. A launched run would fall back
    to SIGUSR1 (faulthandler); attach never signals, so the stack file and the verdict say what py-spy was told."""
    job = torchrun(tmp_path, "hang_ddp.py", *LOGS, out=tmp_path / "agent.log")
    holder = None
    try:
        wait_until(lambda: "hanging at step 3" in text(rank_file(tmp_path, 1)), 120, "rank 1 hangs", step=0.2,
                   stop_if=exited(job))
        found = find_job(job.pid)
        holder = subprocess.Popen([sys.executable, str(Path(__file__).parent / "fixtures" / "ptrace_holder.py"),
                                   str(found.ranks[1].pid)], stdout=subprocess.PIPE, text=True)
        assert holder.stdout.readline().strip() == "seized"
        files = [rank_file(tmp_path, r) for r in (0, 1)]
        wait_until(lambda: all(time.time() - os.stat(f).st_mtime > 3 for f in files), 60, "both quiet 3 s", step=0.2,
                   stop_if=exited(job))
        r = attach(tmp_path, job.pid, "--no-ui", "--stall-after", "2")
        assert r.returncode == 3, r.stdout[-3000:] + r.stderr[-2000:]
        run = record(tmp_path)
        stacks = json.loads((run / "stacks" / "01-stall" / "stacks.json").read_text())
        assert stacks["method"]["0"] == "py-spy"
        assert stacks["method"]["1"].startswith("unavailable: ") and "Operation not permitted" in stacks["method"]["1"]
        assert "Operation not permitted" in (run / "stacks" / "01-stall" / "rank1.txt").read_text()
        assert "rank 0 wait in all_reduce inside backward" in r.stdout  # the rank py-spy could read still speaks
        assert "rank 1: no stacks, likely the culprit" in r.stdout
        assert json.loads((run / "summary.json").read_text())["hang"]["culprits"] == [1]
        status = open(f"/proc/{found.ranks[1].pid}/status").read()
        assert "SigPnd:\t0000000000000000" in status and "ShdPnd:\t0000000000000000" in status  # no SIGUSR1 sent
        assert job.poll() is None
    finally:
        if holder is not None:
            holder.kill()
            holder.wait()
        stop(job)


@pytest.mark.timeout(300)
def test_attach_slurm_no_ui_follows_the_jobs_ranks_and_leaves_it_running(slurm_clean, tmp_path):
    cluster = slurm_clean
    logs = tmp_path / "slurm"
    logs.mkdir()
    fixture = Path(__file__).resolve().parent / "fixtures" / "slurm_procid_ddp_loop.py"
    job = cluster.srun_outside("h-attach", fixture, logs)
    try:
        job_id = cluster.wait_for_lines(job, logs)
        r = subprocess.run(CLI + ["attach", "--slurm", job_id, "--no-ui", "--runs-dir", str(tmp_path / "runs")],
                           capture_output=True, text=True, timeout=180,
                           env={**os.environ, "SLURM_CONF": str(cluster.conf_path)})
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
        assert f"attached to slurm job {job_id}" in r.stdout and "2 of 2 ranks found" in r.stdout
        assert "[rank 0] step " in r.stdout and "[rank 1] step " in r.stdout and "[stall]" not in r.stdout
        run = record(tmp_path)
        assert run.name.endswith(f"-attach-{job_id}")
        stacks = json.loads((run / "stacks" / "01-on-request" / "stacks.json").read_text())
        assert stacks["method"] == {"0": "py-spy", "1": "py-spy"}
        assert job.poll() is None and (job_id, "RUNNING") in [tuple(j[:2]) for j in cluster.jobs()]
    finally:
        cluster.end_job(job)


@pytest.mark.timeout(240)
def test_attach_to_ranks_writing_to_dev_null_says_so_in_each_ranks_own_pane_and_log(tmp_path):
    job = torchrun(tmp_path, "healthy_ddp_loop.py")  # `torchrun … > /dev/null 2>&1 &`: nothing to follow
    try:
        found = wait_until(lambda: job_with_ranks(job.pid), 90, "both ranks started", step=0.2, stop_if=exited(job))
        assert {a.stdout.kind for a in found.ranks.values()} != {"file"}
        r = attach(tmp_path, job.pid, "--no-ui", "--stall-after", "30")
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
        run = record(tmp_path)
        for rank in (0, 1):
            own = (run / f"rank{rank}.log").read_text()
            assert "ddptui: stdout" in own and "not followed" in own, own
            assert f"[rank {rank}] ddptui: stdout" in r.stdout
    finally:
        stop(job)


@pytest.mark.parametrize("text, pid", [("4242", 4242), (" 7 ", 7), ("32767", 32767)])
def test_a_pid_is_decimal_digits_below_pid_max(text, pid):
    from ddptui.tui.attach_cli import parse_pid
    assert parse_pid(text, pid_max=32768) == pid


@pytest.mark.parametrize("text, words", [
    ("0", "is not a pid (pids here are 1 to 32767)"), ("32768", "(pids here are 1 to 32767)"),
    ("9" * 400, "(pids here are 1 to 32767)"), ("-5", "'-5' is not a pid"), ("1_000", "'1_000' is not a pid"),
    ("\u0661\u0662", "is not a pid"), ("0x10", "'0x10' is not a pid"), ("", "'' is not a pid")])
def test_what_is_no_pid_is_one_line(text, words):
    from ddptui.tui.attach_cli import parse_pid
    with pytest.raises(ValueError) as info:
        parse_pid(text, pid_max=32768)
    assert words in str(info.value) and str(info.value).startswith("attach: ")
