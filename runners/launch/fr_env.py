"""Flight Recorder in the ranks: the variables the runners add, and the per-run folder of the ranks' debug sockets
(with its owner, so a later ddptui can sweep the folders of engines that were killed)."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import stat
from collections.abc import Mapping
from pathlib import Path

from .profile.model import Profile

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
        _write_owner(path, run_dir)
    except OSError as e:
        return None, f"cannot make the ranks' debug socket folder {path}: {e.strerror or e}"
    return path, None


# ---- the folder's owner, and the sweep of folders whose engine was killed (SIGKILL: no handler removed them) ----
OWNER = "owner.json"


def _proc_start(pid: int) -> int | None:
    """The process's start time in clock ticks after boot (/proc/PID/stat field 22): with the boot it is unique to
    one process, where a pid is reused. None: no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()  # after the name, which may hold spaces and parentheses
        return int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def here() -> dict:
    """What makes a pid mean one process: this machine, its boot, its pid namespace."""
    out: dict = {"host": socket.gethostname(), "boot_id": None, "pidns": None}
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            out["boot_id"] = f.read().strip()
    except OSError:
        pass
    try:
        out["pidns"] = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        pass
    return out


def _write_owner(path: str, run_dir: Path | str) -> None:
    me = os.getpid()
    record = {"pid": me, "start": _proc_start(me), "run_dir": os.path.abspath(str(run_dir)), **here()}
    tmp = os.path.join(path, f".{OWNER}.{me}")
    with open(tmp, "w") as f:
        f.write(json.dumps(record) + "\n")
    os.replace(tmp, os.path.join(path, OWNER))  # whole or absent: a folder without its owner is never swept


def engine_gone(owner, now: dict, start_of) -> bool:
    """Whether the engine that made a socket folder is provably dead: its pid runs no process, or another process
    (started at another time), or the machine rebooted since. Anything unsure (no record, another host or pid
    namespace, fields missing) keeps the folder. start_of(pid): that pid's start time now, None if no process."""
    if not isinstance(owner, dict):
        return False
    pid, start = owner.get("pid"), owner.get("start")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0 or not isinstance(start, int):
        return False
    if owner.get("host") != now.get("host") or None in (owner.get("boot_id"), now.get("boot_id")):
        return False
    if owner["boot_id"] != now["boot_id"]:
        return True
    if owner.get("pidns") is None or owner.get("pidns") != now.get("pidns"):
        return False
    return start_of(pid) != start


def sweep_stale(keep: str | None = None) -> list[str]:
    """Remove this user's socket folders whose engine is provably dead (engine_gone), never `keep`; returns them."""
    parent = f"{SOCKETS_ROOT}/ddptui-{os.getuid()}"
    try:
        names = os.listdir(parent)
    except OSError:
        return []
    now, gone = here(), []
    for name in sorted(names):
        path = os.path.join(parent, name)
        if path == keep:
            continue
        try:
            st = os.lstat(path)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
                continue
            with open(os.path.join(path, OWNER)) as f:
                owner = json.loads(f.read(4096))
        except (OSError, ValueError, RecursionError):
            continue
        if engine_gone(owner, now, _proc_start):
            shutil.rmtree(path, ignore_errors=True)
            gone.append(path)
    return gone


def remove(path: str | None) -> None:
    """The run's socket folder, at its end (its parent stays: other runs of this user may be using it)."""
    if path:
        shutil.rmtree(path, ignore_errors=True)
