"""Stacks of running rank processes: py-spy dumps in parallel; where py-spy fails, torch's debug server, then
faulthandler (SIGUSR1)."""
from __future__ import annotations

import dataclasses
import json
import linecache
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

import psutil

from ..evidence.stack_types import (
    DEBUG_SERVER,
    Frame,
    StackResult,
    ThreadStack,
    ordered,
    pyspy_error,
    stopped_result,
    worker_id,
)

FAULTHANDLER_WAIT = 1.5  # seconds to wait for a SIGUSR1 dump to land in the rank's stderr
_SIGUSR1_BIT = 1 << (signal.SIGUSR1 - 1)
MAX_WORKERS = 16  # worker processes dumped per rank (a DataLoader rarely has more; py-spy runs for each)


@dataclass
class Target:
    rank: int
    pid: int
    stderr_path: str | None = None
    debug_sock: str | None = None  # the unix socket of torch's debug server in the rank, when it started one


def find_pyspy(pyspy: str | None = None) -> str | None:
    """py-spy next to the running interpreter, else on PATH; an explicit path wins (and is not checked)."""
    if pyspy is not None:
        return pyspy
    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
    if os.access(beside, os.X_OK):
        return beside
    return shutil.which("py-spy")


def _is_python(proc: psutil.Process) -> bool:
    try:
        names = [proc.name()] + [os.path.basename(p) for p in (proc.exe(), (proc.cmdline() or [""])[0])]
    except (psutil.Error, OSError):
        return False
    return any(n.startswith("python") or n.startswith("pypy") for n in names)


def python_pid(pid: int) -> int | None:
    """The Python process behind ``pid``: itself, or its only Python descendant (a bash wrapper's child)."""
    try:
        proc = psutil.Process(pid)
        if _is_python(proc):
            return pid
        kids = [c for c in proc.children(recursive=True) if _is_python(c)]
    except psutil.Error:
        return None
    return kids[0].pid if len(kids) == 1 else None


def stopped_state(pid: int) -> str:
    """The State of a stopped process as /proc says it ("T (stopped)", "t (tracing stop)"), "" when it runs or
    sleeps (or is gone). A stopped process answers neither py-spy (it cannot be suspended again), nor its debug
    server, nor SIGUSR1 (held until it is continued): its state is the finding."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("State:"):
                    state = line.split(":", 1)[1].strip()
                    return state if state[:1] in ("T", "t") else ""
    except OSError:
        pass
    return ""


def catches_sigusr1(pid: int) -> bool:
    """True when the process installed a SIGUSR1 handler (SigCgt): sending it otherwise would kill it."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) & _SIGUSR1_BIT)
    except OSError:
        pass
    return False


def _children(pid: int) -> list[int]:
    """Direct children from /proc/PID/task/*/children (no scan of the process table); psutil where that is absent."""
    kids: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                kids += [int(x) for x in f.read().split()]
    except FileNotFoundError:  # gone, or a kernel without CONFIG_PROC_CHILDREN
        if not os.path.exists(f"/proc/{pid}/task"):
            return []
        try:
            return [c.pid for c in psutil.Process(pid).children()]
        except psutil.Error:
            return []
    except (OSError, ValueError):
        return kids
    return kids


def worker_pids(pids: list[int], limit: int = MAX_WORKERS) -> dict[int, list[int]]:
    """Each rank's Python worker processes: forked by it (same command line) or started by multiprocessing."""
    out: dict[int, list[int]] = {}
    for pid in pids:
        try:
            cmd = psutil.Process(pid).cmdline()
        except psutil.Error:
            out[pid] = []
            continue
        found: list[int] = []
        seen: set[int] = set()
        todo = [(k, False) for k in _children(pid)]  # (pid, forked by the rank's forkserver)
        while todo and len(found) < limit:
            kid, served = todo.pop(0)
            if kid in seen:
                continue
            seen.add(kid)
            try:
                c = psutil.Process(kid)
                ccmd = c.cmdline()
            except psutil.Error:
                continue
            if not _is_python(c):
                continue
            mp = " ".join(ccmd)
            if not served and "multiprocessing.forkserver" in mp:  # its children are the rank's workers
                todo += [(k, True) for k in _children(kid)]
            # a fork keeps the parent's argv, a spawned child runs multiprocessing's entry point (not its resource
            # tracker); other subprocesses (python -c ..., compile workers) are not the rank's workers
            elif served or ccmd == cmd or ("multiprocessing" in mp and "resource_tracker" not in mp):
                found.append(kid)
        out[pid] = sorted(found)
    return out


def _stderr_file(pid: int) -> str | None:
    try:
        path = os.readlink(f"/proc/{pid}/fd/2")
    except OSError:
        return None
    return path if os.path.isfile(path) else None


def _code(file: str, line: int) -> str:
    if not file or file.startswith("<"):
        return ""
    return linecache.getline(file, line).strip()


def parse_pyspy_json(text: str) -> list[ThreadStack]:
    """Threads of ``py-spy dump --json`` output (a list of thread objects, frames innermost first)."""
    threads = []
    for t in json.loads(text):
        frames = [Frame(fr.get("name", "?"), fr.get("filename", ""), int(fr.get("line") or 0)) for fr in t.get("frames", [])]
        for fr in frames:
            fr.code = _code(fr.file, fr.line)
        active = t.get("active")
        threads.append(ThreadStack(
            name=t.get("thread_name") or f"Thread {t.get('os_thread_id') or t.get('thread_id')}",
            tid=t.get("os_thread_id") or t.get("thread_id"),
            idle=None if active is None else not active,
            frames=frames,
        ))
    return threads


_FH_HEAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-fA-F]+) \(most recent call first\):\s*$|^Stack \(most recent call first\):\s*$")
_FH_FRAME = re.compile(r'^  File "(.*)", line (\d+|\?\?\?) in (.*)$')


def parse_faulthandler(text: str) -> list[ThreadStack]:
    """Threads of a faulthandler dump; the thread not started by threading (no _bootstrap) is MainThread."""
    threads: list[ThreadStack] = []
    cur: ThreadStack | None = None
    for ln in text.splitlines():
        m = _FH_HEAD.match(ln)
        if m:
            tid = int(m.group(2), 16) if m.group(2) else None
            cur = ThreadStack(name=f"Thread {m.group(2)}" if tid else "MainThread", tid=tid, idle=None)
            threads.append(cur)
            continue
        if cur is None:
            continue
        m = _FH_FRAME.match(ln)
        if m:
            line = int(m.group(2)) if m.group(2).isdigit() else 0
            cur.frames.append(Frame(m.group(3), m.group(1), line, _code(m.group(1), line)))
        elif not ln.startswith("  "):  # anything else ends the block ("  ..." and "  <no Python frame>" do not)
            cur = None
    roots = [t for t in threads if not (t.frames and t.frames[-1].func == "_bootstrap" and t.frames[-1].file.endswith("threading.py"))]
    if len(roots) == 1 and roots[0].tid is not None:
        roots[0].name = "MainThread"
    return threads


_SERVER_THREAD = re.compile(r"^Current thread 0x[0-9a-fA-F]+ \(most recent call first\):\n  <no Python frame>\n*", re.M)


def parse_debug_traceback(text: str) -> list[ThreadStack]:
    """Threads of the debug server's dump_traceback answer: faulthandler's format, with the server's own C++ thread
    (the "current" one, no Python frame) left out so that the main thread is told from the others."""
    return parse_faulthandler(_SERVER_THREAD.sub("", text))


def _debug_server(targets: list[Target], errors: dict[int, str], timeout: float) -> dict[int, StackResult]:
    """Stacks of every target with a debug socket from torch's debug server in the rank (no ptrace, no signal:
    a C++ thread of the rank answers, also while its main thread is blocked in a collective)."""
    from .fr_relay import post_all
    socks = {t.pid: t.debug_sock for t in targets if t.debug_sock}
    got = post_all(list(dict.fromkeys(socks.values())), "dump_traceback", timeout)
    results: dict[int, StackResult] = {}
    for t in targets:
        if not t.debug_sock:
            continue
        body = got[t.debug_sock]
        if isinstance(body, Exception):
            errors[t.pid] = "; ".join(x for x in (errors.get(t.pid), f"{DEBUG_SERVER}: {body}") if x)
            continue
        text = body.decode("utf-8", "replace")
        threads = ordered(parse_debug_traceback(text))
        if threads:
            results[t.pid] = StackResult(t.rank, t.pid, DEBUG_SERVER, threads, errors.get(t.pid), text)
        else:
            errors[t.pid] = "; ".join(x for x in (errors.get(t.pid), f"{DEBUG_SERVER}: no thread in its answer") if x)
    return results


def _dump_complete(text: str) -> bool:
    return re.search(r"\(most recent call first\):\n  ", text) is not None


def _faulthandler(targets: list[Target], errors: dict[int, str]) -> dict[int, StackResult]:
    """SIGUSR1 every target that registered faulthandler, then poll their stderr files for the dump."""
    results: dict[int, StackResult] = {}
    pending: dict[int, tuple[Target, str, int]] = {}
    for t in targets:
        why = errors.get(t.pid, "")
        path = t.stderr_path or _stderr_file(t.pid)
        if not psutil.pid_exists(t.pid):
            results[t.pid] = StackResult(t.rank, t.pid, "unavailable: process gone", error=why)
        elif path is None or not os.path.isfile(path):
            results[t.pid] = StackResult(t.rank, t.pid, "unavailable: py-spy failed and no stderr file", error=why)
        elif not catches_sigusr1(t.pid):
            results[t.pid] = StackResult(t.rank, t.pid, "unavailable: py-spy failed and no faulthandler on SIGUSR1", error=why)
        else:
            offset = os.path.getsize(path)
            try:
                os.kill(t.pid, signal.SIGUSR1)
            except OSError as e:
                results[t.pid] = StackResult(t.rank, t.pid, f"unavailable: SIGUSR1 failed ({e.strerror})", error=why)
                continue
            pending[t.pid] = (t, path, offset)
    results.update(await_dumps(pending, {pid: errors.get(pid) for pid in pending}))
    return results


def await_dumps(pending: dict, errors: dict, wait: float = FAULTHANDLER_WAIT) -> dict:
    """key -> (Target, stderr file, its size before SIGUSR1): poll the files until each holds a whole faulthandler
    dump (or `wait` ends); key -> StackResult, `errors[key]` (why py-spy failed) kept in it."""
    results: dict = {}
    pending = dict(pending)
    deadline = time.monotonic() + wait
    sizes: dict = {}
    while pending and time.monotonic() < deadline:
        time.sleep(0.05)
        for key, (t, path, offset) in list(pending.items()):
            try:
                size = os.path.getsize(path)
            except OSError:
                continue
            # faulthandler writes the whole dump from its signal handler: a size that stopped growing
            # after a header and a frame is a complete dump
            if size > offset and sizes.get(key) == size:
                with open(path, "rb") as f:
                    f.seek(offset)
                    text = f.read(size - offset).decode("utf-8", "replace")
                if _dump_complete(text):
                    threads = parse_faulthandler(text)
                    results[key] = StackResult(t.rank, t.pid, "faulthandler", threads, errors.get(key), text)
                    del pending[key]
            sizes[key] = size
    for key, (t, _, _) in pending.items():
        results[key] = StackResult(t.rank, t.pid, "unavailable: no faulthandler dump appeared", error=errors.get(key))
    return results


def collect(targets: list[Target], method: str = "auto", pyspy: str | None = None, timeout: float = 5.0,
            workers: bool = True) -> dict[int, StackResult]:
    """Stacks of every target, by rank. method: "auto" (py-spy, then torch's debug server where the rank has one,
    then faulthandler), "no-signal" (py-spy, then the debug server: never SIGUSR1, for a job ddptui did not launch),
    "py-spy", "debug-server" or "faulthandler".

    Targets sharing a pid (thread replicas) are dumped once. py-spy runs for all pids at the same time, the
    ranks' worker processes (``workers``) included; a worker's stack is py-spy's or none (its stderr is the
    rank's, so a faulthandler dump of it would interleave with the rank's own).
    """
    by_pid: dict[int, Target] = {}
    results: dict[int, StackResult] = {}
    resolved: dict[int, int] = {}
    for t in targets:
        pid = python_pid(t.pid)
        resolved[t.rank] = pid if pid is not None else t.pid
        if pid is None:
            results[t.pid] = StackResult(t.rank, t.pid, f"unavailable: pid {t.pid} is not a Python process")
            continue
        state = stopped_state(pid)
        if state:
            results[pid] = stopped_result(t.rank, pid, state)
            continue
        by_pid.setdefault(pid, Target(t.rank, pid, t.stderr_path, t.debug_sock))
    errors: dict[int, str] = {}
    kids: dict[int, list[int]] = {}  # rank pid -> its worker pids
    if method in ("auto", "py-spy", "no-signal"):
        exe = find_pyspy(pyspy)
        if workers and exe is not None:
            kids = {pid: [w for w in ws if w not in by_pid] for pid, ws in worker_pids(list(by_pid)).items()}
        worker_of = {w: pid for pid, ws in kids.items() for w in ws}
        procs: dict[int, subprocess.Popen] = {}
        for pid in [*by_pid, *worker_of]:
            if exe is None:
                errors[pid] = "py-spy not found"
                continue
            # a worker's locals hold DataLoader's worker_id: the name a user knows it by
            argv = [exe, "dump", "--pid", str(pid), "--json"] + (["--locals"] if pid in worker_of else [])
            try:
                procs[pid] = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                              stdin=subprocess.DEVNULL, env={**os.environ, "RUST_BACKTRACE": "0"})
            except OSError as e:
                errors[pid] = f"py-spy: {e.strerror or e}"
        deadline = time.monotonic() + timeout
        for pid, p in procs.items():
            rank = by_pid[pid].rank if pid in by_pid else by_pid[worker_of[pid]].rank
            try:
                out, err = p.communicate(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.communicate()
                errors[pid] = f"py-spy timed out after {timeout:g}s"
                continue
            text = out.decode("utf-8", "replace")
            if p.returncode == 0:
                try:
                    results[pid] = StackResult(rank, pid, "py-spy", ordered(parse_pyspy_json(text)), None,
                                               "" if pid in worker_of else text)
                    if pid in worker_of:
                        results[pid].worker_id = worker_id(text)
                    continue
                except (ValueError, TypeError, AttributeError) as e:
                    errors[pid] = f"py-spy output unreadable: {e}"
                    continue
            errors[pid] = pyspy_error(err.decode("utf-8", "replace"), p.returncode)
    todo = [t for pid, t in by_pid.items() if pid not in results]
    if method in ("auto", "debug-server", "no-signal") and todo:
        if method == "debug-server":
            errors.update({t.pid: f"{DEBUG_SERVER}: the rank has no debug socket" for t in todo if not t.debug_sock})
        results.update(_debug_server(todo, errors, timeout))
        todo = [t for t in todo if t.pid not in results]
    if method in ("auto", "faulthandler") and todo:
        for pid, r in _faulthandler(todo, errors).items():
            r.threads = ordered(r.threads)
            results[pid] = r
    for t in todo:
        results.setdefault(t.pid, StackResult(t.rank, t.pid, f"unavailable: {errors.get(t.pid, 'not collected')}", error=errors.get(t.pid)))
    for pid, ws in kids.items():
        results[pid].workers = [results.get(w) or StackResult(results[pid].rank, w, f"unavailable: {errors.get(w, 'not collected')}",
                                                              error=errors.get(w)) for w in ws]
    by_rank: dict[int, StackResult] = {}
    for t in targets:
        r = results[resolved[t.rank]]
        by_rank[t.rank] = r if r.rank == t.rank else dataclasses.replace(r, rank=t.rank)
    return by_rank


