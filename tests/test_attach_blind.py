"""`ddptui attach --no-ui` on jobs whose output nobody can read (a terminal, a pipe to cat, /dev/null), started outside
ddptui as a user would: a hang is judged from the ranks' stacks, CPU and when their threads last ran (dated before the
attach, not from it); a healthy job under load is never called stalled; a job that runs PyTorch's own debug server is
read through it (stacks without ptrace, Flight Recorder records)."""
from __future__ import annotations

import glob
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ddptui.runners.attach.find import find_job
from tests.support.outside_jobs import FIXTURES, TORCHRUN, job_env, job_with_ranks, stop
from tests.support.wait import exited, wait_until

pytestmark = [
    pytest.mark.main_suite(
        "long end-to-end rank runs (the engine and dashboard under them are in the any_python set); plain "
        "torchrun jobs started outside ddptui, writing to a pty, a pipe, /dev/null"),
]

CLI = [sys.executable, "-m", "ddptui.tui.cli"]


class Job:
    """`torchrun --nproc-per-node 2 SCRIPT` with its output to a terminal (a pty someone reads), a pipe to `cat`, or
    /dev/null: nothing ddptui can follow."""

    def __init__(self, tmp_path: Path, script: str, output: str, **env: str) -> None:
        self.output, self.readers, self.text = output, [], bytearray()
        argv = [TORCHRUN, "--nproc-per-node", "2", "--master-port", str(random.randint(20000, 29999)),
                str(FIXTURES / script)]
        full = {**job_env(), **env}
        if output == "pty":
            main, sub = os.openpty()
            self.proc = subprocess.Popen(argv, stdout=sub, stderr=sub, stdin=sub, env=full, cwd=tmp_path,
                                         start_new_session=True)
            os.close(sub)
            self._reader(lambda: os.read(main, 65536), lambda: os.close(main))
        elif output == "pipe":
            self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=full, cwd=tmp_path)
            self.cat = subprocess.Popen(["cat"], stdin=self.proc.stdout, stdout=subprocess.PIPE)
            self.proc.stdout.close()  # cat alone reads the pipe
            self._reader(lambda: self.cat.stdout.read1(65536), lambda: None)
        else:
            self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                         stdin=subprocess.DEVNULL, env=full, cwd=tmp_path)

    def _reader(self, read, close) -> None:
        def drain() -> None:  # the terminal's (or cat's) reader: a full pty or pipe would block the ranks in write()
            try:
                while True:
                    got = read()
                    if not got:
                        break
                    self.text += got
            except OSError:
                pass
            finally:
                close()
        t = threading.Thread(target=drain, daemon=True)
        t.start()
        self.readers.append(t)

    def stop(self) -> None:
        stop(self.proc)
        if self.output == "pipe":
            self.cat.wait(timeout=30)
        for t in self.readers:
            t.join(timeout=10)


def attach(tmp_path: Path, job: Job, *opts: str) -> tuple[subprocess.CompletedProcess, Path, float]:
    runs = tmp_path / f"runs-{job.output}"
    t0 = time.time()
    r = subprocess.run(CLI + ["attach", str(job.proc.pid), "--no-ui", "--runs-dir", str(runs), *opts],
                       capture_output=True, text=True, timeout=150)
    (run,) = glob.glob(str(runs / "*-attach-*"))
    return r, Path(run), t0


def no_signal_pending(pids) -> bool:
    for pid in pids:
        status = Path(f"/proc/{pid}/status").read_text()
        if "SigPnd:\t0000000000000000" not in status or "ShdPnd:\t0000000000000000" not in status:
            return False
    return True


@pytest.mark.timeout(420)
def test_a_hung_job_writing_to_a_terminal_a_pipe_or_dev_null_is_stalled_dated_before_the_attach(tmp_path):
    """rank 1 waits in the user's wait_for_lock(), rank 0 in all_reduce, for seconds before ddptui attaches: the stall
    is found at once, dated from when their threads last ran (read from the kernel before any stack sample), the ranks
    are named by what they do, and no rank is 'starting'."""
    jobs = {how: Job(tmp_path, "lock_wait_ddp.py", how, LOCK_MARK=str(tmp_path / f"hung-{how}"))
            for how in ("pty", "pipe", "null")}
    try:
        for how, job in jobs.items():
            wait_until(lambda: (tmp_path / f"hung-{how}").exists(), 240, f"the {how} job hangs", step=0.2,
                       stop_if=exited(job.proc))
        marks = {how: os.stat(tmp_path / f"hung-{how}").st_mtime for how in jobs}
        while time.time() - max(marks.values()) < 6:  # every hang at least 6 s old: older than --stall-after 4
            time.sleep(0.2)
        for how, job in jobs.items():
            found = find_job(job.proc.pid)
            assert {a.stdout.kind for a in found.ranks.values()} == {"terminal" if how == "pty" else
                                                                      "pipe" if how == "pipe" else "none"}, how
            r, run, t0 = attach(tmp_path, job, "--stall-after", "4")
            out = r.stdout
            assert r.returncode == 3, (how, out[-3000:], r.stderr[-2000:])
            assert "no sign of progress for" in out and "(output not readable: its Python threads have not run " \
                                                         "since " in out, (how, out[-3000:])
            assert "rank 1 is stuck in wait_for_lock() at lock_wait_ddp.py:" in out, (how, out[-3000:])
            assert "rank 0 waits in all_reduce at lock_wait_ddp.py:" in out and "steps unreadable" in out
            summary = json.loads((run / "summary.json").read_text())
            assert summary["status"] == "stalled" and summary["hang"]["culprits"] == [1], how
            # dated from the evidence: when the hang began (the mark), seconds before the attach
            since = summary["stall"]["since"]
            assert since < t0 - 3 and abs(since - marks[how]) < 3, (how, since, marks[how], t0)
            states = [json.loads(ln) for ln in (run / "events.jsonl").read_text().splitlines()]
            said = [(e["rank"], e["status"], e["detail"]) for e in states if e.get("kind") == "rank_state"]
            assert (0, "running", "output not readable") in said and (1, "running", "output not readable") in said
            assert not [s for s in said if s[1] == "starting"]
            assert job.proc.poll() is None and no_signal_pending(a.pid for a in found.ranks.values())
    finally:
        for job in jobs.values():
            job.stop()


def _load(n_busy: int = 3) -> list[subprocess.Popen]:
    """The machine held at several times its cores: busy loops, and a lane that keeps starting Python and importing
    torch (the load a test suite makes)."""
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n_busy)]
    lane = subprocess.Popen(["bash", "-c", f"while true; do {sys.executable} -c 'import torch'; done"],
                            start_new_session=True)
    return busy + [lane]


def _unload(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL) if p.args[0] == "bash" else p.kill()
        except OSError:
            pass
        p.wait()


@pytest.mark.timeout(420)
def test_a_healthy_job_writing_to_a_terminal_or_dev_null_under_load_is_never_called_stalled(tmp_path):
    """Training ranks whose output nobody can read, on a machine at several times its cores: each attach says every
    rank progressed (their frames moved) and detaches, exit 0; no stall, no 'starting'."""
    jobs = {how: Job(tmp_path, "healthy_ddp_loop.py", how, TRAINING_MARK=str(tmp_path / f"train-{how}"))
            for how in ("pty", "null")}
    load: list = []
    try:
        for how, job in jobs.items():
            wait_until(lambda: (tmp_path / f"train-{how}").exists(), 240, f"the {how} job trains", step=0.2,
                       stop_if=exited(job.proc))
        load = _load()
        time.sleep(3)  # the load is on before the attach
        for how, job in jobs.items():
            r, run, _ = attach(tmp_path, job, "--stall-after", "10")
            out = r.stdout
            assert r.returncode == 0, (how, out[-3000:], r.stderr[-2000:])
            assert "[stall]" not in out and "no verdict yet" not in out and "undecided" not in out, (how, out[-3000:])
            assert "every rank showed progress while watched (rank 0, rank 1): no stall" in out, (how, out[-3000:])
            summary = json.loads((run / "summary.json").read_text())
            assert (summary["status"], summary["hang"], summary["stall"]) == ("detached", None, None), how
            for rank in ("0", "1"):
                assert summary["ranks"][rank]["status"] == "running", (how, summary["ranks"][rank])
                assert summary["ranks"][rank]["outcome"].startswith("output not readable; progressing (it wrote "), \
                    summary["ranks"][rank]
            assert job.proc.poll() is None
    finally:
        _unload(load)
        for job in jobs.values():
            job.stop()


@pytest.mark.timeout(300)
def test_a_job_running_torchs_debug_server_is_read_through_it_where_py_spy_cannot(tmp_path):
    """torch.distributed.debug.start_debug_server() in the user's script, Flight Recorder on (TORCH_FR_BUFFER_SIZE, as
    the user set it), output to /dev/null; rank 1 held by a debugger (py-spy refused): its stacks come from its debug
    server (found in the job's TCPStore), both ranks' Flight Recorder records lead the verdict; no signal is sent."""
    mark = tmp_path / "hung"
    job = Job(tmp_path, "debug_server_lock_wait.py", "null", LOCK_MARK=str(mark), TORCH_FR_BUFFER_SIZE="2000")
    holder = None
    try:
        wait_until(lambda: mark.exists(), 240, "the job hangs", step=0.2, stop_if=exited(job.proc))
        found = wait_until(lambda: job_with_ranks(job.proc.pid), 60, "both ranks", step=0.2, stop_if=exited(job.proc))
        holder = subprocess.Popen([sys.executable, str(FIXTURES / "ptrace_holder.py"), str(found.ranks[1].pid)],
                                  stdout=subprocess.PIPE, text=True)
        assert holder.stdout.readline().strip() == "seized"
        while time.time() - mark.stat().st_mtime < 6:
            time.sleep(0.2)
        r, run, _ = attach(tmp_path, job, "--stall-after", "4")
        out = r.stdout
        assert r.returncode == 3, (out[-3000:], r.stderr[-2000:])
        for rank in (0, 1):
            assert f"ddptui: rank {rank} serves torch's debug server at http://localhost:" in out, out[-3000:]
        (folder,) = run.glob("stacks/*-stall")
        stacks = json.loads((folder / "stacks.json").read_text())
        assert stacks["method"] == {"0": "py-spy", "1": "torch debug server"}, stacks["method"]
        assert stacks["fr"] == {"0": "recorded", "1": "recorded"}, stacks["fr"]
        assert "wait_for_lock" in (folder / "rank1.txt").read_text()
        verdict = json.loads((run / "summary.json").read_text())["hang"]["text"]
        assert verdict.startswith("collective #") and "rank 1 never did" in verdict, verdict
        assert "rank 1 is stuck in wait_for_lock() at debug_server_lock_wait.py:" in verdict, verdict
        assert job.proc.poll() is None and no_signal_pending(a.pid for a in found.ranks.values())
    finally:
        if holder is not None:
            holder.kill()
            holder.wait()
        job.stop()


@pytest.mark.timeout(300)
def test_a_culprit_spinning_in_one_function_is_no_progress(tmp_path):
    """rank 1 spins in `while time.time() < end: x += 1` (100 % of what core it gets, no step), rank 0 waits for it in
    DDP's all-reduce, output to /dev/null. The spin's samples land on its two lines by turns: that is no progress. The
    stall is held while rank 1 burns CPU, the watch goes on to the hold's end (saying so), then names rank 1 busy but
    not progressing in culprit_wait(), never 'slow but still progressing'."""
    mark = tmp_path / "spinning"
    job = Job(tmp_path, "hang_ddp.py", "null", HANG_MODE="spin", HANG_MARK=str(mark))
    try:
        wait_until(lambda: mark.exists(), 240, "rank 1 spins", step=0.2, stop_if=exited(job.proc))
        while time.time() - mark.stat().st_mtime < 6:  # older than --stall-after 4, younger than its 3 x hold
            time.sleep(0.2)
        r, run, _ = attach(tmp_path, job, "--stall-after", "4")
        out = r.stdout
        assert r.returncode == 3, (out[-3000:], r.stderr[-2000:])
        held = re.search(r"busy, not stalled; held until (\d+) s", out)  # 3 x 4 s, x the overload of a loaded machine
        assert held and int(held[1]) >= 12 and "busy but not progressing" in out, out[-3000:]
        assert "slow but still progressing" not in out, out[-3000:]
        summary = json.loads((run / "summary.json").read_text())
        assert summary["hang"]["culprits"] == [1] and "culprit_wait() at hang_ddp.py:" in summary["hang"]["text"]
        assert summary["stall"]["stalled"] == [0, 1], summary["stall"]
    finally:
        job.stop()
