"""Stacks as data: frames, threads, a rank's result; which frames are the user's; rendering and folding."""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

HELPER_THREAD = "ddptui-report"  # the thread runners/inject/ddptui_report.py starts in every rank
# ddptui's own threads in a rank by name, and by their loop's (file, function) when faulthandler gave no names:
# the report flusher, and runners/inject/ddptui_fr.py's Flight Recorder look every 2 s
HELPER_THREADS = {HELPER_THREAD: ("ddptui_report.py", "_flush_quiet"), "ddptui-collectives": ("ddptui_fr.py", "_loop")}
# Frames that are not the user's own code: the standard library, installed packages, ddptui's injected code.
_LIB_PATH = re.compile(r"(site-packages|dist-packages)/|/lib/python3\.\d+/|^<|runners/inject/")
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
    workers: list[StackResult] = field(default_factory=list)  # the rank's worker processes (DataLoader), by pid
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


def stopped_result(rank: int, pid: int, state: str, node: str = "") -> StackResult:
    return StackResult(rank, pid, f"unavailable: the process is stopped (State: {state})", node=node, state=state)


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


def pyspy_error(stderr: str, rc: int | None) -> str:
    keep = []
    for ln in stderr.splitlines():
        if ln.startswith("Stack backtrace"):
            break
        ln = ln.strip()
        if ln and ln != "Caused by:":
            keep.append(ln)
    msg = "; ".join(dict.fromkeys(keep)) or f"py-spy exited {rc}"
    return msg.removeprefix("Error: ")
