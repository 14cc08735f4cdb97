"""Evidence that the kernel's OOM killer ended a process: its memory cgroup's oom_kill count and the kernel log."""
from __future__ import annotations

import os
import re

_KILLED = re.compile(r"Killed process (\d+)|oom-kill:.*\bpid=(\d+)")


def cgroup_paths(proc_cgroup: str, root: str = "/sys/fs/cgroup") -> list[str]:
    """Files holding the oom_kill count of the memory cgroup named in /proc/<pid>/cgroup, most specific first."""
    out = []
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        path = path.strip().lstrip("/")
        if "memory" in controllers.split(","):  # cgroup v1
            out.append(os.path.join(root, "memory", path, "memory.oom_control"))
        elif controllers == "":  # cgroup v2 (unified), mounted at the root or beside v1
            out.append(os.path.join(root, path, "memory.events"))
            out.append(os.path.join(root, "unified", path, "memory.events"))
    return [p.replace("//", "/") for p in out]


def parse_oom_kill(text: str) -> int | None:
    """The `oom_kill N` line of memory.events (v2) or memory.oom_control (v1)."""
    for line in text.splitlines():
        key, _, val = line.partition(" ")
        if key == "oom_kill" and val.strip().isdigit():
            return int(val)
    return None


class CgroupCounter:
    """The oom_kill count of one process's memory cgroup, read when the process is first seen and again later."""

    def __init__(self, pid: int) -> None:
        self.path: str | None = None
        self.start: int | None = None
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


def read_kernel_log(limit: int = 20000) -> list[str] | None:
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


def evidence(pid: int | None, counter: CgroupCounter | None) -> str:
    """Words saying why we think `pid` (killed by SIGKILL) ran out of memory, or "" when nothing says so."""
    if pid is not None:
        log = read_kernel_log()
        if log is not None and pid in kernel_log_kills(log):
            return f"the kernel log says the OOM killer killed pid {pid}"
    if counter is not None:
        n = counter.rose_by()
        if n:
            return f"its memory cgroup counted {n} OOM kill{'s' if n > 1 else ''} during the run"
    return ""
