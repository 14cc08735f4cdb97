"""Classify where a rank's stack is (collective, compute, sleep, I/O, data loader, XLA) and write the hang sentence."""
from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

from .stack_types import Frame, StackResult, ThreadStack, is_helper, is_user_frame, qualified, worker_label
from .words import ranks_text, unseen_words

CATEGORIES = ("collective", "compute", "sleep", "io", "dataloader", "xla", "turn", "unknown")
# categories in which a rank waits for its peers; "turn": in ddptui's own ordinal turnstile (XLA thread replicas),
# waiting for the lower ordinals to end their turn: no collective of the program, never evidence against it
WAITING = ("collective", "xla", "turn")
TURNSTILE = "ddptui's ordinal turnstile"

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
DDP_FILE = "torch/nn/parallel/distributed.py"
_DDP_UTILS = "torch/distributed/utils.py"  # DDP's helpers: _sync_module_states, _verify_param_shape_across_processes
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
_SLEEP_CALL = re.compile(r"\b((?:time|asyncio)\.sleep)\(")


@dataclass
class Where:
    category: str
    detail: str  # e.g. "all_reduce inside backward (DDP bucket all-reduce)"
    func: str | None = None  # the frame the rank is at: the innermost user-code frame where there is one
    file: str | None = None
    line: int | None = None
    code: str | None = None
    thread: str | None = None
    calls: str | None = None  # the library function the user frame is in a call to ("threading.Event.wait")
    worker: dict[str, Any] | None = None  # a DataLoader rank: the worker it waits for, and where that worker is

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


def collective_frame(func: str, file: str) -> tuple[str, str] | None:
    """(category, detail) when this frame is inside a collective or an XLA op that waits for the peers, else None."""
    f = Frame(func, file or "", 0)
    name = _base(func)
    if _in(f, "torch/distributed/") and name in _C10D_OPS:
        if name in ("init_process_group", "_store_based_barrier"):
            return "collective", "rendezvous (init_process_group waits for the other ranks)"
        return "collective", name
    if _in(f, "torch/distributed/rendezvous.py") or (_in(f, "torch/distributed/") and "store" in name.lower()):
        return "collective", "rendezvous (waiting for the other ranks to join the store)"
    if name in _DDP_SYNC and in_ddp(func, file):
        return "collective", _DDP_SYNC[name]
    if f.file.endswith("ddptui_turnstile.py") and name == "before":  # the ordinal turnstile (Turnstile.before)
        return "turn", f"its turn after the lower ordinals ({TURNSTILE}, not a collective of the program)"
    if _in(f, "torch_xla/") and (op := _XLA_OPS.get(name)):
        return "xla", op
    return None


def in_ddp(func: str, file: str) -> bool:
    """This frame is DistributedDataParallel's own machinery: its module (e.g. the bucket rebuild that waits in
    _pre_forward before the second forward), or one of its sync helpers in torch.distributed.utils (the
    constructor's parameter shape check and initial broadcast), which run outside the program's own collectives."""
    f = Frame(func, file or "", 0)
    return _in(f, DDP_FILE) or (_in(f, _DDP_UTILS) and _base(func) in _DDP_SYNC)


def _in(f: Frame, part: str) -> bool:
    return part in f.file.replace("\\", "/")


def pick_thread(threads: list[ThreadStack], thread_filter: Callable[[ThreadStack], bool] | None = None) -> ThreadStack | None:
    """The thread that speaks for the rank: the filter's, else MainThread, else the first with frames; never
    ddptui's own helper thread."""
    threads = [t for t in threads if not is_helper(t)]
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


def _calls(frames: list[Frame], at: Frame) -> str | None:
    """What the user frame ``at`` is in a call to: the library frame right inside it, or the sleep it calls."""
    i = next((k for k, f in enumerate(frames) if f is at), None)
    if i and not is_user_frame(frames[i - 1]):
        return qualified(frames[i - 1])
    m = _SLEEP_CALL.search(at.code or "")  # a C function: no frame of its own, only the call in the code
    return m.group(1) if m else None


def _where(cat: str, detail: str, frames: list[Frame], hit: Frame | None, thread: ThreadStack) -> Where:
    at = hit if hit is not None and is_user_frame(hit) else next((f for f in frames if is_user_frame(f)), hit)
    if at is None:
        return Where(cat, detail, thread=thread.name)
    calls = _calls(frames, at) if is_user_frame(at) else None
    return Where(cat, detail, _base(at.func), at.file, at.line, at.code, thread.name, calls)


def _worker_where(w: StackResult) -> dict[str, Any]:
    """Where a DataLoader worker process is: its innermost user frame inside _worker_loop (None: waits for work)."""
    base = {"pid": w.pid, "worker_id": w.worker_id, "label": worker_label(w), "method": w.method}
    t = pick_thread(w.threads)
    if t is None or not t.frames:
        return {**base, "busy": None}
    loop = next((i for i, f in enumerate(t.frames) if _base(f.func) == "_worker_loop" and _in(f, "torch/utils/data/")),
                len(t.frames))
    inner = t.frames[:loop]  # the fetch: the dataset's __getitem__, the collate function, ...
    at = next((f for f in inner if is_user_frame(f)), None)
    if at is None:
        return {**base, "busy": False}
    return {**base, "busy": True, "func": _base(at.func), "file": at.file, "line": at.line, "code": at.code,
            "calls": _calls(inner, at)}


def _dataloader(where: Where, workers: list[StackResult]) -> Where:
    """A rank blocked on its DataLoader: name the worker it waits for, the one busy in the user's code."""
    seen = [_worker_where(w) for w in workers]
    busy = [w for w in seen if w["busy"]]
    blind = [w for w in seen if w["busy"] is None]
    if busy:
        where.worker = busy[0]
        where.worker["others"] = [w["label"] for w in busy[1:]]
        where.detail = f"waits for its {busy[0]['label']}"
    elif blind:  # a worker we could not read may be the one: say so rather than blame none
        labels = ", ".join(f"{w['label']}: {w['method']}" for w in blind)
        where.worker = {"label": labels, "busy": None}
        where.detail = f"waits for its DataLoader workers, unreadable ({labels})"
    elif seen:
        where.worker = {"label": ", ".join(w["label"] for w in seen), "busy": False}
        where.detail = f"waits for its DataLoader workers ({', '.join(w['label'] for w in seen)}), none in user code"
    return where


def classify(threads: list[ThreadStack], thread_filter: Callable[[ThreadStack], bool] | None = None,
             workers: list[StackResult] | None = None) -> Where:
    """Where the rank's relevant thread is, judged from its frames innermost → outermost (and from its
    DataLoader workers' stacks when it waits for them)."""
    t = pick_thread(threads, thread_filter)
    if t is None or not t.frames:
        return Where("unknown", "no Python frames", thread=t.name if t else None)
    fr = t.frames
    for f in fr:  # collectives and XLA: wherever they are in the stack, the rank waits for its peers
        hit = collective_frame(f.func, f.file)
        if hit:
            return _where(hit[0], hit[1], fr, f, t)
    for i, f in enumerate(fr):
        # waiting on its workers; with the user's own code inside (num_workers=0: __getitem__ in this process)
        # the rank is in that code, classified below like any other
        if _in(f, "torch/utils/data/") and not any(is_user_frame(g) for g in fr[:i]):
            return _dataloader(_where("dataloader", f"data loader ({_base(f.func)})", fr, f, t), workers or [])
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


def _step(steps: dict[int, int | None], r: int) -> str:
    s = steps.get(r)
    if s is None and r in getattr(steps, "unread", ()):  # run_state.Steps: its output cannot be read
        return "steps unreadable"
    return f"step {s}" if s is not None else "no step yet"


def _is_verb(rs: list[int]) -> str:
    return "is" if len(rs) == 1 else "are"


def _doing(w: Where) -> str | None:
    """What a culprit without a library call is doing, where its category says more than its frame."""
    if w.category == "compute":
        return None if "activity unknown" in w.detail else "computing"
    return {"io": "in I/O", "unknown": w.detail, "sleep": w.detail}.get(w.category)


def _in_code(func: str | None, at: str, calls: str | None, doing: str | None) -> str:
    name = func if func and func.startswith("<") else f"{func}()"
    return f"{name} at {at}" + (f" (calls {calls})" if calls else f" ({doing})" if doing else "")


def where_phrase(w: Where, verb: str = "is stuck in") -> str:
    """Where a culprit is, in the user's own code: "wait_for_lock() at hang.py:9 (calls threading.Event.wait)".
    ``verb`` says how it is there: "is stuck in" for a stall, "is in" for a sample of a run that still moves."""
    if w.category == "dataloader" and w.worker and w.worker.get("busy"):
        wk = w.worker
        text = f"waits for its {wk['label']}, which is in " + _in_code(
            wk["func"], f"{os.path.basename(wk['file'])}:{wk['line']}", wk.get("calls"), None)
        if wk.get("others"):
            text += f" (also in user code: {', '.join(wk['others'])})"
        return text
    if w.category == "dataloader":
        text = f"waits for its DataLoader in {_in_code(w.func, w.at, w.calls, None)}" if w.func else f"is in {w.detail}"
        if w.worker and w.worker.get("busy") is None:
            text += f"; its workers' stacks could not be read ({w.worker['label']})"
        elif w.worker:
            text += f"; its workers ({w.worker['label']}) are not in user code"
        return text
    if w.func is None or w.file is None or not is_user_frame(Frame(w.func, w.file, w.line or 0)):
        return f"{verb} {w.detail} at {w.at}"  # no frame of the user's own: say what the library does
    return f"{verb} " + _in_code(w.func, w.at, w.calls, _doing(w))


def _culprit_phrase(r: int, w: Where, steps: dict[int, int | None]) -> str:
    return f"rank {r} {where_phrase(w)}, {_step(steps, r)}"


def _turn_group(turn: list[int]) -> str:
    """Ranks in ddptui's turnstile: they wait for the lower ordinals' turn, in no collective of the program."""
    if len(turn) == 1:
        lower = "rank 0" if turn[0] == 1 else "the lower ranks"
        return f"rank {turn[0]} waits for its turn after {lower} in {TURNSTILE}"
    return f"{ranks_text(turn)} wait for their turns after the lower ranks in {TURNSTILE}"


def _wait_group(waiting: list[int], wheres: dict[int, Where]) -> str:
    turn = [r for r in waiting if wheres[r].category == "turn"]
    if turn:
        rest = [r for r in waiting if r not in turn]
        return "; ".join(([_wait_group(rest, wheres)] if rest else []) + [_turn_group(turn)])
    details = {wheres[r].detail for r in waiting}
    if len(details) == 1:
        ats = {wheres[r].at for r in waiting}
        at = f" at {ats.pop()}" if len(ats) == 1 and "?" not in ats else ""
        return f"{ranks_text(waiting)} wait{'s' if len(waiting) == 1 else ''} in {details.pop()}{at}"
    return f"{ranks_text(waiting)} wait in collectives (" + ", ".join(f"{r}: {wheres[r].detail} at {wheres[r].at}" for r in waiting) + ")"


def _readable(wheres: dict[int, Where]) -> dict[int, Where]:
    """The ranks whose stacks say where they are (not a rank with no stack, nor one whose thread had no frame)."""
    return {r: w for r, w in wheres.items() if w is not None and not (w.category == "unknown" and w.file is None)}


def hang_sentence(wheres: dict[int, Where], steps: dict[int, int | None], stalled: Iterable[int],
                  since_wall: float, unseen: tuple[int, ...] = ()) -> tuple[str, tuple[int, ...], tuple[int, ...]]:
    """One sentence a user can act on, plus (culprits, waiting). Ranks absent from ``stalled`` are progressing;
    ``unseen`` ranks run on other nodes, not watched here (the one holding the others up may be among them)."""
    text, culprits, waiting = _hang_sentence(wheres, steps, stalled, since_wall, bool(unseen))
    if unseen and stalled:
        text += f"; {unseen_words(unseen)}" + ("" if culprits else ": the rank holding the others up may be there")
    return text, culprits, waiting


def _hang_sentence(wheres: dict[int, Where], steps: dict[int, int | None], stalled: Iterable[int],
                   since_wall: float, partial: bool) -> tuple[str, tuple[int, ...], tuple[int, ...]]:
    stalled = sorted(set(stalled))
    since = time.strftime("%H:%M:%S", time.localtime(since_wall))
    everyone = sorted(set(wheres) | set(steps) | set(stalled))
    progressing = [r for r in everyone if r not in stalled]
    known = _readable(wheres)
    blind = [r for r in stalled if r not in known]
    waiting = [r for r in stalled if r in known and known[r].category in WAITING]
    culprits = [r for r in stalled if r in known and known[r].category not in WAITING]

    if not stalled:
        lag = ""
        got = {r: s for r, s in steps.items() if s is not None}
        if got and len(set(got.values())) > 1:
            low = min(got.values())
            slow = [r for r, s in got.items() if s == low]
            lag = f"; {ranks_text(slow)} {_is_verb(slow)} behind ({low} vs {max(got.values())} steps) but progressing"
        return f"no rank is stalled{lag}", (), ()

    if culprits:
        if len(culprits) == 1:
            head = _culprit_phrase(culprits[0], known[culprits[0]], steps)
        else:
            head = f"{ranks_text(culprits)} are outside any collective: " + "; ".join(_culprit_phrase(r, known[r], steps) for r in culprits)
        if waiting:
            text = f"{head}; {_wait_group(waiting, known)} since {since}"
        else:
            text = f"{head}, no progress since {since}"
        if blind:
            text += f" ({ranks_text(blind)}: no stacks)"
        return text, tuple(culprits), tuple(waiting)

    turn = [r for r in waiting if known[r].category == "turn"]
    held = [r for r in waiting if r not in turn]
    if turn and held and not progressing and len({known[r].detail for r in held}) == 1:
        # the ranks in the turnstile wait for the others' turn to end: those are in their own XLA or collective work
        # (compiling, running their graph), waited for by the turnstile, not by a collective the program calls
        w = known[held[0]]
        at = f" at {w.at}" if len({known[r].at for r in held}) == 1 and w.file else ""
        text = (f"{ranks_text(held)} {_is_verb(held)} in {w.detail}{at} ("
                + ", ".join(f"{r}: {_step(steps, r)}" for r in held) + f") in {'its' if len(held) == 1 else 'their'} "
                f"turn; {_turn_group(turn)}, since {since}")
        if blind:
            text += f"; {ranks_text(blind)}: no stacks"
        return text, tuple(held), tuple(turn)
    if waiting and not held:  # only ddptui's turnstile: the ranks it waits for are those without stacks, or gone
        text = f"{_turn_group(turn)} since {since}"
        text += f"; {ranks_text(blind)}: no stacks, likely the culprit" if blind else "; no other rank is stalled"
        return text, tuple(blind), tuple(turn)

    if waiting and progressing:
        # the stalled ranks wait for ranks that still make progress: those are slow, not stuck
        steps_txt = ", ".join(f"rank {r} {_step(steps, r)}" for r in progressing)
        text = (f"{ranks_text(progressing)} {_is_verb(progressing)} slow but still progressing ({steps_txt}); "
                f"{_wait_group(waiting, known)} for {'it' if len(progressing) == 1 else 'them'} since {since}")
        return text, tuple(progressing), tuple(waiting)

    if waiting:
        details = {known[r].detail for r in held}
        step_vals = {steps.get(r) for r in held}
        step_txt = ", ".join(f"{r}: {_step(steps, r)}" for r in held)
        if len(details) > 1 or len(step_vals) > 1:
            text = (f"every rank waits inside a collective since {since}, but not the same one ("
                    + "; ".join(f"rank {r} in {known[r].detail} at {known[r].at} ({_step(steps, r)})" for r in held)
                    + "): mismatched collectives — the ranks call different collectives or in a different order")
            if turn:
                text += f"; {_turn_group(turn)}"
        else:
            who = "all ranks" if not blind and not partial else ranks_text(waiting)
            verb = "waits" if partial and len(waiting) == 1 else "wait"
            text = (f"{who} {verb} in {details.pop()} at {known[waiting[0]].at} since {since} "
                    f"({step_txt}) and no rank{' seen here' if partial else ''} is outside it: a lost peer (a rank "
                    f"that died or never joined) or a collective that not every rank calls")
        if blind:
            text += f"; {ranks_text(blind)}: no stacks, likely the culprit"
        return text, tuple(blind), tuple(waiting)

    step_txt = ", ".join(f"{r}: {_step(steps, r)}" for r in stalled)
    return (f"{ranks_text(stalled)} stopped progressing since {since} ({step_txt}); no stacks available "
            f"(py-spy failed and no faulthandler dump): see the ranks' last log lines", (), ())


def slow_sentence(wheres: dict[int, Where], slowed: dict[int, str]) -> tuple[str, tuple[int, ...], tuple[int, ...]]:
    """The verdict of one stack sample of a run that slowed down but still moves, plus (culprits, waiting).

    ``slowed``: rank -> how its steps slowed ("rank 1's steps take 0.51 s, 170x its first 20 steps' 3.0 ms"). The
    ranks still step, so nothing is "stuck", and ranks caught inside collectives at one moment are no evidence of a
    lost peer or of mismatched collectives: the sample only says who was outside a collective, in its own work."""
    known = _readable(wheres)
    blind = sorted(r for r in set(wheres) | set(slowed) if r not in known)
    waiting = sorted(r for r, w in known.items() if w.category in WAITING)
    culprits = sorted(r for r, w in known.items() if w.category not in WAITING)
    said = [slowed[r] for r in culprits if r in slowed] or [slowed[r] for r in sorted(slowed)]
    head = "the run slowed down" + (f" ({'; '.join(said)})" if said else "")
    if culprits:
        parts = [f"rank {r} {where_phrase(known[r], 'is in')}" for r in culprits]
        if waiting:
            details = {known[r].detail for r in waiting}
            inside = details.pop() if len(details) == 1 else "collectives"
            whom = "it" if len(culprits) == 1 else "them"
            parts.append(f"{ranks_text(waiting)} wait{'s' if len(waiting) == 1 else ''} for {whom} in {inside}")
        text = f"{head}: " + "; ".join(parts)
    elif waiting:
        text = (f"{head}: this sample caught every rank inside a collective ("
                + "; ".join(f"rank {r} in {known[r].detail} at {known[r].at}" for r in waiting)
                + "), so it does not single out the slow rank")
    else:
        text = f"{head}: no stacks could be read"
    if blind and known:
        text += f" ({ranks_text(blind)}: no stacks)"
    return text, tuple(culprits), tuple(waiting)
