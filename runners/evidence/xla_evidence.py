"""XLA's rendezvous log lines as collective evidence (XLA has no Flight Recorder): which op, which keys, since when, and the abort."""
from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from .hang_verdict import in_ddp  # which frames are DDP's own collectives: the frame classifier's knowledge
from .words import ranks_text

# XLA (xla/service/rendezvous.cc) on a collective that not every participant joined, e.g.
#   2026-12-03 07:49:21.190496: E external/xla/xla/service/rendezvous.cc:100] [id=0] This thread has been waiting for
#   `all gather RendezvousKey{run_id=RunId: 0, global_devices=[0,1], num_local_participants=2, collective_op_kind=
#   cross_replica, op_id=0}` for 5 seconds and may be stuck. Expected 2 threads to join the rendezvous, but not all of
#   them arrived on time.
# and 10 s later, before abort():
#   ... F external/xla/xla/service/rendezvous.cc:127] [id=0] Termination timeout for `all gather RendezvousKey{...}` of
#   10 seconds exceeded. Exiting to ensure a consistent program state. Expected 2 threads to join the rendezvous, but only
#   1 of them arrived on time.
NEEDLE = "rendezvous"  # cheap test before the regexes
_WAITING = re.compile(r"rendezvous\.cc:\d+\].*?waiting for `?(?P<op>[A-Za-z][\w -]*?)\s+(?P<key>RendezvousKey\{[^}]*\})`?"
                      r"\s+for (?P<secs>\d+(?:\.\d+)?) seconds(?:.*?Expected (?P<n>\d+) threads)?")
_TERMINATED = re.compile(r"rendezvous\.cc:\d+\].*?Termination timeout for `?(?P<op>[A-Za-z][\w -]*?)\s+"
                         r"(?P<key>RendezvousKey\{[^}]*\})`? of (?P<secs>\d+(?:\.\d+)?) seconds exceeded"
                         r"(?:.*?Expected (?P<n>\d+) threads to join the rendezvous, but only (?P<arrived>\d+))?")
_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(\.\d+)?")
_FIELD = re.compile(r"(\w+)=([^,}]*(?:\[[^\]]*\])?)")
_ABORTED = "Fatal Python error: Aborted"
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line \d+ in (?P<func>\S+)')  # faulthandler's dump
_LIB = ("/torch/", "/torch_xla/")


@dataclass(frozen=True)
class RendezvousLine:
    kind: str  # "waiting" | "terminated"
    op: str  # "all gather", "all reduce", ...
    key: str  # "RendezvousKey{...}" as XLA printed it
    seconds: float  # how long it had waited (waiting) or the termination timeout (terminated)
    expected: int | None  # participants the rendezvous expects
    arrived: int | None  # participants that arrived (terminated lines only)
    stamp: float | None  # the line's own time stamp (epoch seconds), when it has one

    @property
    def op_id(self) -> str | None:
        return _key_fields(self.key).get("op_id")


def _key_fields(key: str) -> dict[str, str]:
    return {k: v.strip() for k, v in _FIELD.findall(key)}


def _stamp(line: str) -> float | None:
    m = _STAMP.match(line)
    if not m:
        return None
    try:
        return time.mktime(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")) + float(m.group(2) or 0)
    except (ValueError, OverflowError):
        return None


def parse_line(line: str) -> RendezvousLine | None:
    """One XLA rendezvous warning or termination line, else None."""
    if NEEDLE not in line:
        return None
    m = _TERMINATED.search(line)
    kind = "terminated"
    if m is None:
        m, kind = _WAITING.search(line), "waiting"
        if m is None:
            return None
    n = m.group("n")
    arrived = m.groupdict().get("arrived")
    return RendezvousLine(kind, m.group("op").strip(), m.group("key"), float(m.group("secs")),
                          int(n) if n else None, int(arrived) if arrived else None, _stamp(line))


@dataclass
class KeyWait:
    op: str
    key: str
    expected: int | None
    since: float  # wall time the wait began (the warning's stamp minus how long it had waited)
    warned: float  # wall time of the first warning
    arrived: int | None = None  # known from the termination line
    timeout: float | None = None  # XLA's termination timeout, from the termination line

    @property
    def op_id(self) -> str | None:
        return _key_fields(self.key).get("op_id")


@dataclass
class Rendezvous:
    """What one XLA worker's log says about its collectives: feed it the launcher's lines, then ask."""

    keys: dict[str, KeyWait] = field(default_factory=dict)
    terminated: list[KeyWait] = field(default_factory=list)
    aborted: float | None = None  # wall time of "Fatal Python error: Aborted" after a rendezvous line
    ddp_frame: str | None = None  # a thread of the abort's dump innermost in DDP's own collectives
    lines: list[str] = field(default_factory=list)  # the evidence lines, for the crash excerpt
    settled: bool = False  # progress was made after the warnings: they were a slow collective, not a stall
    _thread_top: bool = False  # the next frame line of the dump is a thread's innermost
    _steps: dict | None = None  # the replicas' steps when the warnings were first looked at

    def feed(self, line: str, wall: float) -> RendezvousLine | None:
        """Take one launcher line read at ``wall``; returns the rendezvous line it was, if any."""
        if _ABORTED in line:
            if self.keys and self.aborted is None:
                self.aborted = wall
                self.lines.append(line.strip())
            return None
        if self.aborted is not None:
            if line.startswith(("Thread 0x", "Current thread 0x")):
                self._thread_top = True
                return None
            m = _FRAME.match(line) if self._thread_top else None
            if m is not None:
                self._thread_top = False
                if self.ddp_frame is None and in_ddp(m.group("func"), m.group("file")):
                    self.ddp_frame = m.group("func")
                return None
        rl = parse_line(line)
        if rl is None:
            return None
        when = rl.stamp if rl.stamp is not None and abs(rl.stamp - wall) < 60 else wall  # another clock: ours
        kw = self.keys.get(rl.key)
        if kw is None:
            if self.settled:  # a new wait after one that completed: judged afresh
                self.keys.clear()
                self.lines.clear()
                self.settled, self._steps = False, None
            # (a termination line read first: the wait began at least its timeout before it)
            kw = self.keys[rl.key] = KeyWait(rl.op, rl.key, rl.expected, when - rl.seconds, when)
        if rl.kind == "terminated":
            kw.arrived, kw.timeout = rl.arrived, rl.seconds
            if kw not in self.terminated:
                self.terminated.append(kw)
        if len(self.lines) < 12:
            self.lines.append(line.strip())
        return rl

    def steps_now(self, steps: Mapping[int, int | None]) -> None:
        """The replicas' steps now: a step made after the warnings means their collective completed after all (a
        slow one), not a stall. The first call after a warning takes the reference."""
        if not self.keys or self.terminated:
            return
        snap = dict(steps)
        if self._steps is None:
            self._steps = snap
        elif snap != self._steps:
            self.settled = True

    # ---- what it says

    @property
    def stalled(self) -> bool:
        return bool(self.keys) and not self.settled

    @property
    def since(self) -> float | None:
        return min((k.since for k in self.keys.values()), default=None)

    @property
    def warned(self) -> float | None:
        return min((k.warned for k in self.keys.values()), default=None)

    def ops(self) -> list[str]:
        out: list[str] = []
        for k in self.keys.values():
            if k.op not in out:
                out.append(k.op)
        return out

    def split_keys(self) -> bool:
        """Several rendezvous keys of one op at once: the replicas are in the collective, but each in its own instance.

        XLA names a rendezvous by run and op id; replicas that run different executables of the same collective
        wait on different keys and none of them ever fills.
        """
        for op in self.ops():
            if len([k for k in self.keys.values() if k.op == op]) > 1:
                return True
        return False

    def describe(self) -> str:
        """'all gather (2 rendezvous keys: op_id 0, 1; 1 of 2 replicas arrived in each)'."""
        parts = []
        for op in self.ops():
            ks = [k for k in self.keys.values() if k.op == op]
            ids = sorted((k.op_id for k in ks if k.op_id is not None), key=lambda i: (len(i), i))  # numeric order
            known = [k for k in ks if k.arrived is not None and k.expected is not None]  # from termination lines
            bits = []
            if len(ks) > 1:
                bits.append(f"{len(ks)} rendezvous keys" + (f": op_id {', '.join(ids)}" if ids else ""))
            elif ids:
                bits.append(f"op_id {ids[0]}")
            if known and len({(k.arrived, k.expected) for k in known}) == 1:
                where = "" if len(ks) == 1 else " in each" if len(known) == len(ks) else \
                    " in op_id " + ", ".join(str(k.op_id) for k in known)
                bits.append(f"{known[0].arrived} of {known[0].expected} replicas arrived{where}")
            parts.append(op + (f" ({'; '.join(bits)})" if bits else ""))
        return ", ".join(parts)

    def timeout(self) -> float | None:
        return next((k.timeout for k in self.terminated if k.timeout), None)


def _hms(wall: float | None) -> str:
    return time.strftime("%H:%M:%S", time.localtime(wall)) if wall else "?"


def library_call(frames) -> tuple[str, str] | None:
    """(function, file) of the innermost torch / torch_xla frame of a replica's stack: where it waits."""
    for f in frames:
        path = (getattr(f, "file", "") or "").replace("\\", "/")
        if any(p in path for p in _LIB):
            return (getattr(f, "func", "") or "?").rsplit(".", 1)[-1], path
    return None


NO_FLIGHT_RECORDER = "PyTorch/XLA has no Flight Recorder"  # said in every XLA hang verdict (run_verdicts)


def stall_sentence(rdv: Rendezvous, base: str, culprits: tuple[int, ...], waiting: tuple[int, ...],
                   wheres: Mapping[int, object], calls: Mapping[int, tuple[str, str] | None], steps: Mapping[int, int | None],
                   ) -> tuple[str, tuple[int, ...], tuple[int, ...]]:
    """The hang sentence with XLA's rendezvous evidence in it: the op, the keys, where each replica waits, since when.

    wheres: rank -> verdict.Where (detail, at) from the stacks, or empty without stacks; calls: rank -> the
    innermost torch/torch_xla function of the replica's stack; base/culprits/waiting: the stack-only verdict.
    """
    head = f"XLA collective stall in {rdv.describe()}, XLA warning since {_hms(rdv.warned)}"
    tail = ("; XLA aborts the worker when its termination timeout (10 s after the warning here) runs out")

    def at(r: int) -> str:
        w = wheres.get(r)
        call = (calls.get(r) or (None,))[0]
        step = steps.get(r)
        where = f"{getattr(w, 'detail', '?')}" + (f" ({call})" if call else "") + f" at {getattr(w, 'at', '?')}"
        return f"rank {r} in {where} ({'no step yet' if step is None else f'step {step}'})"

    if culprits or not wheres:
        # the stacks name a replica outside the collective (or there are no stacks): their sentence leads
        return f"{base}; {head}{tail}", culprits, waiting
    everyone = sorted(wheres)
    if rdv.split_keys():
        text = (f"{head}: {ranks_text(everyone, empty='no rank')} are all in the collective but each waits on its own rendezvous key, "
                f"so none fills: " + "; ".join(at(r) for r in everyone)
                + f"{tail}")
        return text, (), tuple(everyone)
    text = f"{head}: " + "; ".join(at(r) for r in everyone) + f"{tail}"
    return text, culprits, waiting


def abort_sentence(rdv: Rendezvous) -> str:
    t = rdv.timeout()
    return (f"XLA aborted after its rendezvous termination timeout in {rdv.describe()}"
            + (f" ({t:g} s)" if t else "") + f": the worker process died of SIGABRT, every replica with it "
            f"(waiting since {_hms(rdv.since)})")


def ddp_collective(rdv: Rendezvous | None, calls: Mapping[int, tuple[str, str] | None],
                   culprits: tuple[int, ...] = ()) -> bool:
    """True when the replicas are stuck in DDP's own collectives, not waiting for a replica stuck elsewhere.

    calls: rank -> where its stack waits (library_call), from the stacks; without stacks, the abort's thread dump.
    culprits: replicas the stack verdict found outside any collective (then DDP is not the cause).
    """
    if culprits:
        return False
    known = [c for c in calls.values() if c]
    if known:
        return all(in_ddp(*c) for c in known)
    return rdv is not None and rdv.ddp_frame is not None
