"""Evidence that the kernel's OOM killer ended a SIGKILLed process: its memory cgroup's oom_kill count and limit, and
the kernel log (kill_reading.py weighs it)."""
from __future__ import annotations

import os
import re

from ..evidence.kill_reading import KillEvidence, Limit

_KILLED = re.compile(r"Killed process (\d+)|oom-kill:.*\bpid=(\d+)")
KMSG_RECORDS = 20000  # at most this many kernel log records are read: a log read short of it was read whole
INIT_PID_NS = 4026531836  # the initial pid namespace's inode (PROC_PID_INIT_INO): only there are the log's pids ours


def _memory_cgroups(proc_cgroup: str) -> list[tuple[bool, str]]:
    """(v1?, the cgroup's path without slashes at its ends) of each memory cgroup line of /proc/<pid>/cgroup: v1's
    memory controller, or v2's unified hierarchy (no controllers named)."""
    out = []
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and ("memory" in parts[1].split(",") or parts[1] == ""):
            out.append(("memory" in parts[1].split(","), parts[2].strip().strip("/")))
    return out


def cgroup_paths(proc_cgroup: str, root: str = "/sys/fs/cgroup") -> list[str]:
    """Files holding the oom_kill count of the memory cgroup named in /proc/<pid>/cgroup, most specific first."""
    out = []
    for v1, path in _memory_cgroups(proc_cgroup):
        if v1:
            out.append(os.path.join(root, "memory", path, "memory.oom_control"))
        else:  # v2 (unified), mounted at the root or beside v1
            out += [os.path.join(root, path, "memory.events"), os.path.join(root, "unified", path, "memory.events")]
    return [p.replace("//", "/") for p in out]


def parse_oom_kill(text: str) -> int | None:
    """The `oom_kill N` line of memory.events (v2) or memory.oom_control (v1)."""
    for line in text.splitlines():
        key, _, val = line.partition(" ")
        if key == "oom_kill" and val.strip().isdigit():
            return int(val)
    return None


def limit_files(proc_cgroup: str, root: str = "/sys/fs/cgroup") -> list[str]:
    """Files holding the memory limit of the cgroup named in /proc/<pid>/cgroup: v1's memory.stat (its
    hierarchical_memory_limit counts the ancestors' limits in), v2's memory.max of the cgroup and each ancestor."""
    out = []
    for v1, path in _memory_cgroups(proc_cgroup):
        if v1:
            out.append(os.path.join(root, "memory", path, "memory.stat"))
            continue
        walk = path.split("/") if path else []
        for base in (root, os.path.join(root, "unified")):
            out += [os.path.join(base, *walk[:i], "memory.max") for i in range(len(walk), 0, -1)]
    return out


def parse_limit(path: str, text: str) -> int | None:
    """The limit in bytes a memory.stat or memory.max says; None: no limit ("max", or v1's near-2^63)."""
    if path.endswith("memory.stat"):
        text = next((ln.split()[1] for ln in text.splitlines() if ln.startswith("hierarchical_memory_limit ")), "")
    text = text.strip()
    if not text.isdigit() or int(text) >= 1 << 62:
        return None
    return int(text)


def memory_limit(pid: int, meminfo: str = "/proc/meminfo") -> Limit | None:
    """The memory a process may use: its memory cgroup's limit where one is set below the machine's memory."""
    machine = None
    try:
        with open(meminfo) as f:
            kb = next((ln.split()[1] for ln in f if ln.startswith("MemTotal:")), "")
        machine = Limit(int(kb) * 1024, "the machine's memory") if kb.isdigit() else None
    except OSError:
        pass
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            files = limit_files(f.read())
    except OSError:
        files = []
    limits = []
    for path in files:
        try:
            with open(path) as f:
                n = parse_limit(path, f.read())
        except OSError:
            continue
        if n is not None:
            limits.append(n)
    if limits and (machine is None or min(limits) < machine.size):
        return Limit(min(limits), "its memory cgroup's limit")
    return machine


class CgroupCounter:
    """The oom_kill count of one process's memory cgroup, read when the process is first seen and again later, and
    the memory limit it runs under (read then, while its /proc entry is there)."""

    def __init__(self, pid: int) -> None:
        self.path: str | None = None
        self.start: int | None = None
        self.limit = memory_limit(pid)
        try:
            with open(f"/proc/{pid}/cgroup") as f:
                candidates = cgroup_paths(f.read())
        except OSError:
            return
        for p in candidates:
            n = _read_count(p)
            if n is not None:
                self.path, self.start = p, n
                return

    def rose_by(self) -> int | None:
        """How many OOM kills the cgroup counted since; None when it cannot be read."""
        if self.path is None or self.start is None:
            return None
        n = _read_count(self.path)
        return None if n is None else n - self.start


def _read_count(path: str) -> int | None:
    try:
        with open(path) as f:
            return parse_oom_kill(f.read())
    except OSError:
        return None


def kernel_log_kills(records: list[str]) -> set[int]:
    """Pids the kernel log says the OOM killer killed ("Killed process N", "oom-kill:...,pid=N,...")."""
    pids = set()
    for rec in records:
        for m in _KILLED.finditer(rec):
            pids.add(int(m.group(1) or m.group(2)))
    return pids


def read_kernel_log(limit: int = KMSG_RECORDS) -> list[str] | None:
    """The records in /dev/kmsg now (None when it cannot be read: not root, or no such device)."""
    try:
        fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    out: list[str] = []
    try:
        while len(out) < limit:
            try:
                rec = os.read(fd, 8192)
            except BlockingIOError:
                break
            except BrokenPipeError:  # a record was overwritten while we read: go on with the next one
                continue
            except OSError:
                break
            if not rec:
                break
            out.append(rec.decode("utf-8", "replace"))
    finally:
        os.close(fd)
    return out


def in_initial_pid_namespace() -> bool:
    """The kernel log names pids as the initial pid namespace numbers them: only there are they this process's."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino == INIT_PID_NS
    except OSError:
        return False


def kill_evidence(pid: int | None, counter: CgroupCounter | None) -> KillEvidence:
    """What the kernel log and the memory cgroup say of `pid` (killed by SIGKILL), and the limit it ran under."""
    log_names = None
    log = read_kernel_log() if pid is not None and in_initial_pid_namespace() else None  # else its pids are not ours
    if log is not None and pid in kernel_log_kills(log):
        log_names = True
    elif log is not None and len(log) < KMSG_RECORDS:
        log_names = False  # read whole: its silence is evidence
    counted = counter.rose_by() if counter is not None else None
    limit = counter.limit if counter is not None and counter.limit is not None else (
        memory_limit(pid) if pid is not None else None)
    return KillEvidence(log_names, counted, limit)
