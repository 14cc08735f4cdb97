"""Profile loader properties: valid dicts round trip, garbage only ever gives ProfileError, unknown keys are located."""
from __future__ import annotations

import json
import string
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ddptui.runners.launch.profile import model as pmodel
from ddptui.runners.launch.profile import world as pworld
from ddptui.runners.launch import registry
from ddptui.runners.launch.profile.errors import ProfileError
from ddptui.runners.launch.profile.load import load_profile

pytestmark = [pytest.mark.any_python, pytest.mark.own_interpreter]

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# text YAML can carry: no NUL (rejected on purpose), no surrogates
TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=20)
NAME = TEXT.filter(lambda s: s and "/" not in s and s not in (".", ".."))
WORDS = st.lists(TEXT, min_size=1, max_size=4)
ENV = st.dictionaries(st.text(string.ascii_letters + string.digits + "_.-", min_size=1, max_size=10), TEXT, max_size=4)
POS = st.floats(min_value=1e-6, max_value=1e9, allow_nan=False, allow_infinity=False)
NONNEG = st.floats(min_value=0, max_value=1e9, allow_nan=False, allow_infinity=False)


@st.composite
def valid_profiles(draw):
    d = draw(st.fixed_dictionaries({"workload": st.fixed_dictionaries(
        {"command": WORDS}, optional={"args": st.lists(TEXT, max_size=3)})}, optional={
        "name": NAME, "description": TEXT, "runner": st.sampled_from(registry.NAMES),
        "nproc": st.integers(1, 64), "nnodes": st.integers(1, 8), "env": ENV,
        "backend": st.sampled_from(pmodel.BACKENDS), "device": st.sampled_from(pmodel.DEVICES),
        "steps": st.none() | st.integers(1, 10**6), "seed": st.integers(0, 2**64),
        "stall_after": st.just("auto") | POS | st.integers(1, 10**6), "startup_grace": POS, "agent_exit_grace": POS, "timeout": NONNEG,
        "on_stall": st.sampled_from(pmodel.ON_STALL),
        "master_addr": st.sampled_from(["127.0.0.1", "localhost", "127.0.0.2", "0.0.0.0"]),  # this machine's
        "master_port": st.just("auto") | st.integers(1, 65535), "replica_check": st.booleans(),
        "replica_check_every": st.integers(0, 10**6), "on_divergence": st.sampled_from(pmodel.ON_DIVERGENCE),
        "flight_recorder": st.booleans(),
        "max_restarts": st.just(0),  # more is refused with a wrapped command (it gives --max-restarts itself)
        "mirage": st.fixed_dictionaries({}, optional={
            "command": WORDS, "profile": TEXT, "gpus_per_node": st.integers(1, 16), "num_nodes": st.integers(1, 16),
            "in_process": st.booleans(), "env": ENV, "inner": st.sampled_from(pmodel.MIRAGE_INNER)}),
        "xla": st.fixed_dictionaries({}, optional={
            "pjrt_device": st.sampled_from(pmodel.PJRT_DEVICES), "num_devices": st.integers(1, 16),
            "async_client": st.booleans(), "thread_pool_size": st.none() | st.integers(1, 64)}),
    }))
    world = d.get("nproc", 2) * d.get("nnodes", 1)
    m, x = d.get("mirage", {}), d.get("xla", {})
    nodes = m.get("num_nodes", d.get("nnodes", 1))
    counts = [world, m.get("gpus_per_node", d.get("nproc", 2)) * nodes, d.get("nproc", 2) * nodes,
              x.get("num_devices", d.get("nproc", 2))]
    if max(counts) > pworld.default_max_world_size() or draw(st.booleans()):
        d["max_world_size"] = draw(st.integers(max(counts), pworld.WORLD_CEILING))  # a big run asked for on purpose
    if d.get("runner", "torchrun") == "torchrun":  # the torchrun runner wraps a torchrun command line, nothing else
        d["workload"]["command"] = ["torchrun", *d["workload"]["command"]]
    if d.get("runner") == "slurm":  # the command runs as each rank under srun; an srun/torchrun line would be wrapped
        d["workload"]["command"] = ["python", *d["workload"]["command"]]
        d["slurm"] = draw(st.fixed_dictionaries({}, optional={
            "submit": st.sampled_from(["auto", "sbatch"]), "partition": st.none() | TEXT, "account": st.none() | TEXT,
            "time": st.sampled_from(["10", "10:00", "1:00:00", "2-0", "1-02:03:04", "UNLIMITED"]),
            "port": st.just("auto") | st.integers(1, 65535),
            "sbatch_args": st.lists(st.sampled_from(["--exclusive", "--mem=1G", "--qos=normal"]), max_size=2),
            "srun_args": st.lists(st.sampled_from(["--exclusive", "--cpu-bind=none", "-u"]), max_size=2)}))
    if d.get("runner", "torchrun") != "env":  # the others choose their own (torchrun: the command is wrapped)
        for name, default in (("master_port", "auto"), ("master_addr", "127.0.0.1")):
            if d.get(name, default) != default:
                del d[name]
    if draw(st.booleans()):
        d["fault"] = draw(st.fixed_dictionaries({"kind": st.sampled_from(pmodel.FAULT_KINDS)}, optional={
            "rank": st.integers(0, world - 1), "step": st.integers(0, 10**6), "seconds": NONNEG}))
    return d


def expected(d: dict, source: Path) -> dict:
    """The resolved profile the contract promises for dict d (defaults filled in)."""
    nproc, nnodes = d.get("nproc", 2), d.get("nnodes", 1)
    num = (lambda v: v if v == "auto" else float(v))
    fault = None
    if "fault" in d:
        f = d["fault"]
        fault = {"kind": f["kind"], "rank": f.get("rank", 0), "step": f.get("step", 0),
                 "seconds": float(f.get("seconds", {"hang": 3600.0, "slow": 0.2}.get(f["kind"], 0.0)))}
    m, x, w, sl = d.get("mirage", {}), d.get("xla", {}), d["workload"], d.get("slurm", {})
    return {
        "rdzv_backend": "static", "rdzv_endpoint": None, "rdzv_id": None, "local_addr": None,
        "slurm": {"launch": "srun", "submit": sl.get("submit", "auto"), "partition": sl.get("partition"),
                  "time": sl.get("time"), "account": sl.get("account"), "port": sl.get("port", "auto"),
                  "sbatch_args": sl.get("sbatch_args", []), "srun_args": sl.get("srun_args", [])},
        "name": d.get("name", source.stem), "description": d.get("description", ""),
        "runner": d.get("runner", "torchrun"), "nproc": nproc, "nnodes": nnodes, "env": d.get("env", {}),
        "backend": d.get("backend", "auto"), "device": d.get("device", "cpu"), "steps": d.get("steps"),
        "seed": d.get("seed", 0), "stall_after": num(d.get("stall_after", "auto")),
        "startup_grace": float(d.get("startup_grace", 60)), "agent_exit_grace": float(d.get("agent_exit_grace", 15)),
        "on_stall": d.get("on_stall", "stop"),
        "timeout": float(d.get("timeout", 0)), "master_addr": d.get("master_addr", "127.0.0.1"),
        "master_port": d.get("master_port", "auto"), "replica_check": d.get("replica_check", True),
        "replica_check_every": d.get("replica_check_every", 100), "on_divergence": d.get("on_divergence", "warn"),
        "flight_recorder": d.get("flight_recorder", True), "max_restarts": d.get("max_restarts", 0),
        "fault": fault, "source": str(source), "world_size": nproc * nnodes,
        "max_world_size": d.get("max_world_size"),
        "workload": {"builtin": None, "script": None, "module": None, "command": w["command"],
                     "args": w.get("args", []), "python": sys.executable, "script_path": None,
                     "python_from": ""},
        "mirage": {"command": m.get("command", ["mirage"]), "workspace": str(source.parent),
                   "profile": m.get("profile", "mi350x"), "gpus_per_node": m.get("gpus_per_node", nproc),
                   "num_nodes": m.get("num_nodes", nnodes), "in_process": m.get("in_process", False),
                   "require_rocm": m.get("require_rocm", True),
                   "env": m.get("env", {}), "inner": m.get("inner", "torchrun")},
        "xla": {"pjrt_device": x.get("pjrt_device", "CPU"), "num_devices": x.get("num_devices", nproc),
                "async_client": x.get("async_client", False), "thread_pool_size": x.get("thread_pool_size"),
                "cache_dir": None},
    }


@pytest.mark.timeout(120)
@SETTINGS
@given(d=valid_profiles(), flow=st.booleans(), unicode=st.booleans())
def test_valid_profiles_round_trip(tmp_path, d, flow, unicode):
    path = tmp_path / "rt.yaml"
    # PyYAML's own dump of a raw NEL does not load back (str(d) would show it escaped, json keeps it raw)
    unicode = unicode and "\x85" not in json.dumps(d, ensure_ascii=False)
    path.write_text(yaml.safe_dump(d, default_flow_style=flow, allow_unicode=unicode, sort_keys=False))
    assert load_profile(path).to_json() == expected(d, path)


def _loads_or_profile_error(path: Path) -> None:
    try:
        load_profile(path)
    except ProfileError as e:
        assert "\n" not in str(e) and str(e)


VALID = """\
name: demo
nproc: 2
workload:
  command: [python, -c, "print(1)"]
  args: [--x, 1]
env: {A: 1}
fault: {kind: hang, rank: 1, step: 2}
mirage:
  gpus_per_node: 2
xla: {num_devices: 2}
steps: 10
"""


@pytest.mark.timeout(120)
@SETTINGS
@given(text=st.text(max_size=300))
def test_random_text_only_profile_error(tmp_path, text):
    path = tmp_path / "g.yaml"
    path.write_text(text)
    _loads_or_profile_error(path)


@pytest.mark.timeout(120)
@SETTINGS
@given(data=st.binary(max_size=300))
def test_random_bytes_only_profile_error(tmp_path, data):
    path = tmp_path / "b.yaml"
    path.write_bytes(data)
    _loads_or_profile_error(path)


PIECES = list(":-[]{},&*!|>'\"#%@`?~ \n\t") + ["<<", "---", "...", "!!int", "!!binary", "null", "true", "0x1",
                                              "1e3", ".inf", "&a", "*a", "\\x00", "9" * 5000]


@pytest.mark.timeout(120)
@SETTINGS
@given(data=st.data())
def test_mutated_yaml_only_profile_error(tmp_path, data):
    text = VALID
    for _ in range(data.draw(st.integers(1, 6))):
        i = data.draw(st.integers(0, len(text)))
        op = data.draw(st.sampled_from(["insert", "delete", "dupline"]))
        if op == "insert":
            text = text[:i] + data.draw(st.sampled_from(PIECES) | st.text(max_size=3)) + text[i:]
        elif op == "delete":
            text = text[:i] + text[i + data.draw(st.integers(1, 8)):]
        else:
            lines = text.splitlines(keepends=True) or [""]
            j = data.draw(st.integers(0, len(lines) - 1))
            text = "".join(lines[: j + 1] + lines[j:])
    path = tmp_path / "m.yaml"
    path.write_text(text)
    _loads_or_profile_error(path)


TOP_LINES = ["name: demo", "nproc: 2", "nnodes: 1", "env: {A: b}", "seed: 3", "fault: {kind: crash, rank: 0}",
             "xla: {num_devices: 2}", "steps: 5"]
WORKLOAD_BLOCK = ["workload:", "  command: [python, x.py]", "  args: [a, b]"]
KEY = st.from_regex(r"[a-z_][a-z0-9_]{0,15}", fullmatch=True)


@pytest.mark.timeout(120)
@SETTINGS
@given(key=KEY.filter(lambda k: k not in pmodel.TOP_KEYS), where=st.integers(0, len(TOP_LINES)))
def test_unknown_top_level_key_reported_at_its_line(tmp_path, key, where):
    lines = TOP_LINES[:where] + [f"{key}: 1"] + TOP_LINES[where:] + WORKLOAD_BLOCK
    path = tmp_path / "u.yaml"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    e = info.value
    assert (e.line, e.col, e.field) == (where + 1, 1, key)
    assert str(e).startswith(f"{path}:{where + 1}:1: unknown field '{key}'")


@pytest.mark.timeout(120)
@SETTINGS
@given(key=KEY.filter(lambda k: k not in pmodel.WORKLOAD_KEYS), where=st.integers(1, len(WORKLOAD_BLOCK)))
def test_unknown_nested_key_reported_at_its_line(tmp_path, key, where):
    block = WORKLOAD_BLOCK[:where] + [f"  {key}: 1"] + WORKLOAD_BLOCK[where:]
    path = tmp_path / "n.yaml"
    path.write_text("\n".join(TOP_LINES + block) + "\n")
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    line = len(TOP_LINES) + where + 1
    assert (info.value.line, info.value.col, info.value.field) == (line, 3, f"workload.{key}")
    assert str(info.value).startswith(f"{path}:{line}:3: unknown field 'workload.{key}'")


@pytest.mark.timeout(120)
@SETTINGS
@given(key=st.sampled_from(["nproc", "nnodes", "seed", "steps", "fault.step", "xla.num_devices"]),
       value=st.integers(-5, 10**6) | st.booleans() | st.none() | st.text(string.printable.strip(), max_size=8))
def test_override_values_validated_like_the_file(tmp_path, key, value):
    """--set key=V fails exactly when the same value in the file fails, with the same message body."""
    (tmp_path / "x.py").write_text("")
    base = "workload: {script: x.py}\nfault: {kind: hang}\n"
    literal = yaml.safe_dump([value], default_flow_style=True).strip()[1:-1]  # flow-safe spelling
    path = tmp_path / "o.yaml"
    path.write_text(base)
    head, _, last = key.rpartition(".")
    in_file = tmp_path / "f.yaml"
    if head:
        in_file.write_text(base.replace(f"{head}: {{", f"{head}: {{{last}: {literal}, ") if head == "fault"
                           else base + f"{head}: {{{last}: {literal}}}\n")
    else:
        in_file.write_text(base + f"{key}: {literal}\n")
    try:
        from_file = load_profile(in_file)
    except ProfileError as e:
        with pytest.raises(ProfileError) as info:
            load_profile(path, [f"{key}={literal}"])
        assert info.value.message == e.message and info.value.field == e.field
        assert str(info.value) == f"--set {key}={literal}: field '{e.field}': {e.message}"
    else:
        same = {"source": "", "name": ""}
        assert load_profile(path, [f"{key}={literal}"]).to_json() | same == from_file.to_json() | same


@pytest.mark.timeout(120)
@SETTINGS
@given(nproc=st.integers(1, 10**30), nnodes=st.integers(1, 10**6) | st.integers(1, 8),
       max_world=st.none() | st.integers(1, pworld.WORLD_CEILING))
def test_world_size_loads_exactly_when_within_the_bound(tmp_path, nproc, nnodes, max_world):
    path = tmp_path / "w.yaml"
    path.write_text(f"nproc: {nproc}\nnnodes: {nnodes}\nworkload: {{command: [x]}}\n"
                    + ("" if max_world is None else f"max_world_size: {max_world}\n"))
    limit = pworld.default_max_world_size() if max_world is None else max_world
    if nproc * nnodes <= limit:
        assert load_profile(path).world_size == nproc * nnodes
        return
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    e = info.value
    assert e.field in ("nproc", "nnodes") and e.line == (1 if e.field == "nproc" else 2)
    assert "\n" not in str(e) and " ranks, more than " in e.message


@pytest.mark.timeout(120)
@SETTINGS
@given(tag=st.from_regex(r"!(![a-z]+|[a-z]+)(/[a-z]+)?(:[a-z.]+)?", fullmatch=True).filter(
    lambda t: t not in ("!!map", "!!seq")), on_list=st.booleans())
def test_any_tag_on_a_mapping_or_list_is_refused(tmp_path, tag, on_list):
    path = tmp_path / "t.yaml"
    value = f"mirage: {{command: {tag} [a]}}" if on_list else f"env: {tag} {{A: b}}"
    path.write_text(f"workload: {{command: [x]}}\n{value}\n")
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    assert info.value.line == 2 and "unsupported tag" in info.value.message
    assert info.value.field == ("mirage.command" if on_list else "env")
