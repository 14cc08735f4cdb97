"""Process lifetime helpers on real processes: the engine's idle sleep ends when a process it started exits, and
teardown is bounded even for a process that outlives SIGKILL."""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from ddptui.runners.edge import procs
from ddptui.runners.launch.plan import ProcSpec
from tests.support.wait import wait_until

pytestmark = pytest.mark.main_suite("its ad-hoc ranks run on the test's own interpreter")


def spawn_sleeper(tmp_path, seconds: float) -> procs.Spawned:
    spec = ProcSpec("sleeper", (sys.executable, "-c", f"import time; time.sleep({seconds})"), {}, str(tmp_path), (),
                    str(tmp_path / "out"), str(tmp_path / "err"))
    return procs.spawn(spec)


@pytest.mark.timeout(30)
def test_idle_sleep_wakes_when_a_process_exits(tmp_path):
    proc = spawn_sleeper(tmp_path, 0.5)
    try:
        assert proc.pidfd is not None  # Linux >= 5.3: without it the loop still works, it only sleeps its timeout
        t0 = time.monotonic()
        while proc.poll() is None and time.monotonic() - t0 < 20:
            procs.sleep_until_exit([proc], 10.0)
        woke = time.monotonic() - t0
        assert proc.returncode == 0 and woke < 5.0, woke  # not the 10 s timeout
        assert proc.pidfd is None  # closed once the exit was seen
    finally:
        procs.teardown([proc], deadline=2.0)


@pytest.mark.timeout(30)
def test_idle_sleep_keeps_its_timeout_while_processes_run(tmp_path):
    proc = spawn_sleeper(tmp_path, 30)
    try:
        t0 = time.monotonic()
        procs.sleep_until_exit([proc], 0.3)
        assert 0.25 <= time.monotonic() - t0 < 3.0 and proc.poll() is None
        t0 = time.monotonic()
        procs.sleep_until_exit([], 0.2)  # nothing to wait for: a plain sleep
        assert 0.15 <= time.monotonic() - t0 < 3.0
    finally:
        procs.teardown([proc], deadline=2.0)
    assert proc.returncode is not None and proc.pidfd is None


@pytest.mark.timeout(30)
def test_idle_sleep_wakes_when_a_followed_file_is_written(tmp_path):
    import threading

    from ddptui.runners.edge.tail import Tailer
    f = tmp_path / "stdout.log"
    f.write_text("")
    tl = Tailer()
    tl.add(str(f), 0, "out")
    try:
        assert tl.poll() == [] and tl.watch.fd is not None  # opened, and watched from now on
        writer = threading.Timer(0.3, lambda: f.open("a").write("late line\n"))
        writer.start()
        t0 = time.monotonic()
        procs.sleep_until_exit([], 10.0, also=tl.watch.fd)
        assert time.monotonic() - t0 < 5.0  # woken by the write, not the 10 s timeout
        assert tl.poll() == [(0, "out", ["late line"])]
        t0 = time.monotonic()
        procs.sleep_until_exit([], 0.3, also=tl.watch.fd)  # the event was consumed by the poll
        assert time.monotonic() - t0 >= 0.25
    finally:
        tl.close()


@pytest.mark.timeout(30)
def test_tailer_says_when_a_read_left_more_behind(tmp_path):
    from ddptui.runners.edge.tail import CHUNK, Tailer
    f = tmp_path / "stdout.log"
    f.write_bytes(b"x" * 99 + b"\n")
    f.open("ab").write((b"y" * 99 + b"\n") * (3 * CHUNK // 100))
    tl = Tailer()
    tl.add(str(f), 0, "out")
    try:
        rounds = 0
        while True:
            tl.poll()
            rounds += 1
            if not tl.backlog:
                break
        assert rounds == 4  # three full chunks, then the rest
    finally:
        tl.close()


def _immortal(monkeypatch, pid: int, state: str = "disk-sleep") -> list:
    """Make teardown see `pid` as a process that no signal ends (as one in D state): returns the signals sent."""
    sent = []
    monkeypatch.setattr(procs, "tree_pids", lambda ps, extra=frozenset(): {pid})
    monkeypatch.setattr(procs, "_alive", lambda p: True)
    monkeypatch.setattr(procs, "_state", lambda p: state)
    monkeypatch.setattr(procs, "_signal_tree", lambda pids, sig: sent.extend((p, sig) for p in sorted(pids)))
    return sent


@pytest.mark.timeout(20)
def test_teardown_gives_up_on_a_process_that_outlives_sigkill(monkeypatch):
    # A real D-state process cannot be made here without root (a cgroup-v1 freezer or a hung FUSE/NFS mount),
    # so the kill and liveness functions are replaced by a process that ignores everything.
    import signal
    sent = _immortal(monkeypatch, 4242)
    t0 = time.monotonic()
    td = procs.teardown([], {4242}, deadline=0.3, kill_wait=0.4)
    took = time.monotonic() - t0
    assert 0.6 <= took < 5.0, took  # TERM deadline + KILL wait, then it gives up: one deadline, never re-armed
    assert sent == [(4242, signal.SIGTERM), (4242, signal.SIGKILL)]  # each signal once, not every pass
    assert td["killed"] and td["survivors"] == [{"pid": 4242, "state": "disk-sleep"}]


@pytest.mark.timeout(20)
def test_teardown_hurried_sigkills_without_waiting_the_term_deadline(monkeypatch):
    import signal
    sent = _immortal(monkeypatch, 4243, "sleeping")
    t0 = time.monotonic()
    td = procs.teardown([], {4243}, deadline=60.0, kill_wait=0.2, hurry=lambda: True)
    assert time.monotonic() - t0 < 5.0
    assert [s for _, s in sent] == [signal.SIGTERM, signal.SIGKILL]
    assert td["survivors"] == [{"pid": 4243, "state": "sleeping"}]


def test_a_survivor_is_described_by_pid_owner_and_state():
    line = procs.describe_survivor(123, "disk-sleep", "rank 1")
    assert line.startswith("pid 123 (rank 1) did not exit after SIGKILL (state D: uninterruptible sleep")
    assert procs.describe_survivor(7, "stopped", None) == "pid 7 did not exit after SIGKILL (state T: stopped); left running"


def _spawn_term_ignorer(tmp_path) -> procs.Spawned:
    code = ("import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('ready', flush=True); time.sleep(120)")
    spec = ProcSpec("stubborn", (sys.executable, "-c", code), {}, str(tmp_path), (), str(tmp_path / "out"),
                    str(tmp_path / "err"))
    proc = procs.spawn(spec)
    wait_until(lambda: "ready" in (tmp_path / "out").read_text(), 30, "the stubborn process ready", step=0.05)
    return proc


@pytest.mark.timeout(40)
def test_teardown_sigkills_a_real_process_that_ignores_sigterm_at_the_deadline(tmp_path):
    proc = _spawn_term_ignorer(tmp_path)
    td = procs.teardown([proc], deadline=1.0)
    assert proc.returncode == -9 and td["killed"] and td["survivors"] == []
    assert 1.0 <= td["seconds"] < 10.0, td


@pytest.mark.timeout(40)
def test_teardown_hurried_kills_a_real_process_at_once(tmp_path):
    proc = _spawn_term_ignorer(tmp_path)
    td = procs.teardown([proc], deadline=60.0, hurry=lambda: True)
    assert proc.returncode == -9 and td["survivors"] == []
    assert td["seconds"] < 10.0, td


FIXTURES = __import__("pathlib").Path(__file__).resolve().parent / "fixtures"


@pytest.mark.timeout(120)
def test_a_rank_that_outlives_sigkill_is_named_in_the_launcher_log_and_summary(runs_dir, monkeypatch):
    """A real 2-rank run stopped by request; rank 1's pid is made to look immortal once the stop is asked."""
    import json

    from ddptui.runners import events as ev
    from ddptui.runners.launch.profile.load import adhoc_profile
    from ddptui.runners.session import Session
    profile = adhoc_profile([sys.executable, str(FIXTURES / "train_ddp_long.py")], ["nproc=2"])
    holder = {}
    real_alive, real_state = procs._alive, procs._state

    def emit(batch):
        s = holder["s"]
        if not s._stop.is_set() and any(isinstance(e, ev.Progress) and e.rank == 1 and (e.step or 0) >= 3
                                        for e in batch):
            stuck = s.tracks[1].pid
            monkeypatch.setattr(procs, "_alive", lambda pid: pid == stuck or real_alive(pid))
            monkeypatch.setattr(procs, "_state", lambda pid: "disk-sleep" if pid == stuck else real_state(pid))
            s.request_stop()

    s = holder["s"] = Session(profile, runs_dir, emit=emit)
    t0 = time.monotonic()
    code = s.run()
    assert code == 1 and time.monotonic() - t0 < 100
    pid = s.tracks[1].pid
    want = f"pid {pid} (rank 1) did not exit after SIGKILL (state D: uninterruptible sleep"
    assert want in (s.run_dir / "launcher.log").read_text()
    summary = json.loads((s.run_dir / "summary.json").read_text())
    assert summary["status"] == "stopped" and [x[:len(want)] for x in summary["survivors"]] == [want]


FREEZER = Path("/sys/fs/cgroup/freezer")


@pytest.fixture
def freeze():
    """freeze(pid): put a real process in D state with a cgroup-v1 freezer (SIGKILL stays pending until it is thawed);
    everything frozen is thawed when the test ends. Skips where there is no writable v1 freezer (needs root)."""
    group = FREEZER / f"ddptui-test-{uuid.uuid4().hex[:8]}"
    try:
        group.mkdir()
    except OSError as e:
        pytest.skip(f"no writable cgroup-v1 freezer to make a D-state process: {e}")

    def _freeze(pid: int) -> None:
        (group / "tasks").write_text(str(pid))
        (group / "freezer.state").write_text("FROZEN")
        wait_until(lambda: (group / "freezer.state").read_text().strip() == "FROZEN", 10, "the cgroup FROZEN",
                   step=0.05)

    try:
        yield _freeze
    finally:
        (group / "freezer.state").write_text("THAWED")
        try:  # the pending SIGKILL ends them once thawed
            wait_until(lambda: not (group / "tasks").read_text().strip(), 10, "the thawed processes to end",
                       step=0.05)
        finally:
            with contextlib.suppress(OSError):
                group.rmdir()


@pytest.mark.timeout(60)
def test_teardown_gives_up_on_a_real_frozen_process_and_reports_it(tmp_path, freeze):
    proc = spawn_sleeper(tmp_path, 120)
    freeze(proc.pid)
    td = procs.teardown([proc], deadline=0.5, kill_wait=1.0)
    assert td["killed"] and td["survivors"] == [{"pid": proc.pid, "state": "disk-sleep"}]
    assert 1.5 <= td["seconds"] < 10.0, td  # TERM deadline + KILL wait, then it gave up (the fixture thaws it:
    # the SIGKILL it already got then ends it)


@pytest.mark.timeout(120)
def test_a_real_frozen_rank_is_named_as_a_survivor_in_the_summary(runs_dir, freeze):
    import json

    from ddptui.runners import events as ev
    from ddptui.runners.launch.profile.load import adhoc_profile
    from ddptui.runners.session import Session
    profile = adhoc_profile([sys.executable, str(FIXTURES / "train_ddp_long.py")], ["nproc=2"])
    holder = {}

    def emit(batch):
        s = holder["s"]
        if not s._stop.is_set() and any(isinstance(e, ev.Progress) and e.rank == 1 and (e.step or 0) >= 3
                                        for e in batch):
            freeze(s.tracks[1].pid)
            s.request_stop()

    s = holder["s"] = Session(profile, runs_dir, emit=emit)
    t0 = time.monotonic()
    assert s.run() == 1
    assert time.monotonic() - t0 < 100
    want = f"pid {s.tracks[1].pid} (rank 1) did not exit after SIGKILL (state D: uninterruptible sleep"
    assert want in (s.run_dir / "launcher.log").read_text()
    summary = json.loads((s.run_dir / "summary.json").read_text())
    assert [x[:len(want)] for x in summary["survivors"]] == [want]


_COUNT_TERMS = """
import os, signal, sys, time
out = sys.argv[1]
def note(letter):
    def handler(sig, frame):
        with open(out, "a") as f:
            f.write(letter)
    return handler
signal.signal(signal.SIGTERM, note("T"))
signal.signal(signal.SIGWINCH, note("W"))  # the test's marker: handled after any SIGTERM pending before it
if len(sys.argv) > 2:  # the group leader starts a child in its own group, as torchrun does with ranks
    import subprocess
    subprocess.Popen([sys.executable, "-c", sys.argv[2], sys.argv[1] + ".child"])
open(out + ".ready", "w").close()
while True:
    time.sleep(0.05)
"""


@pytest.mark.timeout(30)
def test_teardown_signals_each_process_once(tmp_path):
    """A second SIGTERM to torchrun lands inside its own shutdown (a chained SignalException traceback, ranks
    signalled twice): every process of the tree, leader and child alike, gets SIGTERM exactly once."""
    out = tmp_path / "terms"
    spec = ProcSpec("leader", (sys.executable, "-c", _COUNT_TERMS, str(out), _COUNT_TERMS), {}, str(tmp_path), (),
                    str(tmp_path / "out"), str(tmp_path / "err"))
    proc = procs.spawn(spec)
    try:
        wait_until(lambda: Path(f"{out}.ready").exists() and Path(f"{out}.child.ready").exists(), 20,
                   "the processes to start", step=0.05)
        procs._signal_tree(procs.tree_pids([proc]), procs.signal.SIGTERM)
        wait_until(lambda: out.exists() and Path(f"{out}.child").exists(), 10, "SIGTERM to arrive", step=0.05)
        # Every signal _signal_tree sent is pending or handled by now. A marker signal with a higher number comes
        # after them (the kernel delivers, and Python runs handlers, lowest number first): once it is noted, a
        # duplicate SIGTERM would have been noted before it.
        for pid in [proc.pid, *(c.pid for c in psutil.Process(proc.pid).children())]:  # the two the test started
            os.kill(pid, signal.SIGWINCH)
        wait_until(lambda: out.read_text().endswith("W") and Path(f"{out}.child").read_text().endswith("W"), 10,
                   "the marker signal to arrive", step=0.05,
                   seen=lambda: (out.read_text(), Path(f"{out}.child").read_text()))
        assert out.read_text() == "TW" and Path(f"{out}.child").read_text() == "TW"
    finally:
        procs.teardown([proc], deadline=0.5)


def _is_subreaper() -> bool:
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    flag = ctypes.c_int(-1)
    assert libc.prctl(37, ctypes.byref(flag), 0, 0, 0) == 0  # PR_GET_CHILD_SUBREAPER
    return bool(flag.value)


@pytest.mark.timeout(120)
def test_a_run_is_the_subreaper_only_while_it_runs(tmp_path):
    """A process left a subreaper adopts every later orphan below it for good (a test's Slurm daemons' forks)."""
    from ddptui.runners.launch.profile.load import load_profile
    from ddptui.runners.session import Session
    from tests.support.engine import PROFILES
    procs._prctl(36, 0)
    seen = []
    session = Session(load_profile(PROFILES / "cpu-smoke.yaml", ["steps=2"]), tmp_path,
                      emit=lambda batch: seen.append(_is_subreaper()))
    assert session.run() == 0 and any(seen)
    assert not _is_subreaper()
    assert procs.become_subreaper() and procs.become_subreaper()  # two runs at once: the first to end keeps it on
    procs.stop_subreaping()
    assert _is_subreaper()
    procs.stop_subreaping()
    assert not _is_subreaper()
