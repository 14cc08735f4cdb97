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
