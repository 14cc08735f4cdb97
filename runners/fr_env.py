"""Flight Recorder in the ranks: the variables the runners add, and the per-run folder of the ranks' debug sockets."""
from __future__ import annotations

import hashlib
import os
import shutil
import stat
from pathlib import Path
from typing import Mapping

from .profile import Profile

BUFFER_SIZE = "2000"  # entries per rank: a full dump is ~1 MB and 55 ms to make (measured, torch 2.13 CPU)
SOCKETS = "DDPTUI_SOCKETS"  # the rank side's name (runners/inject/ddptui_fr.py) and ddptui_scope.ACTIVATION's
SOCKETS_ROOT = "/tmp"  # not $TMPDIR: a unix socket path must stay under 108 bytes, /tmp/ddptui-UID/8HEX/rN.sock
SUN_PATH_MAX = 107  # bytes of a unix socket path, its NUL not counted
# torch's name -> the older names torch also reads (a user who set one of those chose a value: ours must not win).
# TORCH_FR_BUFFER_SIZE / TORCH_FR_DUMP_TEMP_FILE: libtorch_cpu.so's strings (FlightRecorder); TORCH_NCCL_DUMP_ON_TIMEOUT:
# include/torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp (the CPU build has no NCCL code).
ALIASES = {
    "TORCH_FR_BUFFER_SIZE": ("TORCH_NCCL_TRACE_BUFFER_SIZE",),
    "TORCH_FR_DUMP_TEMP_FILE": ("TORCH_NCCL_DEBUG_INFO_TEMP_FILE",),
    "TORCH_NCCL_DUMP_ON_TIMEOUT": (),
}


def enabled(profile: Profile) -> bool:
    """Flight Recorder and the debug server: asked for, and not XLA (no Flight Recorder there)."""
    return profile.flight_recorder and "xla" not in (profile.runner, profile.backend, profile.device)


def uses_nccl(profile: Profile) -> bool:
    return profile.backend == "nccl" or profile.device == "cuda"


def socket_dir(run_dir: Path | str, uid: int | None = None) -> str:
    """/tmp/ddptui-UID/<8 hex of the run directory>: short, one per run, the same for whoever knows the run."""
    uid = os.getuid() if uid is None else uid
    tag = hashlib.blake2b(os.path.abspath(str(run_dir)).encode(), digest_size=4).hexdigest()
    return f"{SOCKETS_ROOT}/ddptui-{uid}/{tag}"


def nccl_dump_prefix(run_dir: Path | str) -> str:
    """Where NCCL's watchdog writes each rank's dump on a timeout (torch appends the rank)."""
    return str(Path(run_dir) / "fr" / "nccl_trace_rank_")


def rank_env(profile: Profile, run_dir: Path | str, environ: Mapping[str, str] | None = None,
             uid: int | None = None) -> dict[str, str]:
    """The variables ddptui adds to every rank for Flight Recorder; none that the user set (environ: the
    environment ddptui runs in; the profile's env wins over these anyway, base_env applies it after)."""
    if not enabled(profile):
        return {}
    environ = os.environ if environ is None else environ
    torch_vars = {"TORCH_FR_BUFFER_SIZE": BUFFER_SIZE}
    if uses_nccl(profile):
        torch_vars.update(TORCH_NCCL_DUMP_ON_TIMEOUT="1", TORCH_FR_DUMP_TEMP_FILE=nccl_dump_prefix(run_dir))
    user = set(environ) | set(profile.env)
    out = {k: v for k, v in torch_vars.items() if not ({k, *ALIASES[k]} & user)}
    out[SOCKETS] = socket_dir(run_dir, uid)
    return out


def prepare(profile: Profile, run_dir: Path) -> tuple[str | None, str | None]:
    """Before the ranks start: their socket folder (mode 0700, in a 0700 folder of this user). Returns (the
    folder or None, a problem in words or None); a folder that is not safely ours is not used."""
    if not enabled(profile):
        return None, None
    if uses_nccl(profile):
        (Path(run_dir) / "fr").mkdir(parents=True, exist_ok=True)
    path = socket_dir(run_dir)
    parent = os.path.dirname(path)
    try:
        os.makedirs(parent, mode=0o700, exist_ok=True)
        st = os.lstat(parent)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
            return None, f"{parent} is not a folder only this user can enter: no debug sockets for the ranks"
        os.makedirs(path, mode=0o700, exist_ok=True)
    except OSError as e:
        return None, f"cannot make the ranks' debug socket folder {path}: {e.strerror or e}"
    return path, None


def remove(path: str | None) -> None:
    """The run's socket folder, at its end (its parent stays: other runs of this user may be using it)."""
    if path:
        shutil.rmtree(path, ignore_errors=True)
