"""Bad profile input through the real `ddptui` command: one line naming file:line:column and field, exit 2, fast."""
from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.any_python

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
WORKLOAD = "workload: {builtin: ddp_mlp}\n"


# `ddptui` as `python -m tui.cli` would run it, then its own peak RSS (VmHWM) to a file. A child's ru_maxrss
# is no use here: Linux carries the forking parent's high-water mark (pytest's) through fork and exec.
MEASURED = """
import os, runpy, sys
sys.argv[0] = "ddptui"
try:
    runpy.run_module("ddptui.tui.cli", run_name="__main__", alter_sys=True)
finally:
    with open("/proc/self/status") as st, open(os.environ["PEAK_FILE"], "w") as out:
        out.write(next(ln.split()[1] for ln in st if ln.startswith("VmHWM:")))
"""


def ddptui(*args: str, runs_dir: Path) -> tuple[int, str, str, float, float, int]:
    """rc, stdout, stderr, wall seconds, CPU seconds and peak RSS (KiB) of one `ddptui` process."""
    out, err, peak = (runs_dir.parent / name for name in ("cli.out", "cli.err", "cli.peak"))
    t0 = time.monotonic()
    with open(out, "wb") as fo, open(err, "wb") as fe:
        proc = subprocess.Popen([sys.executable, "-c", MEASURED, "--runs-dir", str(runs_dir), *args], cwd=ROOT,
                                stdout=fo, stderr=fe, stdin=subprocess.DEVNULL,
                                env={**os.environ, "PEAK_FILE": str(peak)})
    try:
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own CPU time
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: keep Popen from waiting again
    wall = time.monotonic() - t0
    return (proc.returncode, out.read_text(), err.read_text(), wall, usage.ru_utime + usage.ru_stime,
            int(peak.read_text()))


def assert_one_line_exit_2(rc: int, stdout: str, stderr: str, runs_dir: Path, where: str, field: str | None):
    assert rc == 2, (stdout, stderr)
    assert "Traceback" not in stderr and stdout == ""
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith(where + ": "), lines[0]
    if field is not None:
        assert f"field '{field}': " in lines[0], lines[0]
    assert not runs_dir.exists() or not any(runs_dir.iterdir())  # nothing was started


@pytest.mark.timeout(60)
@pytest.mark.parametrize("text, line_col, field, words", [
    ("nproc: 100000\n", "2:8", "nproc", "100000 ranks, more than the"),
    ("nnodes: 100000\n", "2:9", "nnodes", "200000 ranks, more than the"),
    ("nproc: 99999999999999999999999\n", "2:8", "nproc", "max_world_size can allow at most 65536"),
    ("nproc: 100\nmax_world_size: 99999999999999999999999\n", "3:17", "max_world_size",
     "expected an integer in 1..65536 or null"),
    ("nproc: 8\nmax_world_size: 4\n", "2:8", "nproc", "more than max_world_size 4"),
    ("xla: {num_devices: 100000}\n", "2:20", "xla.num_devices", "100000 ranks"),
    ("timeout: 1" + "0" * 400 + "\n", "2:10", "timeout", "expected a number >= 0"),
    ("env: !!python/object:os.system {A: 1}\n", "2:6", "env", "unsupported tag"),
    ("workload: !!python/object/apply:os.system [{builtin: ddp_mlp}]\n", "1:11", "workload", "unsupported tag"),
    ("runner: mirage\nmaster_port: 29500\n", "3:14", "master_port", "mirage picks the rendezvous itself"),
    ("master_addr: 192.0.2.77\n", "2:14", "master_addr", "cannot listen on '192.0.2.77' on this machine"),
])
def test_bad_profile_is_one_line_exit_2(tmp_path, runs_dir, text, line_col, field, words):
    path = tmp_path / "bad.yaml"
    path.write_text(WORKLOAD + text if not text.startswith("workload") else text)
    rc, out, err, _, _, _ = ddptui(str(path), "--no-ui", runs_dir=runs_dir)
    assert_one_line_exit_2(rc, out, err, runs_dir, f"{path}:{line_col}", field)
    assert words in err


@pytest.mark.timeout(60)
@pytest.mark.parametrize("args, where, field", [
    (["--set", "nproc=99999999999999999999999"], "--set nproc=99999999999999999999999", "nproc"),
    (["--set", "nnodes=100000"], "--set nnodes=100000", "nnodes"),
    (["--set", "master_addr=no-such-host.invalid"], "--set master_addr=no-such-host.invalid", "master_addr"),
    (["--set", "master_port=29500", "--", "torchrun", "--standalone", "--nproc_per_node=2", "x.py"],
     "--set master_port=29500", "master_port"),
    (["--", "torchrun", "--nproc_per_node=100000", "x.py"], "<command line>", "nproc"),
])
def test_bad_override_or_command_is_one_line_exit_2(runs_dir, args, where, field):
    profile = [] if "--" in args else ["profiles/cpu-smoke.yaml"]
    rc, out, err, _, _, _ = ddptui(*profile, "--no-ui", *args, runs_dir=runs_dir)
    assert_one_line_exit_2(rc, out, err, runs_dir, where, field)


@pytest.mark.timeout(60)
def test_a_50_mb_profile_is_refused_before_it_is_read(tmp_path, runs_dir):
    path = tmp_path / "huge.yaml"
    with open(path, "w") as fh:
        fh.write(WORKLOAD + "env:\n")
        block = "".join(f"  K{i}: v{i}\n" for i in range(10000))
        while fh.tell() < 50 * 1024 * 1024:
            fh.write(block)
    rc, out, err, wall, cpu, peak_kib = ddptui(str(path), "--no-ui", runs_dir=runs_dir)
    assert_one_line_exit_2(rc, out, err, runs_dir, str(path), None)
    assert "profile too large" in err
    # Before the bound: 182 s and 3.8 GB. CPU time, not wall time, so a loaded machine cannot fail it.
    assert cpu < 3.0 and peak_kib < 200 * 1024, (wall, cpu, peak_kib)


@pytest.mark.timeout(60)
def test_a_device_or_fifo_is_refused_without_reading(tmp_path, runs_dir):
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)  # open() would block forever on it, no writer ever comes
    for path in (fifo, Path("/dev/zero")):
        rc, out, err, _, _, _ = ddptui(str(path), "--no-ui", runs_dir=runs_dir)
        assert_one_line_exit_2(rc, out, err, runs_dir, str(path), None)
        assert "not a regular file" in err


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_profile(tmp_path: Path, port: int) -> Path:
    path = tmp_path / "port.yaml"
    path.write_text(f"runner: torchrun\nnproc: 2\nmaster_port: {port}\n"
                    f"workload: {{script: {FIXTURES / 'ddp_prints_its_rendezvous.py'}}}\n")
    return path


@pytest.mark.timeout(60)
def test_single_node_torchrun_dry_run_shows_the_profiles_master_port(tmp_path, runs_dir):
    port = free_port()
    rc, out, err, _, _, _ = ddptui(str(port_profile(tmp_path, port)), "--dry-run", runs_dir=runs_dir)
    assert rc == 0, err
    (argv,) = [ln for ln in out.splitlines() if ln.strip().startswith("argv:")]
    assert f"--master-port {port}" in argv and "--master-addr 127.0.0.1" in argv
    assert "--standalone" not in argv


@pytest.mark.timeout(120)
def test_single_node_torchrun_ranks_get_the_profiles_master_port(tmp_path, runs_dir):
    port = free_port()
    rc, out, err, _, _, _ = ddptui(str(port_profile(tmp_path, port)), "--no-ui", runs_dir=runs_dir)
    assert rc == 0, out + err
    seen = sorted(set(re.findall(r"\[rank (\d)\] rendezvous (\S+)", out)))
    assert seen == [("0", f"127.0.0.1:{port}"), ("1", f"127.0.0.1:{port}")], out


@pytest.mark.timeout(60)
@pytest.mark.parametrize("how", ["field", "file stem"])
def test_a_name_too_long_for_a_run_folder_is_refused_by_dry_run_too(tmp_path, runs_dir, how):
    """Before: dry-run passed and the run ended in `OSError: File name too long` making its folder."""
    if how == "field":
        path, where = tmp_path / "p.yaml", None
        path.write_text(WORKLOAD + "name: " + "é" * 101 + "\n")  # 101 characters, 202 bytes
    else:
        path = tmp_path / ("s" * 240 + ".yaml")
        path.write_text(WORKLOAD)
    rc, out, err, _, _, _ = ddptui(str(path), "--dry-run", runs_dir=runs_dir)
    assert_one_line_exit_2(rc, out, err, runs_dir, f"{path}:2:7" if how == "field" else str(path), "name")
    assert "at most 200 bytes" in err and (" got 202 bytes" in err or " got 240 bytes" in err), err


def test_the_longest_name_allowed_makes_its_run_folders(tmp_path):
    from ddptui.runners.launch.profile.names import MAX_NAME_BYTES
    from ddptui.runners.edge.record import new_run_dir
    name = "n" * MAX_NAME_BYTES
    first, second = new_run_dir(tmp_path, name), new_run_dir(tmp_path, name)  # the second in the same second: -2
    assert first.is_dir() and second.is_dir() and first != second



@pytest.mark.timeout(60)
@pytest.mark.parametrize("args", [["profiles"], ["cpu-ddp", "--dry-run"]])
def test_output_into_a_pipe_its_reader_closed_ends_quietly(args):
    """`ddptui profiles | head -0`: the reader is gone before anything is written; no BrokenPipeError traceback, exit
    141 as a shell reports SIGPIPE."""
    r, w = os.pipe()
    os.close(r)
    try:
        proc = subprocess.run([sys.executable, "-m", "ddptui.tui.cli", *args], stdout=w, stderr=subprocess.PIPE,
                              timeout=50)
    finally:
        os.close(w)
    err = proc.stderr.decode()
    assert "Traceback" not in err and "Exception ignored" not in err and proc.returncode == 141, (proc.returncode, err)
