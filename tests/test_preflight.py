"""Preflight: every known-bad launch is named in one line with its fix, and a good one passes clean."""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddptui.runners.edge import preflight
from ddptui.runners.launch.profile.load import load_profile
from ddptui.runners.launch.rank_python import default_python
from tests.support.profiles import standin

pytestmark = pytest.mark.any_python

ROOT = Path(__file__).resolve().parent.parent
PROFILES = ROOT / "profiles"


def load(name: str, *overrides: str):
    return load_profile(PROFILES / f"{name}.yaml", list(overrides))


def codes(problems) -> dict[str, str]:
    return {p.code: p.severity for p in problems}


@pytest.fixture
def no_mirage(tmp_path, monkeypatch):
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", f"{empty}{os.pathsep}/usr/bin{os.pathsep}/bin")


def fake_venv(folder: Path, *, torch: bool, rocm_sdk: bool) -> Path:
    """A real venv; torch reached through a .pth to the ranks' interpreter's site-packages (the test's own, or
    DDPTUI_PYTHON's where the test runs on a Python without torch); ROCm SDK parts faked as folders."""
    where = subprocess.run([default_python(), "-c", "import json, site, sys; print(json.dumps([sys.base_prefix, "
                            "site.getsitepackages()]))"], capture_output=True, text=True, check=True, timeout=30)
    base_prefix, sites = json.loads(where.stdout)
    base = Path(base_prefix) / "bin" / "python3"
    subprocess.run([str(base), "-m", "venv", "--without-pip", str(folder)], check=True, timeout=60)
    sp = Path(subprocess.run([str(folder / "bin" / "python3"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True, timeout=30).stdout.strip())
    if torch:
        (sp / "ours.pth").write_text("\n".join(sites) + "\n")
    if rocm_sdk:
        (sp / "rocm_sdk").mkdir()
        (sp / "rocm_sdk" / "__init__.py").write_text("")
    return folder


def assert_one_line(problems):
    for p in problems:
        assert p.severity in ("error", "warning")
        assert p.message and "\n" not in p.message and p.fix and "\n" not in p.fix
        assert "\n" not in str(p)


@pytest.mark.timeout(60)
def test_standin_profiles_pass_clean(mirage_on_path):
    for name in ("mi350x-ddp", "mi350x-multinode"):
        problems = preflight.check(standin(load(name)))
        assert preflight.errors(problems) == [], problems
        assert problems == []


@pytest.mark.timeout(60)
def test_mirage_not_found(no_mirage):
    problems = preflight.check(standin(load("mi350x-ddp")))
    assert codes(problems)["mirage-not-found"] == "error"
    p = next(p for p in problems if p.code == "mirage-not-found")
    assert "cargo" in p.fix  # the workspace build is the other way to run it
    assert_one_line(problems)


@pytest.mark.timeout(60)
def test_cargo_form_needs_a_workspace(tmp_path, monkeypatch):
    fake_cargo = tmp_path / "bin" / "cargo"
    fake_cargo.parent.mkdir()
    fake_cargo.write_text("#!/bin/sh\nexit 0\n")
    fake_cargo.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake_cargo.parent}{os.pathsep}/usr/bin{os.pathsep}/bin")
    ws = tmp_path / "ws"
    ws.mkdir()
    p = standin(load("mi350x-ddp", "mirage.command=cargo run --quiet --", f"mirage.workspace={ws}"))
    assert codes(preflight.check(p)) == {"mirage-workspace": "error"}
    (ws / "Cargo.toml").write_text("[workspace]\n")
    assert preflight.check(p) == []
    fake_cargo.unlink()
    problems = preflight.check(p)
    assert codes(problems) == {"mirage-not-found": "error"}
    assert "rustup" in problems[0].fix


@pytest.mark.timeout(60)
def test_duplicate_gpu(mirage_on_path):
    problems = preflight.check(standin(load("mi350x-ddp", "mirage.gpus_per_node=1")))
    assert codes(problems) == {"mirage-duplicate-gpu": "error"}
    assert "Duplicate GPU detected" in problems[0].message
    assert "mirage.gpus_per_node=2" in problems[0].fix
    assert preflight.check(standin(load("mi350x-ddp", "nproc=1", "mirage.gpus_per_node=1"))) == []


@pytest.mark.timeout(60)
def test_in_process_with_several_ranks_per_node(mirage_on_path):
    problems = preflight.check(standin(load("mi350x-ddp", "mirage.in_process=true")))
    assert codes(problems) == {"mirage-in-process": "error"}
    assert "SIGSEGV" in problems[0].message and "--in-process" in problems[0].fix
    # one rank per node: nothing to share GPU memory with, so in-process is allowed
    assert preflight.check(standin(load("mi350x-multinode", "mirage.in_process=true"))) == []


@pytest.mark.timeout(60)
def test_nccl_over_several_gpus_warns_but_the_smoke_test_does_not(mirage_on_path):
    problems = preflight.check(standin(load("mi350x-ddp", "backend=nccl")))
    assert codes(problems) == {"mirage-nccl-multi-gpu": "warning"}
    assert preflight.errors(problems) == []
    assert preflight.check(standin(load("mi350x-smoke"))) == []


@pytest.mark.timeout(120)
def test_venv_without_torch(tmp_path, mirage_on_path):
    venv = fake_venv(tmp_path / "v", torch=False, rocm_sdk=False)
    problems = preflight.check(standin(load("mi350x-ddp", f"workload.venv={venv}")))
    assert codes(problems) == {"torch-missing": "error"}
    assert "ModuleNotFoundError" in problems[0].message
    assert f"{venv}/bin/pip install" in problems[0].fix
    assert_one_line(problems)


@pytest.mark.timeout(120)
def test_rocm_sdk_missing_then_not_initialised_then_ready(tmp_path, mirage_on_path):
    """Real mirage (require_rocm): the venv needs rocm[devel] and `rocm-sdk init`; torch must be a ROCm build."""
    missing = fake_venv(tmp_path / "a", torch=True, rocm_sdk=False)
    problems = preflight.check(load("mi350x-ddp", f"workload.venv={missing}"))
    assert codes(problems) == {"rocm-sdk-missing": "error", "torch-not-rocm": "warning"}
    assert "rocm[libraries,devel]" in problems[0].fix

    no_init = fake_venv(tmp_path / "b", torch=True, rocm_sdk=True)
    problems = preflight.check(load("mi350x-ddp", f"workload.venv={no_init}"))
    assert codes(problems) == {"rocm-sdk-init": "error", "torch-not-rocm": "warning"}
    assert problems[0].fix == f"{no_init}/bin/rocm-sdk init"
    assert "_rocm_sdk_devel" in problems[0].message

    # what `rocm-sdk init` does to site-packages; the cached probe must notice
    next(no_init.glob("lib/python*/site-packages")).joinpath("_rocm_sdk_devel").mkdir()
    problems = preflight.check(load("mi350x-ddp", f"workload.venv={no_init}"))
    assert codes(problems) == {"torch-not-rocm": "warning"}  # the test venv's torch is +cpu
    # the stand-in skips the ROCm checks altogether
    assert preflight.check(standin(load("mi350x-ddp", f"workload.venv={missing}"))) == []
    assert_one_line(problems)


@pytest.mark.timeout(60)
def test_interpreter_outside_any_venv(mirage_on_path):
    p = load("mi350x-ddp")
    bare = dataclasses.replace(p, workload=dataclasses.replace(p.workload, python=str(Path(sys.base_prefix) / "bin" / "python3")))
    problems = preflight.check(standin(bare))
    assert codes(problems) == {"mirage-no-venv": "warning", "torch-missing": "error"}
    assert_one_line(problems)


@pytest.mark.timeout(30)
def test_generic_checks_apply_to_every_runner(tmp_path):
    p = load("mi350x-ddp", "runner=torchrun")
    assert preflight.check(p) == []  # no mirage, no probe: only the generic checks
    w = p.workload
    bad_python = dataclasses.replace(p, workload=dataclasses.replace(w, python=str(tmp_path / "nope" / "python")))
    assert codes(preflight.check(bad_python)) == {"python-missing": "error"}
    bad_script = dataclasses.replace(p, workload=dataclasses.replace(w, script_path=str(tmp_path / "gone.py")))
    assert codes(preflight.check(bad_script)) == {"script-missing": "error"}
    zero = dataclasses.replace(p, nproc=0)
    assert codes(preflight.check(zero)) == {"nproc": "error"}
    cmd = dataclasses.replace(p, workload=dataclasses.replace(w, command=("no-such-launcher-xyz", "x")))
    assert codes(preflight.check(cmd)) == {"command-missing": "error"}
    assert_one_line(preflight.check(bad_python) + preflight.check(zero))


@pytest.mark.timeout(30)
def test_problem_renders_on_one_line():
    p = preflight.Problem("error", "x", "something broke", "do this")
    assert str(p) == "error: [x] something broke -- fix: do this"
    assert preflight.errors([p, preflight.Problem("warning", "y", "m", "f")]) == [p]


@pytest.mark.parametrize("rc, out, why", [
    (0, b"@ddptui-python 3.11.7", None),
    (1, b"", "it exited 1 with no output"),
    (0, b"", "it exited 0 with no output"),
    (2, b"/bin/sh: 0: Illegal option -S\n", "it exited 2, printing '/bin/sh: 0: Illegal option -S'"),
    (-11, b"", "it was killed by SIGSEGV with no output"),
    (None, b"y\ny\ny\n", "it printed 'y' instead of running the check"),
    (0, b"Python 2.7\n@ddptui-python", "it exited 0, printing 'Python 2.7'"),
])
def test_what_says_an_interpreter_ran_no_python(rc, out, why):
    assert preflight.not_python(rc, out) == why


@pytest.mark.timeout(30)
def test_the_interpreter_check_is_bounded_in_output_and_time():
    t0 = time.monotonic()
    rc, out = preflight.run_bounded(["/bin/sh", "-c", "while :; do echo y; done"], dict(os.environ), 20)
    assert rc is None and len(out) == 4096 and out.startswith(b"y\ny\n")  # stopped at the cap, not at the timeout
    assert preflight.run_bounded(["/bin/sh", "-c", "sleep 30"], dict(os.environ), 0.5) is None  # slow: no evidence
    assert time.monotonic() - t0 < 15


@pytest.mark.timeout(60)
@pytest.mark.parametrize("python", ["/bin/false", "/bin/true"])
def test_an_interpreter_that_runs_no_python_is_refused_naming_its_field(tmp_path, python):
    """Before: `workload.python: /bin/false` ended 'failed (exit 1)' with both ranks 'never started' and no reason."""
    path = tmp_path / "p.yaml"
    path.write_text(f"workload:\n  builtin: dist_smoke\n  python: {python}\n")
    r = subprocess.run([sys.executable, "-m", "ddptui.tui.cli", str(path), "--no-ui", "--runs-dir", str(tmp_path / "runs")],
                       capture_output=True, text=True, timeout=50, cwd=ROOT)
    assert r.returncode == 2, r.stdout[-2000:] + r.stderr
    (line,) = [ln for ln in r.stdout.splitlines() if "preflight error" in ln]
    assert f"ddptui: preflight error: {path}:3:11: field 'workload.python': {python} did not run Python: it exited " \
           f"{1 if python == '/bin/false' else 0} with no output (fix: point workload.python at" in line, line
    assert "status: preflight failed (exit 2)" in r.stdout
    (run,) = (tmp_path / "runs").iterdir()
    assert json.loads((run / "summary.json").read_text())["preflight"][0]["code"] == "not-python"
