"""Profile loader: exact one-line errors, defaults, overrides, lookup, ad-hoc profiles."""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddptui.runners.launch.profile import endpoint as pendpoint
from ddptui.runners.launch.profile import find as pfind
from ddptui.runners.launch.profile import model as pmodel
from ddptui.runners.launch.profile import tree as ptree
from ddptui.runners.launch.profile import workload as pworkload
from ddptui.runners.launch.profile import world as pworld
from ddptui.runners.launch import registry
from ddptui.runners.launch.profile.errors import ProfileError
from ddptui.runners.launch.profile.load import adhoc_profile, load_profile
from ddptui.runners.launch.profile.find import find_profile, list_profiles
from tests.support.profiles import BASE, error, write

pytestmark = [pytest.mark.any_python, pytest.mark.own_interpreter, pytest.mark.timeout(30)]


# ---------------------------------------------------------------- valid profiles

def test_defaults_are_resolved(tmp_path):
    path = write(tmp_path, BASE)
    p = load_profile(path)
    assert (p.name, p.description, p.runner, p.nproc, p.nnodes) == ("p", "", "torchrun", 2, 1)
    assert (p.backend, p.device, p.steps, p.seed) == ("auto", "cpu", None, 0)
    assert (p.stall_after, p.startup_grace, p.on_stall, p.timeout) == ("auto", 60.0, "stop", 0.0)
    assert (p.master_addr, p.master_port, p.replica_check, p.fault) == ("127.0.0.1", "auto", True, None)
    assert p.workload.script == "train.py"
    assert p.workload.script_path == str(tmp_path / "train.py")
    assert p.workload.python == sys.executable
    assert p.mirage.gpus_per_node == 2 and p.mirage.num_nodes == 1 and p.mirage.workspace == str(tmp_path)
    assert p.mirage.command == ("mirage",) and p.mirage.profile == "mi350x" and p.mirage.inner == "torchrun"
    assert p.xla.num_devices == 2 and p.xla.pjrt_device == "CPU" and p.xla.async_client is False
    assert p.source == str(path) and p.world_size == 2


def test_the_loader_takes_every_default_from_the_dataclasses(tmp_path, monkeypatch):
    """One home for a default: the field's declaration. A field left out resolves to what its dataclass declares."""
    p = load_profile(write(tmp_path, BASE))
    computed = {"name", "workload", "source", "mirage", "xla"}  # the file's name and folder, the sections below
    for f in dataclasses.fields(pmodel.Profile):
        if f.name not in computed:
            assert getattr(p, f.name) == pmodel.default(f.name), f.name
    follow = {"workspace", "gpus_per_node", "num_nodes", "num_devices"}  # the profile's folder, nproc, nnodes
    for section, cls in ((p.mirage, pmodel.MirageOptions), (p.xla, pmodel.XlaOptions)):
        for f in dataclasses.fields(cls):
            if f.name not in follow:
                assert getattr(section, f.name) == pmodel.default(f.name, cls), f.name
    # and the loader reads them from there: change a declaration, the loaded profile follows
    monkeypatch.setattr(pmodel.Profile.__dataclass_fields__["seed"], "default", 7)
    monkeypatch.setattr(pmodel.MirageOptions.__dataclass_fields__["profile"], "default", "mi300x")
    p = load_profile(write(tmp_path, BASE))
    assert p.seed == 7 and p.mirage.profile == "mi300x"


@pytest.mark.parametrize("kind", ["hang", "crash", "diverge", "slow"])
def test_fault_kinds_seconds_and_format_live_in_the_rank_side_file(tmp_path, kind):
    """_faults.py (run by the ranks, importing nothing of ddptui) holds the kinds, their seconds and DDP_FAULT's
    format; the loader's values are its values, and what the loader exports is what the ranks read back."""
    from ddptui.runners.workloads import _faults

    assert pmodel.FAULT_KINDS is _faults.KINDS and pmodel.FAULT_SECONDS is _faults.DEFAULT_SECONDS
    builtin = "workload: {builtin: ddp_mlp}\n"
    p = load_profile(write(tmp_path, builtin + f"fault: {{kind: {kind}, rank: 1, step: 3}}\n"))
    assert _faults.parse(p.rank_env()["DDP_FAULT"]) == _faults.DdpFault(kind, 1, 3, _faults.DEFAULT_SECONDS[kind])
    p = load_profile(write(tmp_path, builtin + f"fault: {{kind: {kind}, seconds: 1.25}}\n"))
    assert _faults.parse(p.fault.spec()) == _faults.DdpFault(kind, 0, 0, 1.25)


def test_full_profile_round_trips_through_json(tmp_path):
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    exe = tmp_path / "venv" / "bin" / "python"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    path = write(tmp_path, """\
        name: full
        description: every field
        runner: env
        nproc: 3
        nnodes: 2
        max_world_size: 100
        workload:
          script: train.py
          args: [--lr, 0.10, 010, true]
          venv: venv
        env: {A: 1, B: "x y", C: 010}
        backend: gloo
        device: auto
        steps: 50
        seed: 7
        stall_after: 2.5
        startup_grace: 30
        on_stall: dump
        timeout: 600
        master_addr: 127.0.0.2
        master_port: 29500
        replica_check: false
        fault: {kind: slow, rank: 5, step: 3}
        mirage:
          command: [cargo, run, --quiet, --]
          workspace: ws
          in_process: true
          env: {NCCL_P2P_DISABLE: 1}
          inner: env
        xla: {pjrt_device: TPU, num_devices: 4, async_client: true, thread_pool_size: 8, cache_dir: cache}
        """)
    p = load_profile(path)
    assert p.workload.args == ("--lr", "0.10", "010", "true")  # as written, not as YAML numbers
    assert p.workload.python == str(exe)
    assert p.env == {"A": "1", "B": "x y", "C": "010"}
    assert p.world_size == 6 and p.fault == pmodel.Fault("slow", 5, 3, 0.2) and p.max_world_size == 100
    assert p.mirage.gpus_per_node == 3 and p.mirage.num_nodes == 2
    assert p.mirage.workspace == str(tmp_path / "ws") and p.mirage.env == {"NCCL_P2P_DISABLE": "1"}
    assert p.xla == pmodel.XlaOptions("TPU", 4, True, 8, str(tmp_path / "cache"))
    d = p.to_json()
    assert json.loads(json.dumps(d)) == d
    assert d["world_size"] == 6 and d["mirage"]["command"] == ["cargo", "run", "--quiet", "--"]
    assert d["workload"]["args"] == ["--lr", "0.10", "010", "true"] and d["stall_after"] == 2.5
    assert p.rank_env() == {"A": "1", "B": "x y", "C": "010"}  # a user's script: no DDP_* knobs of ours


def test_rank_env_profile_env_wins_and_optional_vars(tmp_path):
    p = load_profile(write(tmp_path, "workload: {builtin: ddp_mlp}\nenv: {DDP_SEED: 99}\nfault: {kind: hang}\n"))
    assert p.rank_env() == {"DDP_BACKEND": "auto", "DDP_DEVICE": "cpu", "DDP_SEED": "99",
                            "DDP_FAULT": "hang:0:0:3600"}
    assert "DDP_STEPS" not in p.rank_env()
    p = load_profile(write(tmp_path, BASE + "env: {DDP_SEED: 99}\nbackend: gloo\nfault: {kind: hang}\n"))
    assert p.rank_env() == {"DDP_SEED": "99"}  # only what the profile's env sets explicitly


def test_workload_kinds(tmp_path, monkeypatch):
    wl = tmp_path / "wl"
    wl.mkdir()
    (wl / "ddp_mlp.py").write_text("")
    monkeypatch.setattr(pworkload, "WORKLOADS_DIR", wl)
    b = load_profile(write(tmp_path, "workload: {builtin: ddp_mlp}\n")).workload
    assert b.builtin == "ddp_mlp" and b.script_path == str(wl / "ddp_mlp.py")
    m = load_profile(write(tmp_path, "workload: {module: pkg.train, args: --a 1}\n")).workload
    assert m.module == "pkg.train" and m.script_path is None and m.args == ("--a", "1")
    c = load_profile(write(tmp_path, "workload: {command: python -c 'print(1)'}\n")).workload
    assert c.command == ("python", "-c", "print(1)")
    py = load_profile(write(tmp_path, "workload: {command: [x], python: sh}\n")).workload
    assert os.path.isabs(py.python) and os.path.basename(py.python) == "sh"


def test_merge_keys_and_aliases(tmp_path):
    p = load_profile(write(tmp_path, """\
        xla: &common {num_devices: 3}
        mirage:
          <<: {gpus_per_node: 5, num_nodes: 2}
          num_nodes: 4
        workload: {script: train.py, args: &a [x]}
        """))
    assert p.xla.num_devices == 3 and p.mirage.gpus_per_node == 5 and p.mirage.num_nodes == 4


# ---------------------------------------------------------------- errors, exact text

def test_error_attributes(tmp_path):
    path = write(tmp_path, BASE + "nproc: 0\n")
    e = error(path)
    assert (e.file, e.line, e.col, e.field) == (str(path), 3, 8, "nproc")
    assert e.message == "expected an integer >= 1, got 0"
    assert str(e) == f"{path}:3:8: field 'nproc': expected an integer >= 1, got 0"


@pytest.mark.parametrize("text, where, msg", [
    ("nproc: 0\n", "3:8", "field 'nproc': expected an integer >= 1, got 0"),
    ("nproc: true\n", "3:8", "field 'nproc': expected an integer >= 1, got true"),
    ("nproc: 2.0\n", "3:8", "field 'nproc': expected an integer >= 1, got 2.0"),
    ("nnodes: two\n", "3:9", "field 'nnodes': expected an integer >= 1, got 'two'"),
    ("runner: pbs\n", "3:9", "field 'runner': expected one of torchrun, env, xla, mirage, slurm, got 'pbs'"),
    ("runner: torchrum\n", "3:9",
     "field 'runner': expected one of torchrun, env, xla, mirage, slurm, got 'torchrum' (did you mean 'torchrun'?)"),
    ("backend: [gloo]\n", "3:10", "field 'backend': expected one of gloo, nccl, xla, auto, got a list"),
    ("device: gpu\n", "3:9", "field 'device': expected one of cpu, cuda, xla, auto, got 'gpu'"),
    ("steps: 0\n", "3:8", "field 'steps': expected an integer >= 1 or null, got 0"),
    ("seed: -1\n", "3:7", "field 'seed': expected an integer >= 0, got -1"),
    ("stall_after: 0\n", "3:14", "field 'stall_after': expected a number > 0 or 'auto', got 0"),
    ("stall_after: soon\n", "3:14", "field 'stall_after': expected a number > 0 or 'auto', got 'soon'"),
    ("startup_grace: .inf\n", "3:16", "field 'startup_grace': expected a number > 0, got inf"),
    ("on_stall: kill\n", "3:11", "field 'on_stall': expected one of wait, dump, stop, got 'kill'"),
    ("timeout: -5\n", "3:10", "field 'timeout': expected a number >= 0, got -5"),
    ("master_addr: 1\n", "3:14", "field 'master_addr': expected a string, got 1"),
    ("master_port: 0\n", "3:14", "field 'master_port': expected an integer in 1..65535 or 'auto', got 0"),
    ("master_port: 65536\n", "3:14",
     "field 'master_port': expected an integer in 1..65535 or 'auto', got 65536"),
    ("replica_check: maybe\n", "3:16", "field 'replica_check': expected true or false, got 'maybe'"),
    ("replica_check_every: -10\n", "3:22", "field 'replica_check_every': expected an integer >= 0, got -10"),
    ("on_divergence: halt\n", "3:16", "field 'on_divergence': expected one of warn, stop, got 'halt'"),
    ("name: a/b\n", "3:7", "field 'name': expected a non-empty name without '/', got 'a/b'"),
    ("env: [A]\n", "3:6", "field 'env': expected a mapping of NAME: value, got a list"),
    ("env:\n  A: ~\n", "4:6", "field 'env.A': expected a string (or number/boolean), got null"),
    ("fault: hang\n", "3:8", "field 'fault': expected a mapping, got 'hang'"),
    ("fault: {kind: hung}\n", "3:15",
     "field 'fault.kind': expected one of hang, crash, diverge, slow, got 'hung' (did you mean 'hang'?)"),
    ("fault: {rank: 1}\n", "3:8", "field 'fault.kind': missing, expected one of hang, crash, diverge, slow"),
    ("fault: {kind: hang, step: -1}\n", "3:27", "field 'fault.step': expected an integer >= 0, got -1"),
    ("fault: {kind: hang, rank: 2}\n", "3:27",
     "field 'fault.rank': expected an integer in 0..1 (world size 2*1), got 2"),
    ("fault: {kind: hang, seconds: x}\n", "3:30", "field 'fault.seconds': expected a number >= 0, got 'x'"),
    ("mirage: {gpus_per_node: 0}\n", "3:25", "field 'mirage.gpus_per_node': expected an integer >= 1, got 0"),
    ("mirage: {inner: xla}\n", "3:17", "field 'mirage.inner': expected one of torchrun, env, got 'xla'"),
    ("mirage: {command: []}\n", "3:19", "field 'mirage.command': expected a non-empty list of strings, got a list"),
    ("mirage: {in_process: 1}\n", "3:22", "field 'mirage.in_process': expected true or false, got 1"),
    ("xla: {pjrt_device: GPU}\n", "3:20", "field 'xla.pjrt_device': expected one of CPU, TPU, CUDA, got 'GPU'"),
    ("xla: {pjrt_device: cpu}\n", "3:20",
     "field 'xla.pjrt_device': expected one of CPU, TPU, CUDA, got 'cpu' (did you mean 'CPU'?)"),
    ("xla: {thread_pool_size: 0}\n", "3:25",
     "field 'xla.thread_pool_size': expected an integer >= 1 or null, got 0"),
    ("xla: 3\n", "3:6", "field 'xla': expected a mapping, got 3"),
    ("nprocs: 2\n", "3:1", "unknown field 'nprocs' (did you mean 'nproc'?)"),
    ("zzzzzz: 2\n", "3:1", "unknown field 'zzzzzz'"),
    ("fault:\n  kind: hang\n  rnak: 1\n", "5:3", "unknown field 'fault.rnak' (did you mean 'fault.rank'?)"),
    ("mirage: {gpus_per_nod: 1}\n", "3:10",
     "unknown field 'mirage.gpus_per_nod' (did you mean 'mirage.gpus_per_node'?)"),
    ("nproc: 2\nnproc: 3\n", "4:1", "duplicate field 'nproc' (first at line 3)"),
    ("seed: !!int abc\n", "3:7", "field 'seed': cannot read value: invalid literal for int() with base 10: 'abc'"),
    ("[a]: 1\n", "3:1", "expected a field name, got a list"),
])
def test_field_errors(tmp_path, text, where, msg):
    path = write(tmp_path, BASE + text)
    assert str(error(path)) == f"{path}:{where}: {msg}"


@pytest.mark.parametrize("text, where, msg", [
    ("nproc: 2\n", "1:1", "missing required field 'workload'"),
    ("workload: {args: [a]}\n", "1:11",
     "field 'workload': expected exactly one of builtin, script, module, command, got none"),
    ("workload:\n  script: train.py\n  module: m\n", "3:3",
     "field 'workload': expected exactly one of builtin, script, module, command, got script and module"),
    ("workload: train.py\n", "1:11", "field 'workload': expected a mapping, got 'train.py'"),
    ("workload: {scirpt: train.py}\n", "1:12", "unknown field 'workload.scirpt' (did you mean 'workload.script'?)"),
    ("workload: {module: 'pkg/train'}\n", "1:20", "field 'workload.module': expected a module name like pkg.train,"
                                                  " got 'pkg/train'"),
    ("workload: {command: []}\n", "1:21", "field 'workload.command': expected a non-empty list of strings, got a list"),
    ("workload: {command: [a, [b]]}\n", "1:25", "field 'workload.command[1]': expected a string, got a list"),
    ("workload: {command: 'a \"b'}\n", "1:21",
     "field 'workload.command': cannot split into words: No closing quotation"),
    ("workload: {script: train.py, args: {a: 1}}\n", "1:36",
     "field 'workload.args': expected a list of strings, got a mapping"),
    ("workload: {script: train.py, python: no-such-python-xyz}\n", "1:38",
     "field 'workload.python': interpreter 'no-such-python-xyz' not found on PATH"),
    ("workload: {script: train.py, python: x, venv: y}\n", "1:41",
     "field 'workload': expected at most one of python, venv, got both"),
    ("- a\n- b\n", "1:1", "expected a mapping of fields at the top level, got a list"),
    ("just text\n", "1:1", "expected a mapping of fields at the top level, got 'just text'"),
    ("nproc: [1, 2\nname: x\n", "2:5",
     "invalid YAML: expected ',' or ']', but got ':' (while parsing a flow sequence at line 1, column 8)"),
    ("a: b: c\n", "1:5", "invalid YAML: mapping values are not allowed here"),
    ("a: *nope\n", "1:4", "invalid YAML: found undefined alias 'nope'"),
    ("a: 1\n---\nb: 2\n", "2:1",
     "invalid YAML: but found another document (expected a single document in the stream at line 1, column 1)"),
    ("x: \"\x01\"\n", "1:5", "invalid YAML: special characters are not allowed (character 1)"),
    ("a: &a [*a]\n", "1:4", "field 'a[0]': recursive alias"),
    ("", "1:1", "empty profile, expected a mapping with at least 'workload'"),
    ("# only a comment\n", "1:1", "empty profile, expected a mapping with at least 'workload'"),
])
def test_document_errors(tmp_path, text, where, msg):
    path = write(tmp_path, text)
    assert str(error(path)) == f"{path}:{where}: {msg}"


def test_missing_script_is_relative_to_profile_folder(tmp_path, monkeypatch):
    sub = tmp_path / "sub"
    sub.mkdir()
    path = write(sub, "workload: {script: ../nope.py}\n")
    monkeypatch.chdir(sub)  # cwd must not matter
    assert str(error(path)) == f"{path}:1:20: field 'workload.script': file not found: {tmp_path / 'nope.py'}"
    (tmp_path / "nope.py").write_text("")
    monkeypatch.chdir("/")
    assert load_profile(path).workload.script_path == str(tmp_path / "nope.py")


def test_unknown_builtin_lists_available(tmp_path, monkeypatch):
    wl = tmp_path / "wl"
    wl.mkdir()
    for name in ("ddp_mlp", "dist_smoke", "_faults"):
        (wl / f"{name}.py").write_text("")
    monkeypatch.setattr(pworkload, "WORKLOADS_DIR", wl)
    path = write(tmp_path, "workload: {builtin: ddp_mpl}\n")
    assert str(error(path)) == (f"{path}:1:21: field 'workload.builtin': expected a built-in workload"
                                " (ddp_mlp, dist_smoke), got 'ddp_mpl' (did you mean 'ddp_mlp'?)")
    path = write(tmp_path, "workload: {builtin: _faults}\n")
    assert "got '_faults'" in str(error(path))


def test_builtins_folder_is_the_engines(tmp_path):
    assert pworkload.WORKLOADS_DIR == Path(__file__).resolve().parent.parent / "runners" / "workloads"


def test_interpreter_paths(tmp_path):
    path = write(tmp_path, "workload: {script: train.py, python: ./bin/py}\n")
    assert str(error(path)) == f"{path}:1:38: field 'workload.python': interpreter not found: {tmp_path / 'bin/py'}"
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "py").write_text("")
    assert str(error(path)) == (f"{path}:1:38: field 'workload.python': interpreter is not executable:"
                                f" {tmp_path / 'bin/py'}")
    (tmp_path / "bin" / "py").chmod(0o755)
    assert load_profile(path).workload.python == str(tmp_path / "bin" / "py")
    path = write(tmp_path, "workload: {script: train.py, venv: env}\n")
    assert str(error(path)) == f"{path}:1:36: field 'workload.venv': venv folder not found: {tmp_path / 'env'}"
    (tmp_path / "env").mkdir()
    assert str(error(path)) == (f"{path}:1:36: field 'workload.venv': no executable bin/python in venv"
                                f" {tmp_path / 'env'}")


def test_file_level_errors(tmp_path):
    missing = tmp_path / "none.yaml"
    assert str(error(missing)) == f"{missing}: no such file"
    assert str(error(tmp_path)) == f"{tmp_path}: is a folder, expected a YAML file"
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"name: x\nworkload: \xff\n")
    assert str(error(bad)) == f"{bad}:2:11: not UTF-8 text"


def test_fault_rank_checked_against_world_size(tmp_path):
    path = write(tmp_path, BASE + "nproc: 2\nnnodes: 2\nfault: {kind: crash, rank: 4}\n")
    assert str(error(path)) == (f"{path}:5:28: field 'fault.rank': expected an integer in 0..3"
                                " (world size 2*2), got 4")
    assert load_profile(path, ["fault.rank=3"]).fault == pmodel.Fault("crash", 3, 0, 0.0)


# ---------------------------------------------------------------- overrides

def test_overrides_apply_before_validation(tmp_path):
    path = write(tmp_path, BASE)
    p = load_profile(path, ["nproc=4", "fault.rank=1", "env.FOO=bar", "fault.kind=hang", "steps=null",
                            "stall_after=1.5", "master_port=29501", "env.N=007"])
    assert p.nproc == 4 and p.fault == pmodel.Fault("hang", 1, 0, 3600.0) and p.steps is None
    assert p.env == {"FOO": "bar", "N": "007"} and p.stall_after == 1.5 and p.master_port == 29501
    assert p.xla.num_devices == 4  # defaults derive from the overridden value


def test_override_replaces_workload_kind(tmp_path, monkeypatch):
    wl = tmp_path / "wl"
    wl.mkdir()
    (wl / "dist_smoke.py").write_text("")
    monkeypatch.setattr(pworkload, "WORKLOADS_DIR", wl)
    p = load_profile(write(tmp_path, BASE), ["workload.builtin=dist_smoke"])
    assert p.workload.builtin == "dist_smoke" and p.workload.script is None
    p = load_profile(write(tmp_path, BASE), ["workload.command=[echo, hi]"])
    assert p.workload.command == ("echo", "hi")


@pytest.mark.parametrize("item, msg", [
    ("nproc=0", "--set nproc=0: field 'nproc': expected an integer >= 1, got 0"),
    ("nproc", "--set nproc: expected key=value"),
    ("=3", "--set =3: expected key=value"),
    ("fault..rank=1", "--set fault..rank=1: expected key=value"),
    ("nprocs=4", "--set nprocs=4: unknown field 'nprocs' (did you mean 'nproc'?)"),
    ("fault.rnak=1", "--set fault.rnak=1: unknown field 'fault.rnak' (did you mean 'fault.rank'?)"),
    ("fault.rank=1", "--set fault.rank=1: field 'fault.kind': missing, expected one of hang, crash, diverge, slow"),
    ("nproc.x=1", "--set nproc.x=1: field 'nproc': expected a mapping to set 'x' in, got 2"),
    ("runner=[", "--set runner=[: field 'runner': invalid YAML value: expected the node content, but found"
                 " '<stream end>'"),
    ("seed=", "--set seed=: field 'seed': expected an integer >= 0, got null"),
])
def test_override_errors(tmp_path, item, msg):
    path = write(tmp_path, BASE + "nproc: 2\n")
    e = error(path, [item])
    assert str(e) == msg and e.file == f"--set {item}" and e.line is None


def test_override_error_on_file_value_keeps_file_location(tmp_path):
    path = write(tmp_path, BASE + "fault: {kind: hang, rank: 3}\n")
    assert load_profile(path, ["nproc=4"]).fault.rank == 3
    assert str(error(path, ["nproc=1"])) == (f"{path}:3:27: field 'fault.rank': expected an integer in 0..0"
                                             " (world size 1*1), got 3")


# ---------------------------------------------------------------- find / list

@pytest.fixture
def folders(tmp_path, monkeypatch):
    shipped, work = tmp_path / "shipped", tmp_path / "work"
    (work / "profiles").mkdir(parents=True)
    shipped.mkdir()
    for name in ("cpu-ddp", "hang", "xla-cpu"):
        (shipped / f"{name}.yaml").write_text(BASE)
    for name in ("hang", "mine"):
        (work / "profiles" / f"{name}.yaml").write_text(BASE)
    monkeypatch.setattr(pfind, "shipped_dir", lambda: shipped)
    monkeypatch.chdir(work)
    return shipped, work


def test_list_profiles_local_wins(folders):
    shipped, work = folders
    assert [p.resolve() for p in list_profiles()] == [
        shipped / "cpu-ddp.yaml", work / "profiles" / "hang.yaml", work / "profiles" / "mine.yaml",
        shipped / "xla-cpu.yaml"]


def test_find_profile_order(folders):
    shipped, work = folders
    assert find_profile("cpu-ddp").resolve() == shipped / "cpu-ddp.yaml"
    assert find_profile("hang").resolve() == work / "profiles" / "hang.yaml"
    (work / "direct.yaml").write_text(BASE)
    assert find_profile("direct.yaml").resolve() == work / "direct.yaml"
    assert find_profile(str(shipped / "xla-cpu.yaml")) == shipped / "xla-cpu.yaml"


def test_find_profile_not_found(folders):
    with pytest.raises(ProfileError) as info:
        find_profile("hnag")
    assert str(info.value) == "no profile named 'hnag' (did you mean 'hang'?); available: cpu-ddp, hang, mine, xla-cpu"
    with pytest.raises(ProfileError) as info:
        find_profile("missing.yaml")
    assert str(info.value) == "missing.yaml: no such file"


def test_shipped_dir_is_the_profiles_package():
    import ddptui.profiles as profiles

    assert pfind.shipped_dir() == Path(profiles.__file__).parent


@pytest.mark.parametrize("path", sorted(Path(__file__).resolve().parent.parent.joinpath("profiles").glob("*.yaml")),
                         ids=lambda p: p.stem)
def test_shipped_profiles_load(path):
    p = load_profile(path)
    assert p.source == str(path) and p.world_size >= 1


# ---------------------------------------------------------------- ad hoc

def test_adhoc_env_runner(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    p = adhoc_profile(["python", "train.py", "--x"])
    assert (p.name, p.runner, p.nproc, p.nnodes, p.source) == ("adhoc-train", "env", 1, 1, "<command line>")
    assert p.workload.command == ("python", "train.py", "--x") and p.mirage.workspace == str(tmp_path)
    p = adhoc_profile(["python", "train.py"], ["nnodes=2", "nproc=3", "fault.kind=crash", "fault.rank=5"])
    assert p.world_size == 6 and p.fault.rank == 5


def test_adhoc_torchrun_detection():
    p = adhoc_profile(["/usr/bin/torchrun", "--nproc-per-node=4", "--nnodes", "2", "t.py"])
    assert (p.runner, p.nproc, p.nnodes) == ("torchrun", 4, 2)
    p = adhoc_profile(["python", "-m", "torch.distributed.run", "--nproc_per_node", "3", "t.py"])
    assert (p.runner, p.nproc) == ("torchrun", 3)
    p = adhoc_profile(["torchrun", "--nproc-per-node=gpu", "t.py"], ["nproc=1"])
    assert (p.runner, p.nproc) == ("torchrun", 1)
    assert adhoc_profile(["python", "-m", "torch.distributed.launch"]).runner == "env"


def test_adhoc_errors():
    with pytest.raises(ProfileError) as info:
        adhoc_profile([])
    assert str(info.value) == "<command line>: expected a command after --"
    with pytest.raises(ProfileError) as info:
        adhoc_profile(["python"], ["nproc=0"])
    assert str(info.value) == "--set nproc=0: field 'nproc': expected an integer >= 1, got 0"


def test_import_is_light():
    code = "import sys, ddptui.runners.launch.profile.load; print(sorted(m for m in ('yaml', 'torch', 'textual') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=20,
                         cwd=Path(__file__).resolve().parent.parent)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# ---------------------------------------------------------------- bounds on what a profile may ask for

@pytest.fixture
def two_cores(monkeypatch):
    """The default world bound of a 2-core machine: 64 ranks."""
    monkeypatch.setattr(os, "cpu_count", lambda: 2)


def test_default_max_world_size_is_4_per_core_at_least_64(monkeypatch):
    assert [pworld.default_max_world_size(c) for c in (1, 2, 16, 17, 64)] == [64, 64, 64, 68, 256]
    monkeypatch.setattr(os, "cpu_count", lambda: None)  # unknown: the floor
    assert pworld.default_max_world_size() == 64


def test_world_problem_decisions():
    assert pworld.world_problem("", 64, 64, explicit=False) is None
    assert pworld.world_problem("nproc 8 x nnodes 2", 16, 8, explicit=True) == \
        "nproc 8 x nnodes 2 = 16 ranks, more than max_world_size 8"
    msg = pworld.world_problem("", 120, 64, explicit=False)
    assert msg.startswith("120 ranks, more than the 64 allowed by default on this machine")
    assert msg.endswith("set max_world_size: 120 (or --set max_world_size=120)")
    assert pworld.world_problem("", 65537, 64, explicit=False).endswith("max_world_size can allow at most 65536")
    assert "about 10^999 ranks" in pworld.world_problem("", 10**999 + 1, 64, explicit=False)  # str() would raise
    assert "10^" not in pworld.world_problem("", 10**22, 64, explicit=False)


def test_world_size_bound_is_located_and_overridable(tmp_path, two_cores):
    assert load_profile(write(tmp_path, BASE + "nproc: 64\n")).world_size == 64
    path = write(tmp_path, BASE + "nproc: 40\nnnodes: 3\n")
    e = error(path)
    assert (e.line, e.col, e.field) == (3, 8, "nproc")
    assert e.message.startswith("nproc 40 x nnodes 3 = 120 ranks, more than the 64 allowed by default")
    assert load_profile(path, ["max_world_size=120"]).world_size == 120
    e = error(path, ["max_world_size=100"])
    assert str(e) == f"{path}:3:8: field 'nproc': nproc 40 x nnodes 3 = 120 ranks, more than max_world_size 100"
    e = error(write(tmp_path, BASE + "nnodes: 100000\n"))  # the factor that is too big, where it was written
    assert (e.line, e.col, e.field) == (3, 9, "nnodes")
    e = error(write(tmp_path, BASE + "max_world_size: 65537\n"))
    assert e.message == "expected an integer in 1..65536 or null, got 65537"
    big = write(tmp_path, BASE + "nproc: 200\nmax_world_size: 200\n")
    assert load_profile(big).max_world_size == 200 and load_profile(big).to_json()["max_world_size"] == 200


def test_slurm_world_is_bounded_per_node_not_by_this_machines_cores(tmp_path, two_cores):
    slurm = "name: t\nrunner: slurm\nworkload: {builtin: ddp_mlp}\n"
    assert load_profile(write(tmp_path, slurm + "nproc: 8\nnnodes: 64\n")).world_size == 512  # 64 nodes' ranks
    e = error(write(tmp_path, slurm + "nproc: 65\nnnodes: 2\n"))  # one node's ranks: still this machine's bound
    assert e.field == "nproc" and e.message.startswith("65 ranks, more than the 64 allowed by default")
    e = error(write(tmp_path, slurm + "nproc: 64\nnnodes: 2000\n"))
    assert e.field == "nnodes" and "more than max_world_size 65536" in e.message


def test_world_size_bound_on_many_cores(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 32)
    assert load_profile(write(tmp_path, BASE + "nproc: 128\n")).world_size == 128
    assert "more than the 128 allowed" in error(write(tmp_path, BASE + "nproc: 129\n")).message


@pytest.mark.parametrize("text, where, field", [
    ("xla: {num_devices: 65}\n", "3:20", "xla.num_devices"),
    ("mirage: {gpus_per_node: 33, num_nodes: 2}\n", "3:25", "mirage.gpus_per_node"),
    ("nproc: 4\nmirage: {num_nodes: 17}\n", "4:21", "mirage.num_nodes"),  # 4 ranks on each of mirage's nodes
])
def test_runner_counts_are_bounded_too(tmp_path, two_cores, text, where, field):
    path = write(tmp_path, BASE + text)
    e = error(path)
    assert str(e).startswith(f"{path}:{where}: field '{field}': ") and "more than the 64 allowed" in e.message


def test_huge_world_from_override_and_command(tmp_path, two_cores):
    e = error(write(tmp_path, BASE), ["nproc=99999999999999999999999"])
    assert str(e).startswith("--set nproc=99999999999999999999999: field 'nproc': nproc 99999999999999999999999"
                             " x nnodes 1 = 99999999999999999999999 ranks, more than the 64")
    with pytest.raises(ProfileError) as info:
        adhoc_profile(["torchrun", "--nproc_per_node=100000", "t.py"])
    assert str(info.value).startswith("<command line>: field 'nproc': nproc 100000 x nnodes 1 = 100000 ranks")
    assert adhoc_profile(["torchrun", "--nproc_per_node=100", "t.py"], ["max_world_size=100"]).nproc == 100


@pytest.mark.parametrize("field", ["timeout", "startup_grace", "stall_after"])
def test_numbers_past_float_range_are_field_errors(tmp_path, field):
    path = write(tmp_path, BASE + f"{field}: 1{'0' * 400}\n")
    e = error(path)  # was: OverflowError from math.isfinite
    assert (e.line, e.field) == (3, field) and e.message.startswith("expected a number") and "got 1000" in e.message
    e = error(write(tmp_path, BASE + f"fault: {{kind: slow, seconds: 1{'0' * 400}}}\n"))
    assert e.field == "fault.seconds" and e.message.startswith("expected a number >= 0")


# ---------------------------------------------------------------- YAML tags on mappings and lists

@pytest.mark.parametrize("text, where, field, tag", [
    ("env: !!python/object:os.system {A: 1}\n", "3:6", "env", "python/object:os.system on a mapping"),
    ("workload: !!python/object/apply:os.system {script: train.py}\n", "1:11", "workload",
     "python/object/apply:os.system on a mapping"),
    ("fault: !!python/object:x\n  kind: hang\n", "3:8", "fault", "python/object:x on a mapping"),
    ("env: !!set {A: null}\n", "3:6", "env", "set on a mapping"),
    ("env: !!omap [{A: 1}]\n", "3:6", "env", "omap on a list"),
    ("mirage: {command: !!python/tuple [a, b]}\n", "3:19", "mirage.command", "python/tuple on a list"),
    ("env: {<<: !!python/object:x {A: 1}}\n", "3:11", "env", "python/object:x on a mapping"),  # a merge source
    ("env: {<<: [{B: 2}, !!python/object:x {A: 1}]}\n", "3:20", "env", "python/object:x on a mapping"),
    ("env: {<<: !!python/list [{A: 1}]}\n", "3:11", "env", "python/list on a list"),
    ("env: {<<: {<<: !!python/object:y {A: 1}}}\n", "3:16", "env", "python/object:y on a mapping"),  # nested
])
def test_tags_on_mappings_and_lists_are_errors(tmp_path, text, where, field, tag):
    path = write(tmp_path, BASE + text if not text.startswith("workload") else text)
    name, _, kind = tag.partition(" on a ")
    assert str(error(path)) == (f"{path}:{where}: field '{field}': cannot read value:"
                                f" unsupported tag 'tag:yaml.org,2002:{name}' on a {kind}")


def test_tag_on_a_field_name_is_an_error_and_plain_tags_load(tmp_path):
    path = write(tmp_path, BASE + "!!python/object:os.system nproc: 2\n")
    assert str(error(path)) == (f"{path}:3:1: cannot read field name: could not determine a constructor for the"
                                " tag 'tag:yaml.org,2002:python/object:os.system'")
    p = load_profile(write(tmp_path, BASE + "env: !!map {A: !!str 1}\nmirage: {command: !!seq [m]}\n"))
    assert p.env == {"A": "1"} and p.mirage.command == ("m",)


# ---------------------------------------------------------------- input size

def test_file_over_the_size_bound_is_refused_unread(tmp_path, monkeypatch):
    path = tmp_path / "big.yaml"
    with open(path, "wb") as fh:
        fh.truncate(50 * 1024 * 1024)  # sparse: stat says 50 MB
    reads = []
    real_open = open
    monkeypatch.setattr("builtins.open", lambda *a, **k: reads.append(a) or real_open(*a, **k))
    e = error(path)
    assert str(e) == (f"{path}: profile too large: 52428800 bytes, at most 65536"
                      " (a profile is a few hundred bytes of YAML)")
    assert reads == []  # refused from the stat alone


def test_file_at_the_size_bound_loads(tmp_path):
    text = BASE + "# pad\n" * 1000
    text += "#" * (ptree.MAX_PROFILE_BYTES - len(text) - 1) + "\n"
    path = write(tmp_path, text)
    assert path.stat().st_size == ptree.MAX_PROFILE_BYTES and load_profile(path).workload.script == "train.py"
    path.write_text(text + "\n")
    assert "profile too large: 65537 bytes" in str(error(path))


def test_not_a_regular_file(tmp_path):
    os.mkfifo(tmp_path / "fifo.yaml")  # opening it would block until a writer came
    assert str(error(tmp_path / "fifo.yaml")) == f"{tmp_path / 'fifo.yaml'}: not a regular file, expected a YAML file"
    assert str(error(Path("/dev/zero"))) == "/dev/zero: not a regular file, expected a YAML file"
    assert find_profile("/dev/zero") == Path("/dev/zero")  # handed on, so the loader says what it is


def test_yaml_node_bound_stops_the_parse(tmp_path):
    path = write(tmp_path, BASE + "env: [" + "1," * 30000 + "1]\n")
    t0 = time.process_time()
    e = error(path)
    assert time.process_time() - t0 < 5  # composing stops at the bound (all 30,000 took ~1 s more)
    assert (e.line, e.field) == (3, None) and e.message == "profile too large: more than 20000 YAML values"
    assert e.col == 7 + 2 * (ptree._MAX_NODES - 7)  # the node past the bound (7 came before the list's items)


@pytest.mark.parametrize("nested, where", [
    ("env: " + "[" * 30000 + "]" * 30000, "3:70"),  # the scanner alone took ~5 s on a run of brackets
    ("env: " + "{a: " * 10000 + "1" + "}" * 10000, "3:259"),
    ("env:\n" + "".join(" " * (i + 1) + f"k{i}:\n" for i in range(100)) + " " * 101 + "v", "67:65"),
], ids=["brackets", "braces", "blocks"])
def test_nesting_bound_stops_the_parse(tmp_path, nested, where):
    path = write(tmp_path, BASE + nested + "\n")
    t0 = time.process_time()
    e = error(path)
    assert time.process_time() - t0 < 2
    assert str(e) == f"{path}:{where}: profile too deeply nested: more than 64 levels"
    e = error(write(tmp_path, BASE), ["env.A=" + "[" * 100 + "]" * 100])
    assert e.field == "env.A" and e.message == "value too deeply nested: more than 64 levels"


def test_alias_expansion_is_bounded(tmp_path):
    laughs = "a0: &a0 [1,1,1,1,1,1,1,1,1,1]\n" + "".join(
        f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 10))  # 10^10 values expanded
    t0 = time.process_time()
    e = error(write(tmp_path, BASE + laughs))
    assert time.process_time() - t0 < 5
    assert e.message == "profile too large or too deeply nested"


def test_override_values_are_bounded(tmp_path):
    path = write(tmp_path, BASE)
    e = error(path, ["env.A=" + "x" * (ptree.MAX_PROFILE_BYTES + 1)])
    assert str(e) == f"--set env.A={'x' * 34}...: override too large: 65543 characters, at most 65536"
    e = error(path, ["workload.args=[" + "a," * 20001 + "a]"])
    assert e.field == "workload.args" and e.message == "value too large: more than 20000 YAML values"


# ---------------------------------------------------------------- master_addr / master_port mean what they say

def test_rendezvous_problem_decisions():
    assert registry.runner_for("torchrun").rendezvous_problem("master_port", wrapped_command=False) is None
    assert registry.runner_for("env").rendezvous_problem("master_addr", wrapped_command=True) is None
    assert registry.runner_for("mirage").rendezvous_problem("master_port", wrapped_command=False) == (
        "mirage picks the rendezvous itself (it exports MASTER_ADDR/MASTER_PORT to the ranks); remove master_port")
    assert registry.runner_for("xla").rendezvous_problem("master_addr", wrapped_command=False).endswith("; remove master_addr")
    assert "--master-addr/--master-port or --rdzv-endpoint instead of master_port" in \
        registry.runner_for("torchrun").rendezvous_problem("master_port", wrapped_command=True)


def test_unbindable_addresses():
    assert pendpoint.unbindable("127.0.0.1") is None and pendpoint.unbindable("localhost") is None
    assert pendpoint.unbindable("192.0.2.77").endswith("where every rank runs: Cannot assign requested address")
    assert pendpoint.unbindable("no-such-host.invalid").startswith("cannot listen on 'no-such-host.invalid'")
    assert pendpoint.unbindable("a" * 70 + ".example") is not None  # idna refuses a 70-character label


@pytest.mark.parametrize("text, where, words", [
    ("runner: mirage\nmaster_port: 29500\n", "4:14", "mirage picks the rendezvous itself"),
    ("runner: xla\nmaster_port: 29500\n", "4:14", "the xla runner uses no rendezvous"),
    ("runner: mirage\nmaster_addr: 10.0.0.5\n", "4:14", "remove master_addr"),
    ("master_addr: 192.0.2.77\n", "3:14", "cannot listen on '192.0.2.77' on this machine"),
    ("runner: env\nmaster_addr: no-such-host.invalid\n", "4:14", "cannot listen on 'no-such-host.invalid'"),
])
def test_rendezvous_a_runner_would_ignore_or_cannot_use_is_an_error(tmp_path, text, where, words):
    path = write(tmp_path, BASE + text)
    e = error(path)
    assert str(e).startswith(f"{path}:{where}: field '{e.field}': ") and words in e.message
    assert e.field == ("master_port" if "master_port" in text else "master_addr")


def test_default_rendezvous_is_fine_everywhere(tmp_path):
    for runner in registry.NAMES:  # written out but unchanged: nothing is ignored
        p = load_profile(write(tmp_path, BASE + f"runner: {runner}\nmaster_port: auto\nmaster_addr: 127.0.0.1\n"))
        assert (p.master_addr, p.master_port) == ("127.0.0.1", "auto")


def test_rendezvous_of_a_wrapped_torchrun_command_is_an_error():
    with pytest.raises(ProfileError) as info:
        adhoc_profile(["torchrun", "--standalone", "t.py"], ["master_port=29500"])
    assert str(info.value).startswith("--set master_port=29500: field 'master_port': the wrapped torchrun command")
    assert adhoc_profile(["python", "t.py"], ["master_port=29500"]).master_port == 29500  # env runner: used


def test_single_node_torchrun_uses_the_profiles_rendezvous(tmp_path):
    from ddptui.runners.launch.torchrun import plan, rendezvous_args

    standalone = load_profile(write(tmp_path, BASE))
    assert rendezvous_args(standalone, 0, 1234) == ["--standalone"]
    fixed = load_profile(write(tmp_path, BASE + "master_port: 29511\n"))
    static = ["--nnodes", "1", "--node-rank", "0", "--master-addr", "127.0.0.1", "--master-port", "29511"]
    assert rendezvous_args(fixed, 0, 29511) == static
    addr = load_profile(write(tmp_path, BASE + "master_addr: 127.0.0.2\n"))
    assert rendezvous_args(addr, 0, 4321)[-4:] == ["--master-addr", "127.0.0.2", "--master-port", "4321"]
    two = load_profile(write(tmp_path, BASE + "nnodes: 2\n"))
    assert rendezvous_args(two, 1, 4321)[:4] == ["--nnodes", "2", "--node-rank", "1"]
    p = plan(fixed, tmp_path / "run", 29511)
    assert p.procs[0].argv[3:11] == tuple(static)
    assert any("static rendezvous at 127.0.0.1:29511" in n for n in p.notes)


def test_a_command_workload_without_a_runner_runs_as_the_runner_that_can_run_it(tmp_path):
    plain = load_profile(write(tmp_path, "workload: {command: [python, train.py]}\n"))
    assert plain.runner == "env"
    wrapped = load_profile(write(tmp_path, "workload: {command: [torchrun, --nproc-per-node, 2, train.py]}\n"))
    assert wrapped.runner == "torchrun"


def test_the_torchrun_runner_refuses_a_command_it_cannot_wrap_at_its_line(tmp_path):
    path = write(tmp_path, "workload: {command: [python, train.py]}\nrunner: torchrun\n")
    with pytest.raises(ProfileError) as e:
        load_profile(path)
    assert str(e.value).startswith(f"{path}:2:9: field 'runner': the torchrun runner wraps a torchrun command line")
    with pytest.raises(ProfileError) as e:
        load_profile(write(tmp_path, "workload: {command: [python, train.py]}\n"), ["runner=torchrun"])
    assert str(e.value).startswith("--set runner=torchrun: field 'runner':")
