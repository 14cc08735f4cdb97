"""ddptui attach, finding the job: real jobs started outside ddptui as a user would (torchrun in the background, a
script calling torch.multiprocessing.spawn), found from any of their processes, with where each rank writes."""
from __future__ import annotations

import glob
import os
import random
import re
import shutil
import subprocess
import sys

import psutil
import pytest

from ddptui.runners.attach import output as attach_output
from ddptui.runners.attach.find import NotAJob, find_job
from ddptui.runners.edge.tail import Tailer
from tests.support.outside_jobs import FIXTURES, TORCHRUN, job_env, job_with_ranks, stop, torchrun
from tests.support.wait import exited, wait_until

pytestmark = pytest.mark.main_suite(
    "plain torchrun and torch.multiprocessing.spawn jobs started outside ddptui on the test's own interpreter")

STEP = re.compile(r"step (\d+) loss")


def lines_in(path: str) -> int:
    try:
        return sum(1 for ln in open(path, errors="replace") if STEP.search(ln))
    except OSError:
        return 0


@pytest.mark.timeout(150)
def test_torchrun_with_shell_redirect_found_from_agent_and_rank_then_followed(tmp_path):
    out = tmp_path / "train.log"
    job = torchrun(tmp_path, "healthy_ddp_loop.py", out=out)
    try:
        by_agent = wait_until(lambda: job_with_ranks(job.pid), 90, "both ranks started", step=0.2, stop_if=exited(job))
        assert (by_agent.kind, by_agent.launcher_pid, by_agent.world_size) == ("torchrun", job.pid, 2)
        assert by_agent.launcher_argv[1] == TORCHRUN and by_agent.unreadable == ()
        assert sorted(by_agent.ranks) == [0, 1]
        agent_kids = {c.pid for c in psutil.Process(job.pid).children()}
        for r, ar in by_agent.ranks.items():
            assert ar.pid in agent_kids and (ar.rank, ar.local_rank, ar.world_size) == (r, r, 2)
            assert ar.stdout == attach_output.RankOutput("file", str(out), "")  # the agent's fd, inherited
            assert ar.stderr == ar.stdout and ar.node == ar.host
        by_rank = find_job(by_agent.ranks[1].pid)
        assert (by_rank.kind, by_rank.launcher_pid) == ("torchrun", job.pid)
        assert {r: a.pid for r, a in by_rank.ranks.items()} == {r: a.pid for r, a in by_agent.ranks.items()}
        assert by_rank.asked == str(by_agent.ranks[1].pid)

        # the last lines before attach, then the tailer from there: nothing twice, nothing missed
        wait_until(lambda: lines_in(str(out)) >= 4, 60, "training lines", step=0.2, stop_if=exited(job))
        before, at = attach_output.last_lines(str(out), 200)
        shown = [int(m.group(1)) for m in map(STEP.search, before) if m]
        assert shown
        tail = Tailer()
        tail.add(str(out), None, "stdout", start=at)
        try:
            followed: list[int] = []
            wait_until(lambda: followed.extend(int(m.group(1)) for _, _, got in tail.poll() for m in map(STEP.search, got)
                                               if m) or len(followed) >= 4, 60, "new lines followed", step=0.2,
                       stop_if=exited(job))
        finally:
            tail.close()
        # two ranks print the same steps: the first line followed is the next step of one rank or the other's same
        assert followed[0] in (shown[-1], shown[-1] + 10) and followed == sorted(followed), (shown[-4:], followed[:6])
        assert job.poll() is None  # attach changed nothing
    finally:
        stop(job)


@pytest.mark.timeout(150)
def test_torchrun_log_dir_redirects_found_as_files_and_dataloader_workers_are_no_ranks(tmp_path):
    logs = tmp_path / "logs"
    job = torchrun(tmp_path, "dataloader_worker_hang.py", "--log-dir", str(logs), "--redirects", "3")
    try:
        found = wait_until(lambda: job_with_ranks(job.pid), 90, "both ranks started", step=0.2, stop_if=exited(job))
        workers = wait_until(lambda: [c.pid for c in psutil.Process(found.ranks[0].pid).children()], 60,
                             "rank 0's DataLoader workers", step=0.2, stop_if=exited(job))
        for r, ar in found.ranks.items():
            want = glob.glob(f"{logs}/*/attempt_0/{r}/stdout.log")
            assert len(want) == 1 and ar.stdout == attach_output.RankOutput("file", want[0], "")
            assert ar.stderr.path == want[0].replace("stdout.log", "stderr.log")
        from_worker = find_job(workers[0])
        assert (from_worker.kind, from_worker.launcher_pid) == ("torchrun", job.pid)
        assert {r: a.pid for r, a in from_worker.ranks.items()} == {r: a.pid for r, a in found.ranks.items()}
        assert not set(workers) & {a.pid for a in from_worker.ranks.values()}
    finally:
        stop(job)


@pytest.mark.timeout(150)
def test_mp_spawn_job_found_from_the_parent_a_child_and_its_worker(tmp_path, monkeypatch):
    out = tmp_path / "nb.log"
    with open(out, "wb") as f:
        job = subprocess.Popen([sys.executable, "-u", str(FIXTURES / "mp_spawn_ddp_loop.py")], stdout=f,
                               stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=tmp_path,
                               env={**job_env(), "MASTER_PORT": str(random.randint(20000, 29999))})
    try:
        wait_until(lambda: lines_in(str(out)) >= 2, 120, "both spawn ranks training", step=0.2, stop_if=exited(job))
        found = find_job(job.pid)
        assert (found.kind, found.launcher_pid, found.world_size, found.notes) == ("spawn", job.pid, 2, ())
        kids = sorted(psutil.Process(job.pid).children(), key=lambda p: (p.create_time(), p.pid))
        ranks = [p.pid for p in kids if "spawn_main" in " ".join(p.cmdline())]
        assert {r: a.pid for r, a in found.ranks.items()} == {0: ranks[0], 1: ranks[1]}
        assert all(a.stdout == attach_output.RankOutput("file", str(out), "") for a in found.ranks.values())
        worker = wait_until(lambda: psutil.Process(ranks[1]).children(), 60, "rank 1's DataLoader worker", step=0.2,
                            stop_if=exited(job))[0].pid
        for pid in (ranks[1], worker):
            again = find_job(pid)
            assert (again.kind, again.launcher_pid) == ("spawn", job.pid)
            assert {r: a.pid for r, a in again.ranks.items()} == {0: ranks[0], 1: ranks[1]}
        # ptrace refused (py-spy cannot read the stacks): the start order numbers them, and the notes say so
        refusing = tmp_path / "py-spy"
        refusing.write_text("#!/bin/sh\necho 'Error: Permission denied (os error 1)' >&2\nexit 1\n")
        refusing.chmod(0o755)
        from ddptui.runners.edge import stacks
        monkeypatch.setattr(stacks, "find_pyspy", lambda pyspy=None: str(refusing))
        blind = find_job(job.pid)
        assert {r: a.pid for r, a in blind.ranks.items()} == {0: ranks[0], 1: ranks[1]}
        assert blind.world_size == 2 and len(blind.notes) == 1 and "start order" in blind.notes[0], blind.notes
    finally:
        stop(job)


@pytest.mark.timeout(60)
def test_a_process_that_is_not_a_job_and_a_vanished_pid():
    sleeper = subprocess.Popen(["sleep", "60"], stdin=subprocess.DEVNULL)
    try:
        with pytest.raises(NotAJob) as e:
            find_job(sleeper.pid)
        assert str(e.value) == (f"pid {sleeper.pid} (sleep) is not part of a PyTorch job: no process in its tree "
                                "has RANK/WORLD_SIZE in its environment")
    finally:
        sleeper.kill()
        sleeper.wait()
    with pytest.raises(NotAJob) as e:
        find_job(sleeper.pid)  # reaped: the pid names nothing now (unless reused at once: then it is no job either)
    assert str(e.value) in (f"no process {sleeper.pid}",) or "is not part of a PyTorch job" in str(e.value)


@pytest.mark.timeout(150)
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="needs root and setpriv to look at root's job as another user")
def test_a_job_of_another_user_is_named_unreadable(tmp_path):
    """As `nobody`, root's ranks cannot be read (/proc/PID/environ needs ptrace rights): the agent is still known by
    its command line (readable by all), its ranks are named with the reason and no rank is made up."""
    job = torchrun(tmp_path, "healthy_ddp_loop.py")
    try:
        found = wait_until(lambda: job_with_ranks(job.pid), 90, "both ranks started", step=0.2, stop_if=exited(job))
        probe = ("import sys; from ddptui.runners.attach.find import find_job\n"
                 "j = find_job(int(sys.argv[1]))\n"
                 "print(j.kind, j.launcher_pid, sorted(j.ranks), sorted((u.pid, u.reason) for u in j.unreadable))")
        r = subprocess.run(["setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups", sys.executable,
                            "-c", probe, str(found.ranks[0].pid)], capture_output=True, text=True, timeout=60,
                           env={**job_env(), "HOME": "/tmp"})
        assert r.returncode == 0, r.stderr[-2000:]
        pids = sorted(a.pid for a in found.ranks.values())
        why = "access denied: another user's process (run ddptui as that user or as root to read its environment)"
        assert r.stdout.strip() == f"torchrun {job.pid} [] {sorted((p, why) for p in pids)}"
    finally:
        stop(job)


@pytest.mark.timeout(150)
def test_torchrun_in_a_terminal_without_redirects_says_the_pane_cannot_read_it(tmp_path):
    """torchrun in a tmux pane: without --redirects the ranks inherit the agent's terminal; ddptui says so."""
    import threading

    main, sub = os.openpty()
    port = str(random.randint(20000, 29999))
    job = subprocess.Popen([TORCHRUN, "--nproc-per-node", "2", "--master-port", port,
                            str(FIXTURES / "healthy_ddp_loop.py")], stdout=sub, stderr=sub, stdin=sub, env=job_env(),
                           cwd=tmp_path, start_new_session=True)
    os.close(sub)

    def drain() -> None:  # the terminal's reader: a full pty would block the ranks in write()
        try:
            while os.read(main, 65536):
                pass
        except OSError:
            pass

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        found = wait_until(lambda: job_with_ranks(job.pid), 90, "both ranks started", step=0.2, stop_if=exited(job))
        tty = os.readlink(f"/proc/{job.pid}/fd/1")
        assert tty.startswith("/dev/pts/")
        for a in found.ranks.values():
            assert a.stdout.kind == a.stderr.kind == "terminal" and a.stdout.path is None
            assert tty in a.stdout.note and "cannot read a terminal" in a.stdout.note
    finally:
        stop(job)
        os.close(main)
        reader.join(timeout=10)


@pytest.mark.timeout(180)
def test_attach_to_a_shell_running_two_jobs_or_to_init_names_every_job_and_attaches_to_none(tmp_path):
    """A shell that started two torchrun jobs in the background (and init above everything): not one job, so exit 2
    with a line per job (its launcher's pid and command); nothing is py-spied, no record is written."""
    ports = random.sample(range(20000, 30000), 2)
    line = " & ".join(f"{TORCHRUN} --nproc-per-node 2 --master-port {p} {FIXTURES / 'healthy_ddp_loop.py'} "
                      ">/dev/null 2>&1" for p in ports) + " & wait"
    shell = subprocess.Popen(["bash", "-c", line], env=job_env(), cwd=tmp_path, stdin=subprocess.DEVNULL,
                             start_new_session=True)
    cli = [sys.executable, "-m", "ddptui.tui.cli", "attach"]
    try:
        def agents():
            kids = [c for c in psutil.Process(shell.pid).children() if "torchrun" in " ".join(c.cmdline())]
            return kids if len(kids) == 2 and all(job_with_ranks(k.pid) for k in kids) else None
        found = wait_until(agents, 120, "both jobs' ranks started", step=0.2, stop_if=exited(shell))
        for asked in (shell.pid, 1):
            r = subprocess.run(cli + [str(asked), "--no-ui", "--runs-dir", str(tmp_path / "runs")],
                               capture_output=True, text=True, timeout=60)
            assert r.returncode == 2 and r.stdout == "", (asked, r.stdout[-2000:], r.stderr[-2000:])
            lines = r.stderr.splitlines()
            assert lines[0].startswith(f"ddptui: pid {asked} (") and "PyTorch jobs, not one" in lines[0], r.stderr
            for agent in found:
                job_line = next(ln for ln in lines if f"torchrun agent pid {agent.pid} " in ln)
                assert f"--master-port {agent.cmdline()[agent.cmdline().index('--master-port') + 1]}" in job_line
            assert "Traceback" not in r.stderr
        assert not (tmp_path / "runs").exists()
    finally:
        for k in psutil.Process(shell.pid).children():
            if "torchrun" in " ".join(k.cmdline()):
                k.terminate()
        try:
            shell.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        stop(shell)
