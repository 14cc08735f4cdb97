"""Classify where a rank's stack is (collective, compute, sleep, I/O, data loader, XLA) and write the hang sentence."""
from __future__ import annotations

import os
import re
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterable

from .stacks import Frame, ThreadStack

CATEGORIES = ("collective", "compute", "sleep", "io", "dataloader", "xla", "unknown")
WAITING = ("collective", "xla")  # categories in which a rank waits for its peers

_C10D_OPS = {
    "all_reduce", "all_reduce_coalesced", "all_gather", "all_gather_into_tensor", "all_gather_object",
    "all_gather_coalesced", "all_to_all", "all_to_all_single", "broadcast", "broadcast_object_list",
    "barrier", "monitored_barrier", "reduce", "reduce_scatter", "reduce_scatter_tensor", "gather",
    "gather_object", "scatter", "scatter_object_list", "send", "recv", "isend", "irecv", "batch_isend_irecv",
    "send_object_list", "recv_object_list", "new_group", "init_process_group", "_store_based_barrier",
    "_new_group_with_tag", "_coalescing_manager", "_all_gather_base", "_reduce_scatter_base",
}
_DDP_SYNC = {
    "_verify_params_across_processes": "parameter shape check across ranks (DDP init)",
    "_verify_param_shape_across_processes": "parameter shape check across ranks (DDP init)",
    "_broadcast_coalesced": "broadcast of weights/buffers (DDP)",
    "_sync_module_states": "broadcast of the initial weights (DDP init)",
    "_sync_params_and_buffers": "broadcast of the initial weights (DDP init)",
    "_distributed_broadcast_coalesced": "broadcast of weights/buffers (DDP)",
    "_sync_buffers": "buffer broadcast in forward (DDP)",
    "_sync_module_buffers": "buffer broadcast in forward (DDP)",
    "_check_global_requires_backward_grad_sync": "all_reduce of the sync flag (DDP)",
    "_match_all_reduce_for_bwd_pass": "all_reduce matching the backward pass (DDP join)",
}
_XLA_OPS = {
    "all_reduce": "xm.all_reduce", "reduce_gradients": "gradient all-reduce (xm.reduce_gradients)",
    "optimizer_step": "gradient all-reduce in xm.optimizer_step", "rendezvous": "xm.rendezvous",
    "mark_step": "graph execution (mark_step)", "sync": "graph execution (torch_xla.sync)",
    "all_gather": "xm.all_gather", "reduce_scatter": "xm.reduce_scatter", "all_to_all": "xm.all_to_all",
    "collective_permute": "xm.collective_permute", "wait_device_ops": "xm.wait_device_ops",
    "_run_step_closures": "step closures", "step": "torch_xla.step", "_mp_start_fn": None,
}
_IO_FUNCS = {"recv", "recv_into", "recvfrom", "accept", "connect", "create_connection", "getaddrinfo", "select",
             "poll", "epoll", "read", "readinto", "readline", "readlines", "sendall", "_recv_bytes", "_recv", "do_handshake"}
_IO_FILES = ("socket.py", "selectors.py", "ssl.py", "multiprocessing/connection.py", "http/client.py",
             "urllib/request.py", "subprocess.py", "asyncio/")
_IO_CODE = re.compile(r"\.(recv|recv_into|accept|read|readinto|readline|readlines|connect)\(|\binput\(|\burlopen\(")
_SLEEP_CODE = re.compile(r"\bsleep\(")
_LIB_PATH = re.compile(r"(site-packages|dist-packages)/|/lib/python3\.\d+/|^<|runners/inject/")


@dataclass
class Where:
    category: str
    detail: str  # e.g. "all_reduce inside backward (DDP bucket all-reduce)"
    func: str | None = None  # the frame the rank is at: the innermost user-code frame where there is one
    file: str | None = None
    line: int | None = None
    code: str | None = None
    thread: str | None = None

    def to_dict(self, step: int | None = None) -> dict[str, Any]:
        """The HangVerdict.where entry."""
        d = asdict(self)
        d["step"] = step
        return d

    @property
    def at(self) -> str:
        return f"{os.path.basename(self.file)}:{self.line}" if self.file else "?"


def _base(func: str) -> str:
    return func.rsplit(".", 1)[-1]  # py-spy gives qualified names ("Tensor.backward"), faulthandler plain ones


def _is_user(f: Frame) -> bool:
    return bool(f.file) and not _LIB_PATH.search(f.file)


def _in(f: Frame, part: str) -> bool:
    return part in f.file.replace("\\", "/")


def pick_thread(threads: list[ThreadStack], thread_filter: Callable[[ThreadStack], bool] | None = None) -> ThreadStack | None:
    """The thread that speaks for the rank: the filter's, else MainThread, else the first with frames."""
    if thread_filter is not None:
        for t in threads:
            if thread_filter(t):
                return t
        return None
    for t in threads:
        if t.name == "MainThread":
            return t
    return next((t for t in threads if t.frames), threads[0] if threads else None)


def xla_thread_filter(ordinal: int) -> Callable[[ThreadStack], bool]:
    """Matches a thread replica named after its XLA ordinal ("xla:1", "rank 1", "ddptui-rank1", "ordinal-1")."""
    pat = re.compile(rf"(?:xla:|rank[ _-]?|ordinal[ _-]?){ordinal}\b", re.I)
    return lambda t: bool(pat.search(t.name))


def _where(cat: str, detail: str, frames: list[Frame], hit: Frame | None, thread: ThreadStack) -> Where:
    at = hit if hit is not None and _is_user(hit) else next((f for f in frames if _is_user(f)), hit)
    if at is None:
        return Where(cat, detail, thread=thread.name)
    return Where(cat, detail, _base(at.func), at.file, at.line, at.code, thread.name)


def classify(threads: list[ThreadStack], thread_filter: Callable[[ThreadStack], bool] | None = None) -> Where:
    """Where the rank's relevant thread is, judged from its frames innermost → outermost."""
    t = pick_thread(threads, thread_filter)
    if t is None or not t.frames:
        return Where("unknown", "no Python frames", thread=t.name if t else None)
    fr = t.frames
    for f in fr:  # collectives and XLA: wherever they are in the stack, the rank waits for its peers
        name = _base(f.func)
        if _in(f, "torch/distributed/") and name in _C10D_OPS:
            detail = "rendezvous (init_process_group waits for the other ranks)" if name in ("init_process_group", "_store_based_barrier") else name
            return _where("collective", detail, fr, f, t)
        if _in(f, "torch/distributed/rendezvous.py") or (_in(f, "torch/distributed/") and "store" in name.lower()):
            return _where("collective", "rendezvous (waiting for the other ranks to join the store)", fr, f, t)
        if (_in(f, "torch/nn/parallel/distributed.py") or _in(f, "torch/distributed/utils.py")) and name in _DDP_SYNC:
            return _where("collective", _DDP_SYNC[name], fr, f, t)
        if f.file.endswith("ddptui_xla.py") and name == "before":  # the injected turnstile (_Turnstile.before)
            return _where("xla", "ordinal-ordered sync (waits for its turn after the lower ordinals)", fr, f, t)
        if _in(f, "torch_xla/") and name in _XLA_OPS and _XLA_OPS[name]:
            return _where("xla", _XLA_OPS[name], fr, f, t)
    for f in fr:
        if _in(f, "torch/utils/data/"):
            return _where("dataloader", f"data loader ({_base(f.func)})", fr, f, t)
    for f in fr:
        if _SLEEP_CODE.search(f.code or ""):
            what = "time.sleep" if "time.sleep(" in f.code else ("asyncio.sleep" if "asyncio.sleep(" in f.code else "sleep")
            return _where("sleep", what, fr, f, t)
        if _in(f, "/threading.py") and _base(f.func) in ("wait", "join", "acquire", "_wait_for_tstate_lock"):
            return _where("sleep", f"waits on threading ({_base(f.func)})", fr, f, t)
        if _base(f.func) == "sleep":
            return _where("sleep", "sleep", fr, f, t)
    for f in fr[:3]:  # I/O only where the thread is (the innermost frames), not any socket code further out
        if (_base(f.func) in _IO_FUNCS and any(_in(f, p) for p in _IO_FILES)) or _IO_CODE.search(f.code or ""):
            return _where("io", f"I/O ({_base(f.func)})", fr, f, t)
    top = fr[0]
    if _in(top, "torch/autograd/") and _base(top.func) in ("_engine_run_backward", "run_backward", "backward", "grad"):
        if t.idle is False:
            return _where("compute", "backward pass (computing)", fr, top, t)
        # blocked in the C++ autograd engine with no Python hook on top: DDP's reducer waits in its bucket all-reduce
        return _where("collective", "all_reduce inside backward (DDP bucket all-reduce)", fr, top, t)
    if t.idle is True:
        return _where("unknown", f"idle in {_base(top.func)}", fr, top, t)
    detail = f"compute in {_base(top.func)}" + (" (activity unknown: faulthandler)" if t.idle is None else "")
    return _where("compute", detail, fr, top, t)


def _ranks(rs: Iterable[int]) -> str:
    rs = sorted(rs)
    if len(rs) == 1:
        return f"rank {rs[0]}"
    return "ranks " + ", ".join(str(r) for r in rs)


def _step(steps: dict[int, int | None], r: int) -> str:
    s = steps.get(r)
    return f"step {s}" if s is not None else "no step yet"


def _is_verb(rs: list[int]) -> str:
    return "is" if len(rs) == 1 else "are"


def _culprit_phrase(r: int, w: Where, steps: dict[int, int | None]) -> str:
    return f"rank {r} in {w.detail} at {w.at} ({_step(steps, r)})"


def _wait_group(waiting: list[int], wheres: dict[int, Where]) -> str:
    details = {wheres[r].detail for r in waiting}
    if len(details) == 1:
        return f"{_ranks(waiting)} wait{'s' if len(waiting) == 1 else ''} in {details.pop()}"
    return f"{_ranks(waiting)} wait in collectives (" + ", ".join(f"{r}: {wheres[r].detail}" for r in waiting) + ")"


def hang_sentence(wheres: dict[int, Where], steps: dict[int, int | None], stalled: Iterable[int],
                  since_wall: float) -> tuple[str, tuple[int, ...], tuple[int, ...]]:
    """One sentence a user can act on, plus (culprits, waiting). Ranks absent from ``stalled`` are progressing."""
    stalled = sorted(set(stalled))
    since = time.strftime("%H:%M:%S", time.localtime(since_wall))
    everyone = sorted(set(wheres) | set(steps) | set(stalled))
    progressing = [r for r in everyone if r not in stalled]
    known = {r: w for r, w in wheres.items() if w is not None and not (w.category == "unknown" and w.file is None)}
    blind = [r for r in stalled if r not in known]
    waiting = [r for r in stalled if r in known and known[r].category in WAITING]
    culprits = [r for r in stalled if r in known and known[r].category not in WAITING]

    if not stalled:
        lag = ""
        got = {r: s for r, s in steps.items() if s is not None}
        if got and len(set(got.values())) > 1:
            low = min(got.values())
            slow = [r for r, s in got.items() if s == low]
            lag = f"; {_ranks(slow)} {_is_verb(slow)} behind ({low} vs {max(got.values())} steps) but progressing"
        return f"no rank is stalled{lag}", (), ()

    if culprits:
        if len(culprits) == 1:
            r = culprits[0]
            head = f"rank {r} is stuck in {known[r].detail} at {known[r].at} ({_step(steps, r)})"
        else:
            head = f"{_ranks(culprits)} are outside any collective: " + "; ".join(_culprit_phrase(r, known[r], steps) for r in culprits)
        if waiting:
            text = f"{head}; {_wait_group(waiting, known)} for {'it' if len(culprits) == 1 else 'them'} since {since}"
        else:
            text = f"{head}, no progress since {since}"
        if blind:
            text += f" ({_ranks(blind)}: no stacks)"
        return text, tuple(culprits), tuple(waiting)

    if waiting and progressing:
        # the stalled ranks wait for ranks that still make progress: those are slow, not stuck
        steps_txt = ", ".join(f"rank {r} {_step(steps, r)}" for r in progressing)
        text = (f"{_ranks(progressing)} {_is_verb(progressing)} slow but still progressing ({steps_txt}); "
                f"{_wait_group(waiting, known)} for {'it' if len(progressing) == 1 else 'them'} since {since}")
        return text, tuple(progressing), tuple(waiting)

    if waiting:
        details = {known[r].detail for r in waiting}
        step_vals = {steps.get(r) for r in waiting}
        step_txt = ", ".join(f"{r}: {_step(steps, r)}" for r in waiting)
        if len(details) > 1 or len(step_vals) > 1:
            text = (f"every rank waits inside a collective since {since}, but not the same one ("
                    + "; ".join(f"rank {r} in {known[r].detail} at {known[r].at} ({_step(steps, r)})" for r in waiting)
                    + "): mismatched collectives — the ranks call different collectives or in a different order")
        else:
            text = (f"{'all ranks' if not blind else _ranks(waiting)} wait in {details.pop()} at {known[waiting[0]].at} since {since} "
                    f"({step_txt}) and no rank is outside it: a lost peer (a rank that died or never joined) "
                    f"or a collective that not every rank calls")
        if blind:
            text += f"; {_ranks(blind)}: no stacks, likely the culprit"
        return text, tuple(blind), tuple(waiting)

    step_txt = ", ".join(f"{r}: {_step(steps, r)}" for r in stalled)
    return (f"{_ranks(stalled)} stopped progressing since {since} ({step_txt}); no stacks available "
            f"(py-spy failed and no faulthandler dump): see the ranks' last log lines", (), ())
