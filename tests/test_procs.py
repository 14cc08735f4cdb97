"""Process lifetime helpers on real processes: the engine's idle sleep ends when a process it started exits."""
from __future__ import annotations

import sys
import time

import pytest

from runners import procs
from runners.plan import ProcSpec


def spawn_sleeper(tmp_path, seconds: float) -> procs.Proc:
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

    from runners.tail import Tailer
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
    from runners.tail import CHUNK, Tailer
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
