"""Lists a Slurm job's processes on one node as JSON; stdlib only, so `srun --overlap` runs it there as `python3 -S -c`."""
# This file is both a module (attach_find reads its text) and the program srun runs on each node of the job:
# `python3 -S -c <this file's text> JOB_ID` prints {"host": ...} then one JSON line per process whose environment has
# SLURM_JOB_ID=JOB_ID (this probe's own step left out). Keep it to the standard library and Python 3.8.
from __future__ import annotations

import json
import os
import socket
import stat
import sys

KEEP = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "TORCHELASTIC_RUN_ID", "MASTER_ADDR",
        "MASTER_PORT", "SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS",
        "SLURMD_NODENAME")


def _environ(pid: str) -> dict:
    with open(f"/proc/{pid}/environ", "rb") as f:
        data = f.read()
    out = {}
    for item in data.split(b"\0"):
        k, sep, v = item.partition(b"=")
        if sep:
            out[k.decode("utf-8", "replace")] = v.decode("utf-8", "replace")
    return out


def _fd(pid: str, fd: int) -> list:
    path = f"/proc/{pid}/fd/{fd:d}"
    try:
        link = os.readlink(path)
    except PermissionError:
        return ["", 0, "denied"]
    except OSError:
        return ["", 0, "closed"]
    try:
        mode = stat.S_IFMT(os.stat(path).st_mode)
    except OSError:
        mode = 0
    return [link, mode, ""]


def maps_torch(pid) -> bool:
    """Whether the process has libtorch mapped (a torch program; attach/find asks it of a spawned child too)."""
    try:
        with open(f"/proc/{pid}/maps", "rb") as f:
            return any(b"libtorch" in ln for ln in f)
    except OSError:
        return False


def main(argv: list) -> int:
    job = argv[0]
    me = str(os.getpid())
    mine = os.environ.get("SLURM_STEP_ID")
    # several slurmd on one host (a test cluster): each node's probe keeps its own node's processes
    node = os.environ.get("SLURMD_NODENAME")
    tick = os.sysconf("SC_CLK_TCK")
    with open("/proc/stat") as f:
        boot = next(int(ln.split()[1]) for ln in f if ln.startswith("btime "))
    sys.stdout.write(json.dumps({"host": socket.gethostname()}) + "\n")
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or pid == me:
            continue
        try:
            env = _environ(pid)
            if env.get("SLURM_JOB_ID") != job or (mine is not None and env.get("SLURM_STEP_ID") == mine):
                continue
            if node and env.get("SLURMD_NODENAME", node) != node:
                continue
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = [a.decode("utf-8", "replace") for a in f.read().split(b"\0")[:-1]]
        except OSError:
            continue  # ended, or another user's (whose job this is not: srun --overlap runs as the job's user)
        spawn = "--multiprocessing-fork" in cmd
        sys.stdout.write(json.dumps({"pid": int(pid), "ppid": int(fields[1]), "cmdline": cmd,
                                     "env": {k: env[k] for k in KEEP if k in env},
                                     "start": boot + int(fields[19]) / tick, "torch": spawn and maps_torch(pid),
                                     "fd1": _fd(pid, 1), "fd2": _fd(pid, 2)}) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
