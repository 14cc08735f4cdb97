"""Flight Recorder switched on in the ranks: the profile knob, the runners' variables, --dry-run, the socket folder,
and the rank side's pure decisions (which groups to report, the frontier of a pending collective)."""
from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ddptui.runners.launch import fr_env
from ddptui.runners.inject import ddptui_scope
from ddptui.runners.launch.profile.errors import ProfileError
from ddptui.runners.launch.profile.load import load_profile
from ddptui.runners.session import make_plan

pytestmark = [pytest.mark.any_python, pytest.mark.timeout(60)]

ROOT = Path(__file__).resolve().parents[1]
INJECT = ROOT / "runners" / "inject"
sys.path.insert(0, str(INJECT))
import ddptui_fr  # noqa: E402  (imports no torch: the rank side's decisions)

FR_VARS = {"TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_DUMP_ON_TIMEOUT", "TORCH_FR_DUMP_TEMP_FILE", "DDPTUI_SOCKETS"}


def profile(tmp_path: Path, extra: str = "", name: str = "p.yaml"):
    path = tmp_path / name
    path.write_text("workload: {builtin: ddp_mlp}\n" + extra)
    return load_profile(path)


def rank_envs(p, run_dir: Path) -> list[dict]:
    plan = make_plan(p, run_dir, 29500, 1)
    return [dict(spec.env) for spec in plan.procs]


@pytest.fixture(autouse=True)
def no_user_fr_env(monkeypatch):
    for k in ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_NCCL_DUMP_ON_TIMEOUT",
              "TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"):
        monkeypatch.delenv(k, raising=False)


# ---- the profile knob

def test_flight_recorder_is_on_by_default_and_off_when_the_profile_says(tmp_path):
    assert profile(tmp_path).flight_recorder is True
    assert profile(tmp_path, "flight_recorder: false\n").flight_recorder is False
    p = load_profile(tmp_path / "p.yaml", ["flight_recorder=true"])
    assert p.flight_recorder is True and p.to_json()["flight_recorder"] is True


def test_a_bad_flight_recorder_value_is_one_line_naming_file_line_and_field(tmp_path):
    with pytest.raises(ProfileError) as e:
        profile(tmp_path, "flight_recorder: sometimes\n")
    msg = str(e.value)
    assert "\n" not in msg and "p.yaml:2:18" in msg
    assert "field 'flight_recorder': expected true or false, got 'sometimes'" in msg


# ---- the runners' variables

@pytest.mark.parametrize("runner", ["torchrun", "env", "mirage", "slurm"])
def test_every_runner_but_xla_gives_the_ranks_flight_recorder_and_a_socket_folder(tmp_path, runner):
    p = profile(tmp_path, f"runner: {runner}\n")
    run_dir = tmp_path / "runs" / "20261203-120000-p"
    envs = rank_envs(p, run_dir)
    if runner == "slurm" and not envs[0]:  # sbatch: the engine in the job gives them to its srun step
        from ddptui.runners.launch import slurm
        envs = [slurm.plan(p, run_dir, 0, 1, environ={"SLURM_JOB_ID": "4", "DDPTUI_SLURM_ENGINE": "4"}).procs[0].env]
    for env in envs:
        assert env["TORCH_FR_BUFFER_SIZE"] == "2000"
        assert env["DDPTUI_SOCKETS"] == fr_env.socket_dir(run_dir)
        assert "TORCH_NCCL_DUMP_ON_TIMEOUT" not in env and "TORCH_FR_DUMP_TEMP_FILE" not in env  # gloo, cpu


def test_the_socket_folder_is_short_per_run_and_the_same_for_the_same_run(tmp_path):
    a = fr_env.socket_dir(tmp_path / "runs" / "a", uid=1000)
    b = fr_env.socket_dir(tmp_path / "runs" / "b", uid=1000)
    assert a != b and a == fr_env.socket_dir(tmp_path / "runs" / "a", uid=1000)
    assert a.startswith("/tmp/ddptui-1000/") and len(os.path.basename(a)) == 8
    longest = os.path.join(fr_env.socket_dir(tmp_path / ("x" * 200), uid=2**32 - 1), f"r{65535}.sock")
    assert len(longest.encode()) <= fr_env.SUN_PATH_MAX  # whatever the run directory's length


def test_xla_gets_none_of_it(tmp_path):
    for extra in ("runner: xla\n", "backend: xla\ndevice: xla\n"):
        p = profile(tmp_path, extra)
        assert not fr_env.enabled(p) and fr_env.rank_env(p, tmp_path) == {}
    for env in rank_envs(profile(tmp_path, "runner: xla\n"), tmp_path / "run"):
        assert not FR_VARS & set(env), sorted(FR_VARS & set(env))


def test_opting_out_leaves_every_variable_out(tmp_path):
    for runner in ("torchrun", "env", "mirage"):
        p = profile(tmp_path, f"runner: {runner}\nflight_recorder: false\nbackend: nccl\ndevice: cuda\n")
        for env in rank_envs(p, tmp_path / "run"):
            assert not FR_VARS & set(env), (runner, sorted(FR_VARS & set(env)))
    p = profile(tmp_path, "runner: slurm\nflight_recorder: false\nslurm: {submit: sbatch}\n")
    from ddptui.runners.launch import slurm
    env = slurm.plan(p, tmp_path / "run", 0, 1, environ={"SLURM_JOB_ID": "4", "DDPTUI_SLURM_ENGINE": "4"}).procs[0].env
    assert not FR_VARS & set(env) and "DDPTUI_SOCKETS" not in env  # the engine in the job gives its step none


@pytest.mark.parametrize("extra", ["backend: nccl\n", "device: cuda\n", "backend: nccl\ndevice: cuda\n"])
def test_nccl_also_dumps_on_a_watchdog_timeout_into_the_run_record(tmp_path, extra):
    run_dir = tmp_path / "run"
    env = rank_envs(profile(tmp_path, extra), run_dir)[0]
    assert env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"
    assert env["TORCH_FR_DUMP_TEMP_FILE"] == str(run_dir / "fr" / "nccl_trace_rank_")


def test_a_value_the_user_set_wins(tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    p = profile(tmp_path, "backend: nccl\nenv: {TORCH_FR_BUFFER_SIZE: 50}\n")
    env = rank_envs(p, run_dir)[0]
    assert env["TORCH_FR_BUFFER_SIZE"] == "50" and env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"
    # set in the environment ddptui runs in: ddptui adds nothing, the rank inherits the user's own
    monkeypatch.setenv("TORCH_NCCL_DUMP_ON_TIMEOUT", "0")
    monkeypatch.setenv("TORCH_FR_BUFFER_SIZE", "7")
    env = rank_envs(profile(tmp_path, "backend: nccl\n"), run_dir)[0]
    assert "TORCH_NCCL_DUMP_ON_TIMEOUT" not in env and "TORCH_FR_BUFFER_SIZE" not in env
    assert env["TORCH_FR_DUMP_TEMP_FILE"].endswith("nccl_trace_rank_")
    # torch's older names for the same settings count as the user's choice too
    monkeypatch.delenv("TORCH_FR_BUFFER_SIZE")
    monkeypatch.setenv("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "/elsewhere/trace_")
    p = profile(tmp_path, "backend: nccl\nenv: {TORCH_NCCL_TRACE_BUFFER_SIZE: 10}\n")
    env = rank_envs(p, run_dir)[0]
    assert "TORCH_FR_BUFFER_SIZE" not in env and "TORCH_FR_DUMP_TEMP_FILE" not in env
    assert env["TORCH_NCCL_TRACE_BUFFER_SIZE"] == "10"


def test_the_rank_takes_the_socket_folder_out_of_what_its_children_inherit():
    env = {"DDPTUI": "1", "DDPTUI_SOCKETS": "/tmp/ddptui-1/abcd0123", "TORCH_FR_BUFFER_SIZE": "2000"}
    given = ddptui_scope.apply(ddptui_scope.user_env(env), env)
    assert given["DDPTUI_SOCKETS"] == "/tmp/ddptui-1/abcd0123"
    assert env == {"TORCH_FR_BUFFER_SIZE": "2000"}  # Flight Recorder itself stays on for what the rank starts


def test_dry_run_shows_the_variables(tmp_path):
    path = tmp_path / "nccl.yaml"
    path.write_text("workload: {builtin: ddp_mlp}\nbackend: nccl\n")
    cmd = [sys.executable, "-m", "ddptui.tui.cli", str(path), "--dry-run", "--runs-dir", str(tmp_path / "runs")]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=50).stdout
    assert "  env:  TORCH_FR_BUFFER_SIZE=2000\n" in out and "  env:  TORCH_NCCL_DUMP_ON_TIMEOUT=1\n" in out
    assert f"  env:  DDPTUI_SOCKETS=/tmp/ddptui-{os.getuid()}/" in out
    assert "/fr/nccl_trace_rank_\n" in out
    off = subprocess.run(cmd + ["--set", "flight_recorder=false"], cwd=ROOT, capture_output=True, text=True,
                         timeout=50).stdout
    assert "runner: torchrun" in off and "TORCH_FR" not in off and "DDPTUI_SOCKETS" not in off


# ---- the socket folder on disk

def test_the_socket_folder_is_made_private_and_removed(tmp_path):
    p = profile(tmp_path, "backend: nccl\n")
    run_dir = tmp_path / "runs" / "r1"
    run_dir.mkdir(parents=True)
    path, problem = fr_env.prepare(p, run_dir)
    try:
        assert problem is None and path == fr_env.socket_dir(run_dir)
        for d in (path, os.path.dirname(path)):
            st = os.lstat(d)
            assert stat.S_ISDIR(st.st_mode) and st.st_mode & 0o777 == 0o700 and st.st_uid == os.getuid()
        assert (run_dir / "fr").is_dir()  # NCCL's timeout dumps land there
    finally:
        fr_env.remove(path)
    assert not os.path.exists(path) and os.path.isdir(os.path.dirname(path))  # the user's folder stays
    assert fr_env.prepare(profile(tmp_path, "flight_recorder: false\n"), run_dir) == (None, None)


def test_the_socket_folder_names_its_engine(tmp_path):
    p = profile(tmp_path)
    run_dir = tmp_path / "runs" / "r2"
    run_dir.mkdir(parents=True)
    path, _ = fr_env.prepare(p, run_dir)
    try:
        import json
        owner = json.loads(Path(path, fr_env.OWNER).read_text())
        assert owner["pid"] == os.getpid() and owner["start"] == fr_env._proc_start(os.getpid())
        assert owner["run_dir"] == str(run_dir) and {k: owner[k] for k in fr_env.here()} == fr_env.here()
        assert not fr_env.engine_gone(owner, fr_env.here(), fr_env._proc_start)  # this live process: kept
        assert path not in fr_env.sweep_stale() and os.path.isdir(path)
    finally:
        fr_env.remove(path)


NOW = {"host": "h", "boot_id": "b1", "pidns": 7}
OWNER = {"pid": 41, "start": 1000, "run_dir": "/r", **NOW}


@pytest.mark.parametrize("owner, start_now, gone", [
    (OWNER, 1000, False),  # the engine runs: kept
    (OWNER, None, True),  # no process with that pid: its engine was killed
    (OWNER, 2500, True),  # the pid runs another process, started later
    ({**OWNER, "boot_id": "b0"}, 1000, True),  # the machine rebooted since: every process of then is gone
    ({**OWNER, "host": "other"}, None, False),  # another host's folder (a shared /tmp): not ours to judge
    ({**OWNER, "pidns": 9}, None, False),  # another pid namespace: its pids mean nothing here
    ({**OWNER, "pidns": None}, None, False),
    ({**OWNER, "start": None}, None, False),  # a record that cannot prove anything
    ({**OWNER, "pid": True}, None, False),
    ({**OWNER, "boot_id": None}, None, False),
    ("41", None, False), (None, None, False),
])
def test_a_folder_is_swept_only_when_its_engine_is_provably_dead(owner, start_now, gone):
    asked = []
    assert fr_env.engine_gone(owner, NOW, lambda pid: asked.append(pid) or start_now) is gone


# ---- the rank side's decisions (ddptui_fr, no torch)

GROUPS = {"0": ("default_pg", [0, 1]), "1": ("undefined", [0, 1])}


def summary(**status) -> dict:
    # as _dump_fr_trace_json(includeCollectives=False) gives it on gloo: strings, the default group's config under ''
    return {"version": "2.10", "pg_config": {"": {"desc": "", "name": "", "ranks": "[]"}},
            "pg_status": {pg: {"last_enqueued_collective": str(e), "last_completed_collective": str(c),
                               "last_started_collective": "-1"} for pg, (e, c) in status.items()}}


def test_progress_names_every_group_with_int_counts():
    got = ddptui_fr.progress(summary(**{"0": (4, -1)}), GROUPS)
    assert got == {"0": {"desc": "default_pg", "ranks": [0, 1], "enqueued": 4, "completed": 0},
                   "1": {"desc": "undefined", "ranks": [0, 1], "enqueued": 0, "completed": 0}}
    # without Python's names (no _world): pg_config's '' is gloo's default group, filed as '0' by the entries
    cfg = {"pg_config": {"": {"desc": "default_pg", "ranks": "[0, 1]"}}, "pg_status": {"0": {
        "last_enqueued_collective": "2", "last_completed_collective": "2"}}}
    assert ddptui_fr.progress(cfg, {}) == {"0": {"desc": "default_pg", "ranks": [0, 1], "enqueued": 2,
                                                 "completed": 2}}


def test_progress_files_a_groups_numbers_under_its_name_not_the_ranks_own_group_id():
    # measured on world 4 with new_group([0, 1]) then new_group([2, 3]): rank 2's pg_status says '1' for its pair,
    # whose name (and its entries' process_group) is '2'; torch's pg_names on rank 2: '0', '2' in creation order
    named = {"0": ("default_pg", [0, 1, 2, 3]), "2": ("undefined", [2, 3])}
    got = ddptui_fr.progress(summary(**{"0": (4, 4), "1": (5, 4)}), named)
    assert got == {"0": {"desc": "default_pg", "ranks": [0, 1, 2, 3], "enqueued": 4, "completed": 4},
                   "2": {"desc": "undefined", "ranks": [2, 3], "enqueued": 5, "completed": 4}}


ENTRIES = [
    {"collective_seq_id": 9, "process_group": ["0", "default_pg"], "profiling_name": "gloo:all_reduce",
     "input_sizes": [[72]], "input_dtypes": ["Float"], "is_p2p": False},
    {"collective_seq_id": 10, "process_group": ["0", "default_pg"], "profiling_name": "gloo:barrier",
     "input_sizes": [], "input_dtypes": [], "is_p2p": False},
    {"collective_seq_id": 3, "process_group": ["1", "undefined"], "profiling_name": "nccl:all_gather",
     "input_sizes": [[4, 2]], "input_dtypes": ["Half"], "is_p2p": False},
]


def test_the_frontier_is_the_groups_first_collective_not_completed():
    assert ddptui_fr.frontier(ENTRIES, "0", 9) == {"seq": 10, "op": "barrier", "sizes": [], "dtypes": [],
                                                   "backend": "gloo"}
    assert ddptui_fr.frontier(ENTRIES, "0", 8) == {"seq": 9, "op": "all_reduce", "sizes": [[72]], "dtypes": ["Float"],
                                                   "backend": "gloo"}
    assert ddptui_fr.frontier(ENTRIES, "1", 2)["op"] == "all_gather" and ddptui_fr.frontier(ENTRIES, "1", 2)[
        "backend"] == "nccl"
    assert ddptui_fr.frontier(ENTRIES, "0", 10) is None and ddptui_fr.frontier([], "0", 0) is None


class FakeRank:
    """Flight Recorder's answers over time, and how many full dumps were asked for."""

    def __init__(self) -> None:
        self.status: dict = {}
        self.named = dict(GROUPS)
        self.full_dumps = 0

    def watch(self) -> ddptui_fr.GroupChanges:
        def full():
            self.full_dumps += 1
            return {"entries": ENTRIES}
        return ddptui_fr.GroupChanges(lambda: self.named, lambda: summary(**self.status), full)


def test_a_report_only_when_numbers_change_and_one_dump_for_a_collective_left_pending():
    r = FakeRank()
    w = r.watch()
    first = w.look()
    assert set(first) == {"0", "1"} and first["0"]["frontier"] is None  # every group, once
    assert w.look() == {}  # nothing changed: nothing said
    r.status = {"0": (5, 5)}
    assert list(w.look()) == ["0"] and r.full_dumps == 0  # only the group that moved
    r.status = {"0": (10, 9)}
    assert w.look()["0"] == {"desc": "default_pg", "ranks": [0, 1], "enqueued": 10, "completed": 9,
                             "frontier": None}  # pending now, maybe only for a moment: no dump
    assert r.full_dumps == 0
    stuck = w.look()  # still pending one look later: one full dump names it
    assert stuck == {"0": {"desc": "default_pg", "ranks": [0, 1], "enqueued": 10, "completed": 9,
                           "frontier": {"seq": 10, "op": "barrier", "sizes": [], "dtypes": [], "backend": "gloo"}}}
    assert r.full_dumps == 1
    assert w.look() == {} and w.look() == {} and r.full_dumps == 1  # still stuck: no second dump
    r.status = {"0": (10, 10)}
    assert w.look()["0"]["frontier"] is None  # went on
    r.named["2"] = ("solo", [1])
    assert list(w.look()) == ["2"]  # a group made later
    r.named = {}  # destroy_process_group(): torch forgets the names, Flight Recorder keeps the numbers
    assert w.look() == {}


def test_a_full_dump_that_fails_is_no_report_and_is_not_retried_every_look():
    r = FakeRank()
    r.status = {"0": (3, 2)}
    calls = []

    def broken():
        calls.append(1)
        raise RuntimeError("no dump")
    w = ddptui_fr.GroupChanges(lambda: r.named, lambda: summary(**r.status), broken)
    w.look()
    with pytest.raises(RuntimeError):
        w.look()  # the thread's loop catches it
    assert w.look() == {} and len(calls) == 1  # tried again only once the numbers moved
    r.status = {"0": (4, 3)}
    w.look()
    with pytest.raises(RuntimeError):
        w.look()
    assert len(calls) == 2


def test_socket_paths_that_do_not_fit_a_unix_socket_are_refused():
    assert ddptui_fr.socket_path("/tmp/ddptui-0/abcd0123", 3) == "/tmp/ddptui-0/abcd0123/r3.sock"
    assert ddptui_fr.socket_path("/tmp/" + "x" * 100, 3) is None


def test_a_folder_someone_else_can_write_to_is_not_used(tmp_path):
    mine = tmp_path / "ddptui-me"
    mine.mkdir(mode=0o700)
    assert ddptui_fr.own_folder(str(mine / "run1"))  # made by the rank (another node), private
    assert os.lstat(mine / "run1").st_mode & 0o777 == 0o700
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    assert not ddptui_fr.own_folder(str(open_dir / "run1"))


def test_the_collectives_thread_never_speaks_for_the_rank_in_its_stacks():
    from ddptui.runners.evidence.hang_verdict import classify
    from ddptui.runners.evidence.stack_types import Frame, ThreadStack, is_helper

    loop = [Frame("Event.wait", "/usr/lib/python3.11/threading.py", 629, "signaled = self._cond.wait(timeout)"),
            Frame("_loop", "/x/runners/inject/ddptui_fr.py", 150, "if _exiting.wait(PERIOD):")]
    named = ThreadStack("ddptui-collectives", 0x7F01, None, loop)
    unnamed = ThreadStack("Thread 0x7f01", 0x7F01, None, loop)  # faulthandler or the debug server: no names
    user = ThreadStack("Thread 0x7f02", 0x7F02, None, [Frame("loop", "/w/x.py", 1, "")])
    assert is_helper(named) and is_helper(unnamed) and not is_helper(user)
    assert classify([unnamed, user]).thread == "Thread 0x7f02"


def test_the_loaded_libc10_is_found_in_the_process_maps():
    maps = ("7f00-7f10 r-xp 00000000 08:01 123 /venv/lib/python3.11/site-packages/torch/lib/libc10.so\n"
            "7f10-7f20 r-xp 00000000 08:01 124 /venv/lib/python3.11/site-packages/torch/lib/libc10_cuda.so\n"
            "7f20-7f30 rw-p 00000000 00:00 0 \n7f30-7f40 rw-p 00000000 00:00 0 [heap]\n")
    assert ddptui_fr.loaded_library(maps, "libc10.so") == "/venv/lib/python3.11/site-packages/torch/lib/libc10.so"
    assert ddptui_fr.loaded_library(maps, "libtorch.so") is None
    assert ddptui_fr.loaded_library("7f00-7f10 r-xp 00000000 08:01 9 /a dir/libc10.so\n", "libc10.so") == \
        "/a dir/libc10.so"
