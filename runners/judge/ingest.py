"""Lines and reports read from the ranks and launchers into the rank tracks: steps, losses, hints, torchrun, XLA."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import events as ev
from ..evidence import collectives, fix_lines, fr_analysis, parse, xla_evidence
from ..evidence.steptime import take_report
from . import world_view
from .rank_lifecycle import RankLifecycle
from .run_state import RunState

# reports that are neither progress nor output: a hung rank's threads still send them, its stall clock must run on
# (a rank's start-up phase is no progress either: a rank stuck in its rendezvous must still stall)
QUIET_REPORTS = frozenset({"coll", "debug_server", "phase"})
# the start-up phases a rank reports (runners/inject/ddptui_phase.py), in the order they come
PHASES = ("importing torch", "setting up", "rendezvous", "waiting for first step")


class Ingest:
    """Reads what the ranks and their launchers wrote into a RunState; the ends it learns of go to the lifecycle."""

    def __init__(self, state: RunState, lifecycle: RankLifecycle) -> None:
        self.s = state
        self.life = lifecycle
        self._pending_progress: dict[int, tuple[float, str]] = {}  # rank -> (wall, source), one event per flush
        self._coll_changed: dict[int, float] = {}  # rank -> wall of its collectives report, one event per flush
        self._phase: dict[int, str] = {}  # rank -> the start-up phase it reported last
        # a hello's attempt (TORCHELASTIC_RESTART_COUNT), before the hello is read: runners/judge/attempts.py's, set by
        # the Judge
        self.on_attempt: Callable[[Any], None] = lambda attempt: None

    def new_attempt(self) -> None:
        """The launcher restarted every rank: what was pending of the old ones is dropped."""
        self._pending_progress.clear()
        self._coll_changed.clear()
        self._phase.clear()

    def progress(self) -> None:
        """The Progress events coalesced since the last call: one per rank that moved (the UI samples them)."""
        for rank, (wall, source) in sorted(self._pending_progress.items()):
            t = self.s.tracks[rank]
            self.s.emit(ev.Progress(rank, t.step, t.loss, wall, source, t.take_new_losses(), t.samples,
                                    t.clock.step_time()))
        self._pending_progress.clear()
        if self._coll_changed:  # the ranks that changed (each with all its groups), the laggards and a mismatch of all
            tracks = self.s.tracks
            every = {r: t.collectives for r, t in tracks.items() if t.collectives}
            self.s.emit(ev.CollectiveProgress({r: dict(tracks[r].collectives) for r in sorted(self._coll_changed)},
                                              collectives.laggards(every), max(self._coll_changed.values()),
                                              self._mismatch(every)))
            self._coll_changed.clear()

    def _mismatch(self, every) -> dict:
        """The ranks' live reports disagree at a pending collective: the finding the hang verdict will lead with."""
        if not collectives.conflict(every):
            return {}
        f = fr_analysis.from_collectives(every, self.s.world)
        if f is None or not f.kind.endswith("mismatch") or f.completed:
            return {}
        return {**f.to_dict(), "fix": fix_lines.for_finding(f)}

    def lines(self, rank: int | None, stream: str, lines: list[str], wall: float, mono: float) -> None:
        """Lines read from one source in one go (rank None: a launcher's own output): their LogLines (with reports
        taken out) and whatever they caused go to the outbox; progress is coalesced until `progress()`."""
        groups: dict[int | None, list[str]] = {}
        blob = getattr(lines, "text", None)
        if blob is None:
            blob = "\n".join(lines)
        tagged = rank is None or (parse.has_marker(blob) and any(ln.startswith(parse.TAG) for ln in lines))
        if tagged:
            split = parse.split_prefix if rank is None else parse.untag
            for ln in lines:
                r, text = split(ln)
                r = rank if r is None else r
                if r is None:
                    shown_now = self._torchrun_summary(text)  # a traceback may be held back, then folded
                    if shown_now:
                        groups.setdefault(None, []).extend(shown_now)
                    continue
                groups.setdefault(r if r in self.s.tracks else None, []).append(text)
        else:
            groups[rank] = lines
        for r, group in groups.items():
            shown = self._interpret(r, stream, group, wall, mono, blob if group is lines else None)
            if shown:
                self.s.emit(ev.LogLines(r, stream, wall, mono, tuple(shown)))

    def _interpret(self, rank: int | None, stream: str, lines: list[str], wall: float, mono: float,
                   blob: str | None = None) -> list[str]:
        """Reports are taken out of the shown log; steps, losses and hints are read from the rest."""
        t = self.s.tracks.get(rank) if rank is not None else None
        shown = lines
        heard = True  # output for the stall clock: anything but reports and lines that are no sign of life
        if blob is None:
            blob = "\n".join(lines)  # one C-speed pass answers "is there anything to look at?" for the batch
        if parse.has_marker(blob) and parse.REPORT in blob:
            shown, quiet = [], True
            for ln in lines:
                rep = parse.report(ln)
                if rep is None and parse.REPORT in ln:
                    ln, rep = parse.unglue_report(ln)
                    if rep is not None and ln:
                        shown.append(ln)
                if rep is None:
                    shown.append(ln)
                else:
                    quiet = quiet and rep.get("k") in QUIET_REPORTS
                    self._report(rep, rank, wall, mono)
            blob = "\n".join(shown)
            heard = bool(shown) or not quiet
        if heard and "WorkerServer" in blob:  # the debug server ddptui started is no sign of the rank's life
            heard = not all(parse.is_own_server_line(ln) for ln in shown)
        if t is not None and heard:
            t.saw_output(mono, wall)
            t.tail.extend(shown[-40:])
            if stream == "err":
                t.err_tail.extend(shown[-80:])
            if t.status == ev.RankStatus.STARTING:
                self.s.set_status(t, ev.RankStatus.RUNNING, "", wall)
            if parse.may_have_step_or_loss(blob):
                news = False
                for ln in shown:
                    step, loss, summary = parse.step_loss(ln)
                    if summary:
                        t.summary_loss = summary
                    elif step is not None or loss is not None:
                        news = t.saw_step(step, loss, mono, wall) or news
                if news:  # one progress event per batch, not per line: the UI samples, the record keeps every line
                    assert rank is not None  # t is its track
                    self._pending_progress[rank] = (wall, "parsed")
        if self.s.matcher is not None and shown:
            for ln, hint in self.s.matcher.feed_many(rank, shown, blob):
                self.s.hint(hint, rank, ln, wall)
        if rank is None and self.s.xla_rdv is not None and shown:
            self._xla_lines(shown, blob, wall)
        return shown

    def _say_phase(self, t, phase, wall: float) -> None:
        # only before its first step: a program that initialises again later is training, not starting
        if phase in PHASES and t.step is None and t.alive and self._phase.get(t.rank) != phase:
            self._phase[t.rank] = phase
            t.phase, t.phase_mono = phase, self.s.mono
            self.s.emit(ev.RankPhase(t.rank, phase, wall))

    def _report(self, rep: dict, line_rank: int | None, wall: float, mono: float) -> None:
        r = rep.get("r")
        if rep.get("k") == "hello" and "attempt" in rep:
            self.on_attempt(rep["attempt"])  # a restarted rank: its attempt begins (fresh tracks) before its hello
        rank = r if isinstance(r, int) and r in self.s.tracks else line_rank
        t = self.s.tracks.get(rank) if rank is not None else None
        if t is None or rank is None:
            if rank is None and rep.get("k") == "phase" and self.s.xla_rdv is not None:
                for hosted in self.s.tracks.values():  # an XLA worker's own start-up: its replicas not yet begun
                    if not hosted.ran:
                        self._say_phase(hosted, rep.get("phase"), wall)
            return
        t.ran = True  # its own report (XLA thread replicas share one pid: each says hello for itself)
        kind = rep.get("k")
        if kind == "hello":
            if isinstance(rep.get("pid"), int):
                t.pid = rep["pid"]
            t.host = str(rep.get("host", ""))
            t.node = str(rep.get("node") or t.host)  # a rank of an older inject names no node: its host is one
            self.s.emit(ev.RankHello(rank, t.pid or 0, t.host, int(rep.get("world") or self.s.world), wall,
                                     node=t.node))
            world_view.hello(self.s, rank, rep.get("world"))
        elif kind in ("step", "loss"):
            pairs = rep.get("steps")  # a rank's batched [[step, loss], ...] since its last report
            if not isinstance(pairs, list):
                pairs = [(rep.get("step"), rep.get("loss"))]
            news, steps = False, []
            for pair in pairs:
                step, loss = pair if isinstance(pair, (list, tuple)) and len(pair) == 2 else (None, None)
                step = step if isinstance(step, int) else None
                loss = loss if isinstance(loss, (int, float)) else None
                news = t.saw_step(step, loss, mono, wall, reported=True) or news
                if step is not None:
                    steps.append(step)
            take_report(t.clock, rep, steps, mono)  # step time by the rank's own clock (`at`, `dt`)
            b = rep.get("b")
            if isinstance(b, int) and not isinstance(b, bool) and b > 0:
                t.samples = b
            if news:
                self._pending_progress[rank] = (wall, "hook" if kind == "step" else "report")
        elif kind == "first_digest":
            self.s.first_digests.setdefault(rank, (rep.get("params") or [], str(rep.get("source") or "")))
        elif kind == "replica_digest":
            self._replica_digest(rank, rep, wall)
        elif kind == "digest":
            if t.digests is None or rep.get("source") == "explicit":
                t.digests = rep.get("params") or []
        elif kind == "verdict":
            t.verdict = {"ok": bool(rep.get("ok")), "text": str(rep.get("text", ""))}
        elif kind == "phase":
            self._say_phase(t, rep.get("phase"), wall)
        elif kind == "debug_server":
            path = rep.get("path")
            if isinstance(path, str) and path and path != t.debug_sock:
                t.debug_sock = path
                self.s.emit(ev.DebugServer(rank, path, wall))
        elif kind == "coll":
            if collectives.merge(t.collectives, rep.get("pgs")):
                self._coll_changed[rank] = wall
            if t.step is not None:  # the rank flushes its steps before any report: this is its step now
                t.coll_marks.append((t.step, {pg: e["enqueued"] for pg, e in t.collectives.items()}))
        elif kind == "exc":
            t.exc = rep
            if t.first_failure_wall is None:
                t.first_failure_wall = wall

    def _replica_digest(self, rank: int, rep: dict, wall: float) -> None:
        """A rank's digests at a live check: compared once every rank watched here reported that step."""
        step, params = rep.get("step"), rep.get("params")
        if not isinstance(step, int) or not isinstance(params, list):
            return
        s = self.s
        found = s.live_replicas.add(rank, step, params, frozenset(s.tracks))
        if found is None:
            return
        stop = s.profile.on_divergence == "stop"
        s.diverged = ev.ReplicaDiverged(found.text, found.step, found.since, found.param, found.ranks, found.agree,
                                        stop, wall)
        s.emit(s.diverged)
        s.divergence_stop = stop

    def _torchrun_summary(self, text: str) -> list[str]:
        """torchrun's own lines are evidence about ranks we did not start ourselves: whom it stopped and when, exit
        codes, its Root Cause. Returns the lines to show (its SignalException traceback folded into one)."""
        s = self.s
        log = s.launcher_log
        log.now = s.wall
        shown = log.feed(text, we_signalled=s.tearing_down)
        if log.changed:
            log.changed = False
            self.life.exit_codes(log.exit_codes(s.pid_ranks(), s.world if s.one_launcher else None))
        return shown

    def _xla_lines(self, lines: list[str], blob: str, wall: float) -> None:
        """XLA's rendezvous warnings (runners/evidence/xla_evidence.py): XLA has no Flight Recorder, its warnings are the record."""
        rdv = self.s.xla_rdv
        assert rdv is not None  # read only on an XLA run (_interpret)
        if xla_evidence.NEEDLE not in blob and not (rdv.keys and ("Fatal Python" in blob or " in _" in blob)):
            return
        for ln in lines:
            rl = rdv.feed(ln, wall)
            if rl is not None and rl.kind == "terminated" and self.s.profile.xla.pjrt_device == "CPU":
                self.life.xla_worker_aborts(wall)
