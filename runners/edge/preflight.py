"""Checks run before a launch: what is known to fail, said in one line each with the fix, before any process starts."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..launch import mirage
from ..launch.profile.model import MirageOptions, Profile
from ..launch.registry import runner_for

ROCM_INDEX = "https://rocm.nightlies.amd.com/v2/gfx950-dcgpu/"
PROBE_TIMEOUT = 90.0

# Run by the workload's interpreter: does torch import, is it a ROCm build, is the ROCm SDK installed and unpacked?
_PROBE = r"""
import importlib.util, json, os, site, sys
out = {"torch": None, "torch_error": None, "hip": None, "rocm_sdk": False, "devel": None, "site": []}
dirs = list(getattr(site, "getsitepackages", lambda: [])())
try:
    dirs.append(site.getusersitepackages())
except Exception:
    pass
dirs += [p for p in sys.path if p.endswith("site-packages")]
out["site"] = sorted(set(d for d in dirs if os.path.isdir(d)))
for d in out["site"]:
    if os.path.isdir(os.path.join(d, "_rocm_sdk_devel")):
        out["devel"] = os.path.join(d, "_rocm_sdk_devel")
out["rocm_sdk"] = importlib.util.find_spec("rocm_sdk") is not None
try:
    import torch
    out["torch"] = torch.__version__
    out["hip"] = getattr(torch.version, "hip", None)
except Exception as e:
    out["torch_error"] = f"{type(e).__name__}: {e}".splitlines()[0][:300]
print("@probe " + json.dumps(out))
"""


@dataclass(frozen=True)
class Problem:
    severity: str  # "error" (the launch would fail: do not start) | "warning" (start, but say it)
    code: str
    message: str  # one line
    fix: str

    def __str__(self) -> str:
        return f"{self.severity}: [{self.code}] {self.message} -- fix: {self.fix}"


def errors(problems: list[Problem]) -> list[Problem]:
    return [p for p in problems if p.severity == "error"]


def _resolve(exe: str, cwd: str | None = None, path: str | None = None) -> str | None:
    if os.sep in exe:
        p = Path(exe) if os.path.isabs(exe) or cwd is None else Path(cwd) / exe
        return str(p) if p.is_file() and os.access(p, os.X_OK) else None
    return shutil.which(exe, path=path)


def check(profile: Profile) -> list[Problem]:
    problems = _generic(profile)
    if runner_for(profile.runner).emulated:
        problems += _mirage(profile)
    return problems


def _generic(profile: Profile) -> list[Problem]:
    out = []
    if profile.nproc < 1:
        out.append(Problem("error", "nproc", f"nproc is {profile.nproc}: a run needs at least one rank per node",
                           "set nproc to 1 or more (--set nproc=2)"))
    if profile.nnodes < 1:
        out.append(Problem("error", "nnodes", f"nnodes is {profile.nnodes}: a run needs at least one node",
                           "set nnodes to 1 or more"))
    w = profile.workload
    if w.command:
        if _resolve(w.command[0]) is None:
            out.append(Problem("error", "command-missing", f"command not found: {w.command[0]}",
                               "give workload.command an executable on PATH or an existing path"))
        return out
    if _resolve(w.python) is None:  # workload.venv is its bin/python: the loader checked it was there
        out.append(Problem("error", "python-missing", f"interpreter not found: {w.python}",
                           "fix workload.python (a path or a name on PATH) or use workload.venv"))
    else:
        out += _runs_python(profile)
    if not w.module and w.script_path and not Path(w.script_path).is_file():
        out.append(Problem("error", "script-missing", f"rank script not found: {w.script_path}",
                           "fix workload.script (relative to the profile's folder) or workload.builtin"))
    return out


# Run by the workload's interpreter before the ranks: that it is a Python at all (`python: /bin/false` exited 1 with
# no output, in every rank). -S: no site, the cheapest start (about 15 ms here).
_IS_PYTHON = "import sys; sys.stdout.write('@ddptui-python ' + sys.version.split()[0])"
IS_PYTHON_TIMEOUT = 30.0  # a start this slow (a machine far over its cores) is not taken as evidence of anything
_is_python_ok: set[tuple[str, int, int]] = set()  # (path, inode, mtime) of interpreters that ran the check


def _runs_python(profile: Profile) -> list[Problem]:
    python = profile.workload.python
    try:
        st = os.stat(python)
        key = (python, st.st_ino, st.st_mtime_ns)
    except OSError:
        key = None
    if key in _is_python_ok:
        return []
    try:
        said = run_bounded([python, "-S", "-c", _IS_PYTHON], {**os.environ, **profile.env}, IS_PYTHON_TIMEOUT)
        why = not_python(*said) if said is not None else None
    except OSError as e:  # e.g. a script whose #! names nothing
        said, why = None, f"it cannot be started ({e.strerror or e})"
    if why is None:
        if said is not None and key is not None:
            _is_python_ok.add(key)
        return []
    named = profile.workload.python_from or "ddptui's own interpreter"
    field = next((f for f in ("workload.venv", "DDPTUI_PYTHON") if f in named), "workload.python")
    return [Problem("error", "not-python", f"{named}: {python} did not run Python: {why}",
                    f"point {field} at the Python interpreter (with torch) the ranks should run on")]


def not_python(returncode: int | None, output: bytes) -> str | None:
    """Why the interpreter check's outcome shows no Python ran it (None: it did). returncode None: it went on
    writing something else and was stopped."""
    if returncode == 0 and output.startswith(b"@ddptui-python "):
        return None
    text = output.decode("utf-8", "replace").strip()
    first = text.splitlines()[0][:120] if text else ""
    if returncode is None:
        return f"it printed {first!r} instead of running the check"
    how = f"it was killed by {_signal(-returncode)}" if returncode < 0 else f"it exited {returncode}"
    return f"{how} with no output" if not first else f"{how}, printing {first!r}"


def _signal(num: int) -> str:
    import signal
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def run_bounded(argv: list[str], env: dict, timeout: float, cap: int = 4096) -> tuple[int | None, bytes] | None:
    """(exit code, its first `cap` bytes of stdout+stderr) of a short check; exit code None when it went on past
    `cap` bytes (stopped then); None when it ran out the timeout (no evidence either way). OSError: it cannot start."""
    import select
    import time
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env=env, start_new_session=True)
    assert proc.stdout is not None  # stdout=PIPE
    out, end = b"", time.monotonic() + timeout
    try:
        while len(out) < cap:
            left = end - time.monotonic()
            if left <= 0 or not select.select([proc.stdout], [], [], left)[0]:
                return None
            chunk = os.read(proc.stdout.fileno(), cap - len(out))
            if not chunk:
                break
            out += chunk
        else:
            return None if out.startswith(b"@ddptui-python ") else (None, out)
        try:
            return proc.wait(max(0.0, end - time.monotonic())), out
        except subprocess.TimeoutExpired:
            return None
    finally:
        if proc.poll() is None:  # not reaped: its pid, and so its group (its own session), is still ours
            os.killpg(proc.pid, 9)  # the check and anything it started (a wrapper's child)
        proc.wait()
        proc.stdout.close()


def _mirage(profile: Profile) -> list[Problem]:
    opts = profile.mirage
    out = _mirage_binary(profile, opts)
    per_node = profile.nproc
    if per_node > opts.gpus_per_node:
        out.append(Problem(
            "error", "mirage-duplicate-gpu",
            f"{per_node} ranks per node on {opts.gpus_per_node} emulated GPU(s): two ranks would pin one GPU "
            "and RCCL stops at the first collective (`Duplicate GPU detected` / ncclInvalidUsage)",
            f"give every rank its own GPU: --set mirage.gpus_per_node={per_node} (or lower nproc)"))
    if opts.in_process and per_node > 1:
        out.append(Problem(
            "error", "mirage-in-process",
            f"mirage.in_process with {per_node} ranks per node: each rank gets its own emulator with no shared "
            "GPU memory and ranks SIGSEGV/SIGABRT at start-up",
            "drop --in-process (--set mirage.in_process=false) so the default daemon emulator is used"))
    world = opts.num_nodes * per_node
    single_collective = profile.workload.builtin == "dist_smoke"  # the case known to work
    if profile.backend == "nccl" and world > 1 and not single_collective:
        out.append(Problem(
            "warning", "mirage-nccl-multi-gpu",
            f"backend nccl over {world} emulated GPUs: RCCL initialises and one collective completes, but DDP's "
            "repeated bucketed collectives are known to stall on a later one over the daemon emulator",
            "use backend gloo (the upstream runner's default) for multi-GPU runs; nccl works with one rank"))
    w = profile.workload
    if not w.command and not mirage.venv_of(profile):
        out.append(Problem(
            "warning", "mirage-no-venv",
            "no workload.venv: mirage finds rocjitsu through the active venv's `rocm-sdk` (the document's VENV)",
            "set workload.venv to the venv holding torch + rocm[libraries,devel] (--set workload.venv=.venv-mi350)"))
    if not w.command:
        out += _venv_probe(profile, opts)
    return out


def _mirage_binary(profile: Profile, opts: MirageOptions) -> list[Problem]:
    out = []
    exe = opts.command[0]
    ws = Path(opts.workspace)
    if not ws.is_dir():
        return [Problem("error", "mirage-workspace", f"mirage.workspace is not a folder: {ws}",
                        "point mirage.workspace at the mirage checkout (emulation/mirage) or drop it")]
    venv = mirage.venv_of(profile)
    path = os.environ.get("PATH", "")
    if venv:
        path = str(Path(venv) / "bin") + os.pathsep + path
    if _resolve(exe, str(ws), path) is None:
        if opts.via_cargo:
            fix = "install Rust (rustup) or use an installed mirage: --set mirage.command=[mirage]"
        else:
            fix = ("put mirage on PATH, or run it from the workspace build: "
                   "mirage.command: [cargo, run, --quiet, --] with mirage.workspace: <rocm-systems>/emulation/mirage")
        out.append(Problem("error", "mirage-not-found", f"{exe} not found (mirage.command = {list(opts.command)})", fix))
    if opts.via_cargo and not (ws / "Cargo.toml").is_file():
        out.append(Problem("error", "mirage-workspace", f"no Cargo.toml in mirage.workspace {ws}: `cargo run` "
                           "has no mirage to build there",
                           "set mirage.workspace to the mirage checkout (rocm-systems/emulation/mirage)"))
    return out


_probe_cache: dict[tuple[str, str | None], tuple[dict, dict[str, int]]] = {}


def _mtimes(dirs) -> dict[str, int]:
    out = {}
    for d in dirs:
        try:
            out[d] = os.stat(d).st_mtime_ns
        except OSError:
            out[d] = -1
    return out


def probe_python(python: str, cwd: str | None = None) -> dict | None:
    """What the interpreter can import; None if it could not even be asked.

    Kept while its site-packages folders are unchanged: a pip install or `rocm-sdk init` touches them.
    """
    key = (python, cwd)
    hit = _probe_cache.get(key)
    if hit is not None and _mtimes(hit[1]) == hit[1]:
        return hit[0]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    try:
        r = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=PROBE_TIMEOUT,
                           env=env, cwd=cwd, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in r.stdout.splitlines():
        if line.startswith("@probe "):
            info = json.loads(line[len("@probe "):])
            _probe_cache[key] = (info, _mtimes(info["site"]))
            return info
    return None


def _venv_probe(profile: Profile, opts: MirageOptions) -> list[Problem]:
    python = mirage.interpreter(profile)
    if _resolve(python) is None:
        return []  # already an error of its own
    venv = mirage.venv_of(profile) or str(Path(python).parent.parent)
    info = probe_python(python, opts.workspace)
    if info is None:
        return [Problem("warning", "probe-failed", f"could not ask {python} what it can import",
                        f"check that `{python} -c 'import torch'` runs")]
    out = []
    if info["torch"] is None:
        out.append(Problem("error", "torch-missing", f"{python} cannot import torch ({info['torch_error']})",
                           f"{venv}/bin/pip install --index-url {ROCM_INDEX} \"rocm[libraries,devel]\" torch numpy"))
    if not opts.require_rocm:
        return out
    if not info["rocm_sdk"]:
        out.append(Problem("error", "rocm-sdk-missing", f"the ROCm SDK (rocm_sdk) is not installed in {venv}: "
                           "torch.cuda.is_available() will be False and mirage has no rocjitsu",
                           f"{venv}/bin/pip install --index-url {ROCM_INDEX} \"rocm[libraries,devel]\" torch numpy"))
    elif info["devel"] is None:
        out.append(Problem("error", "rocm-sdk-init", f"no _rocm_sdk_devel in {venv}'s site-packages: "
                           "`rocm-sdk init` was not run, so rocjitsu's KMD interposer is missing",
                           f"{venv}/bin/rocm-sdk init"))
    if info["torch"] is not None and not info["hip"]:
        out.append(Problem("warning", "torch-not-rocm", f"torch {info['torch']} in {venv} is not a ROCm build: "
                           "torch.cuda.is_available() will be False on the emulated GPUs",
                           f"reinstall torch from {ROCM_INDEX} in that venv"))
    return out
