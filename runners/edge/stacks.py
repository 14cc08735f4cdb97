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
from dataclasses import dataclass, field
from typing import Any

import psutil

FAULTHANDLER_WAIT = 1.5  # seconds to wait for a SIGUSR1 dump to land in the rank's stderr
_SIGUSR1_BIT = 1 << (signal.SIGUSR1 - 1)
MAX_WORKERS = 16  # worker processes dumped per rank (a DataLoader rarely has more; py-spy runs for each)
HELPER_THREAD = "ddptui-report"  # the thread runners/inject/ddptui_report.py starts in every rank
# ddptui's own threads in a rank by name, and by their loop's (file, function) when faulthandler gave no names:
# the report flusher, and runners/inject/ddptui_fr.py's Flight Recorder look every 2 s
HELPER_THREADS = {HELPER_THREAD: ("ddptui_report.py", "_flush_quiet"), "ddptui-collectives": ("ddptui_fr.py", "_loop")}
# Frames that are not the user's own code: the standard library, installed packages, ddptui's injected code.
_LIB_PATH = re.compile(r"(site-packages|dist-packages)/|/lib/python3\.\d+/|^<|runners/inject/")


@dataclass
class Target:
    rank: int
    pid: int
    stderr_path: str | None = None
    debug_sock: str | None = None  # the unix socket of torch's debug server in the rank, when it started one


DEBUG_SERVER = "torch debug server"  # the method name of stacks read from it


@dataclass
class Frame:
    func: str
    file: str
    line: int
    code: str = ""


@dataclass
class ThreadStack:
    name: str
    tid: int | None
    idle: bool | None  # None: unknown (faulthandler)
    frames: list[Frame] = field(default_factory=list)  # innermost first


@dataclass
class StackResult:
    rank: int
    pid: int
    method: str  # "py-spy" | "torch debug server" | "faulthandler" | "unavailable: why"
    threads: list[ThreadStack] = field(default_factory=list)
    error: str | None = None  # why py-spy (and the fallback) failed, even when a fallback worked
    text: str = ""  # the raw dump as collected
    workers: list["StackResult"] = field(default_factory=list)  # the rank's worker processes (DataLoader), by pid
    worker_id: int | None = None  # for a worker: DataLoader's worker_id, read from _worker_loop's locals
    node: str = ""  # set for a rank on another node: the node its stacks were taken on (runners/edge/remote_stacks.py)
    # True: the rank's node could not be reached to take them (srun timed out or could not talk to it): evidence
    # that the node itself is lost, not only the rank
    unreachable: bool = False
    # the process was found stopped, not taken a stack of: its /proc State ("T (stopped)", "t (tracing stop)")
    state: str = ""


def is_user_frame(f: Frame) -> bool:
    """A frame of the user's own code: not the standard library, an installed package or ddptui's injected code."""
    return bool(f.file) and not _LIB_PATH.search(f.file.replace("\\", "/"))


# module paths that read better by the name users import them as
_PUBLIC_MODULE = {"torch.distributed.distributed_c10d": "torch.distributed", "torch.utils.data.dataloader": "torch.utils.data"}


def _module(file: str) -> str:
    p = file.replace("\\", "/")
    m = re.search(r".*(?:site-packages|dist-packages|lib/python3\.\d+)/(.+?)\.py$", p)
    if not m:
        return os.path.splitext(os.path.basename(p))[0]
    parts = m.group(1).split("/")
    if parts[-1] == "__init__":
        parts.pop()
    mod = ".".join(parts[:1] + [x for x in parts[1:] if not x.startswith("_")])  # torch._tensor -> torch
    return _PUBLIC_MODULE.get(mod, mod)


def qualified(f: Frame) -> str:
    """A library frame as users would name it: threading.Event.wait, torch.Tensor.backward."""
    return f"{_module(f.file)}.{f.func}" if f.file and not f.file.startswith("<") else f.func


def is_helper(t: ThreadStack) -> bool:
    """One of ddptui's own threads (by name, or by its loop's frame when faulthandler gave no names)."""
    return t.name in HELPER_THREADS or any(f.func.endswith(func) and f.file.endswith(file)
                                           for f in t.frames for file, func in HELPER_THREADS.values())


def ordered(threads: list[ThreadStack]) -> list[ThreadStack]:
    """MainThread first, ddptui's helper thread last, the rest as the dump gave them."""
    return sorted(threads, key=lambda t: (0 if t.name == "MainThread" else 2 if is_helper(t) else 1))


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


def stopped_result(rank: int, pid: int, state: str, node: str = "") -> StackResult:
    return StackResult(rank, pid, f"unavailable: the process is stopped (State: {state})", node=node, state=state)


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
        found, seen = [], set()
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


def _pyspy_error(stderr: str, rc: int | None) -> str:
    keep = []
    for ln in stderr.splitlines():
        if ln.startswith("Stack backtrace"):
            break
        ln = ln.strip()
        if ln and ln != "Caused by:":
            keep.append(ln)
    msg = "; ".join(dict.fromkeys(keep)) or f"py-spy exited {rc}"
    return msg.removeprefix("Error: ")


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


def worker_id(text: str) -> int | None:
    """DataLoader's ``worker_id`` from a ``py-spy dump --json --locals`` of a worker process, if it shows one."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    for t in data if isinstance(data, list) else []:
        for fr in t.get("frames") or []:
            if str(fr.get("name", "")).endswith("_worker_loop") and "torch/utils/data" in str(fr.get("filename", "")):
                for loc in fr.get("locals") or []:
                    if loc.get("name") == "worker_id" and str(loc.get("repr", "")).isdigit():
                        return int(loc["repr"])
    return None


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
    from ddptui.runners.edge.fr_relay import post_all
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
            errors[pid] = _pyspy_error(err.decode("utf-8", "replace"), p.returncode)
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
    out: dict[int, StackResult] = {}
    for t in targets:
        r = results[resolved[t.rank]]
        out[t.rank] = r if r.rank == t.rank else dataclasses.replace(r, rank=t.rank)
    return out


def _short(file: str) -> str:
    m = re.search(r".*(?:site-packages|dist-packages|lib/python3\.\d+)/(.+)$", file)  # the innermost prefix
    return m.group(1) if m else file


def worker_label(res: StackResult) -> str:
    """How a worker process is named to the user: "DataLoader worker 1 (pid 123)"."""
    return f"DataLoader worker {res.worker_id} (pid {res.pid})" if res.worker_id is not None else f"worker process pid {res.pid}"


def _thread_lines(threads: list[ThreadStack]) -> list[str]:
    lines = []
    for t in ordered(threads):
        state = {True: "idle", False: "active", None: "?"}[t.idle]
        lines.append("")
        tid = "?" if t.tid is None else (hex(t.tid) if t.tid > 1 << 32 else str(t.tid))  # pthread ids read best in hex
        lines.append(f'Thread {tid} ({state}): "{t.name}"' + (" (ddptui's own helper thread)" if is_helper(t) else ""))
        for f in t.frames:
            lines.append(f"    {f.func} ({_short(f.file)}:{f.line})")
            if f.code:
                lines.append(f"        {f.code}")
    return lines


def render(result: StackResult) -> str:
    """Human text of one rank's stacks (the run record's stacks/rank<N>.txt), its workers' after its own."""
    lines = [f"rank {result.rank} pid {result.pid}" + (f" on {result.node}" if result.node else "") + f" ({result.method})"]
    if result.error:
        lines.append(f"py-spy: {result.error}")
    lines += _thread_lines(result.threads)
    for w in result.workers:
        lines += ["", f"== rank {result.rank}'s {worker_label(w)} ({w.method})"] + _thread_lines(w.threads)
    return "\n".join(lines) + "\n"


def to_json(result: StackResult) -> list[dict[str, Any]]:
    """Threads in StacksCollected.threads' shape: [{"thread", "tid", "idle", "helper", "frames": [[func, file, line, code]]}]."""
    return [{"thread": t.name, "tid": t.tid, "idle": t.idle, "helper": is_helper(t),
             "frames": [[f.func, f.file, f.line, f.code] for f in t.frames]}
            for t in ordered(result.threads)]


def workers_json(result: StackResult) -> list[dict[str, Any]]:
    """The rank's workers in StacksCollected.workers' shape: [{"pid", "worker_id", "method", "threads"}]."""
    return [{"pid": w.pid, "worker_id": w.worker_id, "method": w.method if w.threads else f"unavailable: {w.error}",
             "threads": to_json(w)} for w in result.workers]


def fold(frames: list[Frame]) -> list[tuple[str, Any]]:
    """A stack for reading, innermost user frame first: ("user", frame) entries with the library frames it calls
    folded into one ("lib", [frames]) after it, and the library frames between user frames folded in place."""
    first = next((i for i, f in enumerate(frames) if is_user_frame(f)), None)
    if first is None:
        return [("lib", list(frames))] if frames else []
    out: list[tuple[str, Any]] = [("user", frames[first])]
    if first:
        out.append(("calls", list(frames[:first])))
    run: list[Frame] = []
    for f in frames[first + 1:]:
        if is_user_frame(f):
            if run:
                out.append(("lib", run))
                run = []
            out.append(("user", f))
        else:
            run.append(f)
    if run:
        out.append(("lib", run))
    return out


def _files(frames: list[Frame]) -> str:
    names = list(dict.fromkeys(_short(f.file) for f in frames))
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def folded_lines(frames: list[Frame], indent: str = "  ") -> list[str]:
    """``fold`` as text: user frames with file:line and code, each run of library frames on one line."""
    out = []
    for kind, x in fold(frames):
        if kind == "user":
            name = x.func if x.func.startswith("<") else f"{x.func}()"
            out.append(f"{indent}{name} at {os.path.basename(x.file)}:{x.line}" + (f"    {x.code}" if x.code else ""))
        else:
            n = len(x)
            head = f"calls {qualified(x[-1])}: " if kind == "calls" else ""
            out.append(f"{indent}    ... {head}{n} frame{'s' if n != 1 else ''} in {_files(x)}")
    return out


def from_json(threads: list[dict[str, Any]]) -> list[ThreadStack]:
    """Inverse of ``to_json`` (a replayed StacksCollected event back to ThreadStacks)."""
    return [ThreadStack(t.get("thread", "?"), t.get("tid"), t.get("idle"),
                        [Frame(fr[0], fr[1], int(fr[2]), fr[3] if len(fr) > 3 else "") for fr in t.get("frames", [])])
            for t in threads]
