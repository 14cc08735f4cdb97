"""Every decision of a run, with no I/O, so that each can be tested without processes (session.py does the I/O)."""
from __future__ import annotations

import time
from dataclasses import dataclass

from . import events as ev
from . import parse, replica, run_verdicts, xla_evidence
from . import stall as stall_rule
from .crash import RankEvidence, ended_by, ended_by_our_stop, signal_of, stopped_words
from .launcher_log import TorchrunLog
from .rank_track import RankTrack, find_slow
from .steptime import pace_known, slowed_down, slowed_together, take_report

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_STALLED, EXIT_REPLICAS = 0, 1, 2, 3, 4
CRASH_GRACE = 5.0  # seconds survivors get to fail on their own after a rank died, before we tear them down
SLOW_SAMPLES = 3  # stack samples taken at most to single out the slow rank of a run slowed in lock-step


@dataclass(frozen=True)
class CollectStacks:
    """Take every live rank's stacks now and hand them to `Judge.stacks_collected` with this request.

    stalled/since: the stalled ranks (a verdict is wanted); slowed: the SlowDowns of a run that still moves."""
    why: str  # "stall", "slow", "on request": also the stack folder's name
    stalled: tuple[int, ...] | None = None
    since: float | None = None
    slowed: tuple | None = None

    @property
    def judged(self) -> str:
        """What the stacks are for: "slow", "stall" (a verdict is read from them) or "on request" (none)."""
        return "slow" if self.slowed is not None else "stall" if self.stalled is not None else "on request"


@dataclass(frozen=True)
class TearDown:
    """End the run: tear every process down, with this status and exit code unless the conclusion says worse."""
    status: str
    exit_code: int


@dataclass(frozen=True)
class Launcher:
    """A process of the plan that is not a rank (torchrun, the XLA spawner), as the conclusion needs it."""
    name: str
    returncode: int | None


class Judge:
    """The rank tracks of one run and every decision made from them.

    What was read, exited, died, sampled and collected goes in, with the clock (`tick`, or the wall/mono of the
    lines read): the judge never reads a clock, a file, a process or psutil. Each input method returns the outputs
    it caused, in order: `events.Event`s (ddptui's own lines as `LogLines` of rank None), `CollectStacks` and
    `TearDown`; runners/session.py emits and records the events and carries out the requests.
    """

    def __init__(self, profile, mono: float, wall: float, matcher=None) -> None:
        self.profile = profile
        self.world = profile.world_size
        self.tracks: dict[int, RankTrack] = {}
        self.matcher = matcher  # runners.hints.HintMatcher, or None: no hints
        self.mono, self.wall = mono, wall
        self.started_mono = mono
        self.hints: list[dict] = []
        self.stall_info: dict | None = None
        self.slow_info: dict | None = None  # the slow ranks named, once per run
        self.hang: ev.HangVerdict | None = None
        self.crash: ev.CrashVerdict | None = None
        self.replica: ev.ReplicaVerdict | None = None
        self.first_digests: dict[int, tuple[list, str]] = {}  # rank -> (digests before its first update, source)
        self.launcher_log = TorchrunLog()  # what torchrun says about its ranks
        self.died_at: dict[int, float] = {}  # pid -> wall time the death watch saw it die
        self.first_failure: float | None = None  # monotonic time the first rank failed
        self.tearing_down = False
        self.stop_at: float | None = None  # wall time ddptui began signalling the run's processes (its teardown)
        self.stop_why: str | None = None  # the run's status then: "stalled", "timeout", "stopped", "failed"
        self._one_launcher = False  # a single process runs every rank: its local ranks are the global ones
        self._slow_samples: list[float] = []  # when stacks were sampled to find the slow rank
        self._held_said = False  # the current stall hold (busy ranks past their limit) was said
        self._cpu_pid: dict[int, int] = {}  # rank -> pid its CPU history belongs to
        self._pending_progress: dict[int, tuple[float, str]] = {}  # rank -> (wall, source), one event per flush
        # XLA's rendezvous warnings in the worker's log: collective evidence (runners/xla_evidence.py)
        self.xla_rdv = xla_evidence.Rendezvous() if profile.runner == "xla" else None
        self._out: list = []

    # ---- plumbing ------------------------------------------------------------------------------------
    def _take(self) -> list:
        out, self._out = self._out, []
        return out

    def tick(self, mono: float, wall: float) -> None:
        """The clock, now."""
        self.mono, self.wall = mono, wall

    def say(self, text: str) -> list:
        """A launcher line (ddptui's own words), at the judge's clock."""
        self._say(text)
        return self._take()

    def _say(self, text: str) -> None:
        self._out.append(ev.LogLines(None, "err", self.wall, self.mono, (text,)))

    def _emit(self, e) -> None:
        self._out.append(e)

    def begin(self, world: int, processes: int) -> list:
        """Ranks 0..world-1 are tracked from now; `processes`: how many processes the plan starts."""
        self.world = world
        self._one_launcher = processes == 1
        now = self.mono
        self.tracks = {r: RankTrack(r, now, last_progress=now, steps_total=self.profile.steps) for r in range(world)}
        return self._take()

    def progress(self) -> list:
        """The Progress events coalesced since the last call: one per rank that moved (the UI samples them)."""
        for rank, (wall, source) in sorted(self._pending_progress.items()):
            t = self.tracks[rank]
            self._emit(ev.Progress(rank, t.step, t.loss, wall, source, t.take_new_losses()))
        self._pending_progress.clear()
        return self._take()

    def process_started(self, pid: int, stdout_rank: int | None) -> None:
        if stdout_rank is not None:
            self.tracks[stdout_rank].pid = pid

    # ---- reading lines -------------------------------------------------------------------------------
    def lines(self, rank: int | None, stream: str, lines: list[str], wall: float, mono: float) -> list:
        """Lines read from one source in one go (rank None: a launcher's own output). Returns their LogLines (with
        reports taken out) and whatever they caused: progress is coalesced until `progress()`."""
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
                groups.setdefault(r if r in self.tracks else None, []).append(text)
        else:
            groups[rank] = lines
        out = self._out
        for r, group in groups.items():
            shown = self._interpret(r, stream, group, wall, mono, blob if group is lines else None)
            if shown:
                out.append(ev.LogLines(r, stream, wall, mono, tuple(shown)))
        return self._take()

    def _interpret(self, rank: int | None, stream: str, lines: list[str], wall: float, mono: float,
                   blob: str | None = None) -> list[str]:
        """Reports are taken out of the shown log; steps, losses and hints are read from the rest."""
        t = self.tracks.get(rank) if rank is not None else None
        shown = lines
        if blob is None:
            blob = "\n".join(lines)  # one C-speed pass answers "is there anything to look at?" for the batch
        if parse.has_marker(blob) and parse.REPORT in blob:
            shown = []
            for ln in lines:
                rep = parse.report(ln)
                if rep is None and parse.REPORT in ln:
                    ln, rep = parse.unglue_report(ln)
                    if rep is not None and ln:
                        shown.append(ln)
                if rep is None:
                    shown.append(ln)
                else:
                    self._report(rep, rank, wall, mono)
            blob = "\n".join(shown)
        if t is not None:
            t.saw_output(mono, wall)
            t.tail.extend(shown[-40:])
            if stream == "err":
                t.err_tail.extend(shown[-80:])
            if t.status == "starting":
                self._set_status(t, "running", "", wall)
            if parse.may_have_step_or_loss(blob):
                news = False
                for ln in shown:
                    step, loss, summary = parse.step_loss(ln)
                    if summary:
                        t.summary_loss = summary
                    elif step is not None or loss is not None:
                        news = t.saw_step(step, loss, mono, wall) or news
                if news:  # one progress event per batch, not per line: the UI samples, the record keeps every line
                    self._pending_progress[rank] = (wall, "parsed")
        if self.matcher is not None and shown:
            for ln, hint in self.matcher.feed_many(rank, shown, blob):
                self._hint(hint, rank, ln, wall)
        if rank is None and self.xla_rdv is not None and shown:
            self._xla_lines(shown, blob, wall)
        return shown

    def _report(self, rep: dict, line_rank: int | None, wall: float, mono: float) -> None:
        r = rep.get("r")
        rank = r if isinstance(r, int) and r in self.tracks else line_rank
        t = self.tracks.get(rank) if rank is not None else None
        if t is None:
            return
        t.ran = True  # its own report (XLA thread replicas share one pid: each says hello for itself)
        kind = rep.get("k")
        if kind == "hello":
            if isinstance(rep.get("pid"), int):
                t.pid = rep["pid"]
            t.host = str(rep.get("host", ""))
            self._emit(ev.RankHello(rank, t.pid or 0, t.host, int(rep.get("world") or self.world), wall))
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
            if news:
                self._pending_progress[rank] = (wall, "hook" if kind == "step" else "report")
        elif kind == "first_digest":
            self.first_digests.setdefault(rank, (rep.get("params") or [], str(rep.get("source") or "")))
        elif kind == "digest":
            if t.digests is None or rep.get("source") == "explicit":
                t.digests = rep.get("params") or []
        elif kind == "verdict":
            t.verdict = {"ok": bool(rep.get("ok")), "text": str(rep.get("text", ""))}
        elif kind == "exc":
            t.exc = rep
            if t.first_failure_wall is None:
                t.first_failure_wall = wall

    def _torchrun_summary(self, text: str) -> list[str]:
        """torchrun's own lines are evidence about ranks we did not start ourselves: whom it stopped and when, exit
        codes, its Root Cause. Returns the lines to show (its SignalException traceback folded into one)."""
        log = self.launcher_log
        log.now = self.wall
        shown = log.feed(text, we_signalled=self.tearing_down)
        if log.changed:
            log.changed = False
            for rank, code in log.exit_codes(self._pid_ranks(), self.world if self._one_launcher else None):
                t = self.tracks.get(rank)
                if t is not None and t.returncode is None:
                    t.returncode, t.signal = code, signal_of(code)
                    if t.exit_wall is not None:  # its death was seen before its exit code was known
                        self._rank_ended(t, False)
        return shown

    def _pid_ranks(self) -> dict[int, int]:
        return {t.pid: t.rank for t in self.tracks.values() if t.pid}

    def _hint(self, hint, rank, line: str, wall: float) -> None:
        p = self.profile
        if hint.code == "xla-rendezvous-deadlock" and p.runner == "xla" and not p.xla.async_client:
            return  # the recipe is already applied: the warning comes from a real hang, which the verdict names
        self.hints.append({"code": hint.code, "title": hint.title, "explanation": hint.explanation,
                           "fix": hint.fix, "rank": rank, "line": line[:500]})
        self._emit(ev.HintRaised(hint.code, hint.title, hint.explanation, hint.fix, rank, line[:500], wall))

    def _raise_hint(self, code: str, rank, line: str) -> None:
        if self.matcher is not None:
            hint = self.matcher.raise_code(code)
            if hint is not None:
                self._hint(hint, rank, line, self.wall)

    # ---- process and rank state ----------------------------------------------------------------------
    def _set_status(self, t: RankTrack, status: str, detail: str, wall: float | None = None) -> None:
        if t.status != status or detail:
            t.status = status
            self._emit(ev.RankState(t.rank, status, detail, wall or self.wall))

    def watched_pids(self) -> set[int]:
        """Pids of rank processes not known to be dead: the death watch should watch them."""
        return {t.pid for t in self.tracks.values() if t.pid and t.exit_wall is None}

    def rank_pids(self) -> set[int]:
        return {t.pid for t in self.tracks.values() if t.pid}

    def deaths(self, seen: list[tuple[int, float, int | None]], own: set[int], gone: set[int] = frozenset()) -> list:
        """Rank processes that died: `seen` (pid, wall, returncode or None) as the death watch saw them, `own` the
        pids of processes ddptui started itself (their exit code comes with `process_exited`), `gone` pids found
        dead without a watch (their time is now)."""
        alive: dict[int, list[RankTrack]] = {}  # several ranks share a pid when they are threads (XLA on CPU)
        for t in self.tracks.values():
            if t.pid and t.exit_wall is None and t.pid not in own:
                alive.setdefault(t.pid, []).append(t)
        for pid, wall, rc in sorted(seen, key=lambda d: d[1]):  # in the order they really died
            self.died_at.setdefault(pid, wall)
            for t in alive.pop(pid, []):
                if t.returncode is None and rc is not None:
                    t.returncode, t.signal = rc, signal_of(rc)
                self._rank_died(t, wall)
        for pid in sorted(gone):
            for t in alive.pop(pid, []):
                self._rank_died(t, self.wall)
        return self._take()

    def _rank_died(self, t: RankTrack, wall: float) -> None:
        t.exit_wall = wall
        if t.returncode is not None:
            self._rank_ended(t, False)
        elif not t.completed and self.first_failure is None and t.exc is not None:
            self.first_failure = self.mono

    def process_exited(self, name: str, ranks, pid: int, returncode: int, exited: float | None, launcher: bool,
                       torn_down: bool = False) -> list:
        """A process ddptui started exited (`launcher`: it starts ranks rather than being one); feed `deaths` first."""
        sig = signal_of(returncode)
        self._emit(ev.ProcessExited(name, tuple(ranks), returncode, sig, exited or self.wall))
        for r in ranks:
            t = self.tracks[r]
            if t.exit_wall is not None and not launcher:
                continue
            if launcher and t.returncode is None:
                # the launcher exits 0 only if every rank did; otherwise ranks without a failure entry were stopped by it
                t.returncode = 0 if returncode == 0 else None
            elif not launcher:
                t.returncode, t.signal = returncode, sig
                t.exit_wall = self.died_at.get(pid)  # when it died, not the loop turn that noticed it
            t.exit_wall = t.exit_wall or exited
            self._rank_ended(t, torn_down or (launcher and t.returncode is None))
        return self._take()

    def _rank_ended(self, t: RankTrack, stopped: bool) -> None:
        """Its status when it ended, from what is known now; the crash verdict settles it at the end."""
        if t.status in ("exited", "failed", "killed"):
            return
        rc = t.returncode
        own_error = t.first_failure_wall is not None or t.exc is not None
        by_launcher = self.launcher_log.pid_stopped(t.pid)
        stop_signal = t.signal in ("SIGTERM", "SIGINT") and self.first_failure is not None
        failed = [x for x in self.tracks.values() if x.status == "failed"]
        first = min(failed, key=lambda x: x.first_failure_wall or self.wall) if failed else None
        if rc == 0:
            t.outcome = "exited 0"
            self._set_status(t, "exited", "exit 0")
        elif self._ended_by_our_stop(t, stopped):  # ddptui's own signal (or a launcher passing it on): not a failure
            words = stopped_words(self.stop_why, first.rank if first else None)
            t.outcome = words if t.ran else f"never started ({words})"
            self._set_status(t, "killed", t.outcome)
        elif rc is not None and rc < 0 and t.completed and not stopped:
            t.outcome = f"completed, then died at exit ({t.signal})"
            self._set_status(t, "exited", t.outcome)
            self._hint_exit(t)
        elif not own_error and (stopped or by_launcher or stop_signal):
            if not t.ran:  # not a line, not a report (the hello either): its program never ran
                t.outcome = "never started"
            else:
                t.outcome = ended_by("ddptui" if self.tearing_down and stopped else "launcher",
                                     first.rank if first else None)
            self._set_status(t, "killed", t.outcome)
        else:
            what = t.signal or (f"exit {rc}" if rc is not None else "exit ?")
            t.outcome = f"failed ({what})"
            t.first_failure_wall = min(t.first_failure_wall or t.exit_wall or self.wall, t.exit_wall or self.wall)
            if self.first_failure is None:
                self.first_failure = self.mono
            self._set_status(t, "failed", what)
            self._hint_exit(t)

    def _ended_by_our_stop(self, t: RankTrack, stopped: bool) -> bool:
        """It died after ddptui began tearing the run down, with no error of its own before (crash.ended_by_our_stop);
        with no death time known, `stopped` during the teardown says so."""
        if t.exit_wall is None:
            return stopped and self.tearing_down
        return ended_by_our_stop(RankEvidence(t.rank, t.returncode, died_at=t.exit_wall,
                                              error_at=t.first_failure_wall), self.stop_at)

    def _hint_exit(self, t: RankTrack) -> None:
        if self.matcher is not None and t.returncode is not None:
            p = self.profile
            hint = self.matcher.for_exit(t.rank, t.returncode, completed=t.completed,
                                         in_process=p.runner == "mirage" and p.mirage.in_process, env=p.env)
            if hint is not None:
                self._hint(hint, t.rank, t.outcome, self.wall)

    def teardown_began(self, why: str | None = None) -> None:
        """ddptui begins signalling the run's processes now (`why`: the run's status, when it decided to)."""
        if why is not None:
            self.stop_why = why
        self.tearing_down = True
        if self.stop_at is None:
            self.stop_at = self.wall

    # ---- resources -----------------------------------------------------------------------------------
    def sample_targets(self) -> dict[int, int | None]:
        """rank -> its pid (None: not known yet, its launcher's stands in) for every live rank to sample."""
        return {t.rank: t.pid for t in self.tracks.values() if t.alive}

    def resources(self, samples: dict[int, tuple[int, float, float, int]], emit: bool = True) -> list:
        """samples: rank -> (pid sampled, mono, CPU seconds, RSS bytes). Each rank's CPU seconds are kept for the
        stall rule's busy test; with `emit`, CPU % and RSS of the ranks whose own pid is known."""
        cpu, rss = {}, {}
        for rank, (pid, mono, used, size) in samples.items():
            t = self.tracks[rank]
            if self._cpu_pid.get(rank) != pid:  # another process now (started, restarted): history starts over
                self._cpu_pid[rank] = pid
                t.cpu_hist.clear()
            prev = t.cpu_hist[-1] if t.cpu_hist else None
            t.cpu_hist.append((mono, used))
            if t.pid:
                cpu[rank] = 100.0 * (used - prev[1]) / (mono - prev[0]) if prev and mono > prev[0] else 0.0
                rss[rank] = size
        if cpu and emit:
            self._emit(ev.Resources(cpu, rss, self.wall))
        return self._take()

    # ---- decisions -----------------------------------------------------------------------------------
    def busy_test_due(self) -> bool:
        """A rank is past its quiet limit: `check` will want the machine's cores and load, and, while no stall is
        said yet (`stall_info` None), CPU seconds sampled as of now rather than as of the last periodic sample."""
        return self.first_failure is None and stall_rule.any_over(
            stall_rule.quiet_ranks(self.profile, self.tracks.values(), self.mono, with_cpu=False))

    def check(self, cores: int = 1, load: float = 0.0) -> list:
        """The periodic decisions at the judge's clock: timeout, crash grace, stall / held / cleared, slow-down.
        cores/load: the cores ddptui may use and the 1-minute load average (the busy test's floor)."""
        p = self.profile
        mono = self.mono
        if p.timeout and mono - self.started_mono > p.timeout:
            self._say(f"ddptui: timeout of {p.timeout:g} s reached, tearing every rank down")
            self._emit(TearDown("timeout", EXIT_FAILED))
            return self._take()
        if self.first_failure is not None and mono - self.first_failure > CRASH_GRACE:
            live = [t.rank for t in self.tracks.values() if t.alive]
            if live:
                self._say(f"ddptui: a rank failed {CRASH_GRACE:g} s ago; tearing down survivors "
                          + ", ".join(map(str, live)))
                self._emit(TearDown("failed", EXIT_FAILED))
                return self._take()
        if self.first_failure is None:
            found = self._xla_stall(self._judge_stall(cores, load))
            if isinstance(found, stall_rule.Stall) and self.stall_info is None:
                self._stalled(found)
                return self._take()
            if isinstance(found, stall_rule.Held) and self.stall_info is None and not self._held_said:
                self._held_said = True
                self._say(f"ddptui: {found.reason}")
            if found is None:
                self._held_said = False
                if self.stall_info is not None:
                    ended, self.stall_info = self.stall_info, None  # it moved again: a later stall is a new one
                    self._emit(ev.StallCleared(tuple(ended["stalled"]), self.wall))
                    for t in self.tracks.values():
                        if t.stalled:
                            t.stalled = False
                            self._set_status(t, "running", "progressing again")
            self._check_slow()
        return self._take()

    def _judge_stall(self, cores: int, load: float):
        """None, a Stall, or Held: ranks past their limit while a quiet one still burns CPU."""
        tracks = self.tracks.values()
        if not stall_rule.any_over(stall_rule.quiet_ranks(self.profile, tracks, self.mono, with_cpu=False)):
            return None
        floor = stall_rule.busy_floor(cores, len(stall_rule.live_tracks(tracks)), load)
        return stall_rule.judge(stall_rule.quiet_ranks(self.profile, tracks, self.mono), floor)

    def _stalled(self, found) -> None:
        wall, mono = self.wall, self.mono
        stalled, progressing, limit = found.stalled, found.progressing, found.trigger.limit
        # a rank that never wrote a line: its quiet time counts from the start
        since = min(self.tracks[r].last_progress_wall or wall - (mono - self.tracks[r].last_progress) for r in stalled)
        self.stall_info = {"stalled": stalled, "progressing": progressing, "threshold": limit.seconds,
                           "rule": limit.rule, "reason": found.reason, "trigger": found.trigger.rank,
                           "detected": wall, "since": since}
        for q in found.quiet:
            if q.rank in stalled:
                t = self.tracks[q.rank]
                t.stalled = True
                self._set_status(t, "stalled", f"no step or output for {q.quiet:.0f} s ({q.limit.rule})"
                                 + ("" if q.cpu is None else f", {q.cpu * 100:.0f} % of a core"))
        self._emit(ev.StallDetected(tuple(stalled), tuple(progressing), since, limit.seconds, wall, found.reason))
        if self.profile.runner == "mirage" and self.world > 1:
            self._raise_hint("mirage-multigpu-hang", None, "stall under mirage with several GPUs")
        if self.profile.on_stall == "wait":
            self._hang_without_stacks(stalled, since)
            return
        self._emit(CollectStacks("stall", tuple(stalled), since))  # on_stall=stop tears down once they are in

    def _check_slow(self) -> None:
        """Name a rank whose steps got SLOWER x its own early steps (by its own clock), or a straggler, once."""
        if self.slow_info is not None:
            return
        lag = find_slow(self.tracks.values())
        if lag:
            lead = max(t.step for t in self.tracks.values() if t.alive and t.step is not None)
            for r in lag:
                self._set_status(self.tracks[r], "slow", f"at step {self.tracks[r].step}, "
                                 f"{lead - self.tracks[r].step} steps behind the lead ({lead})")
            self._slow_named(lag, f"{_ranks_word(lag)} far behind the other ranks (lead at step {lead})")
            return
        clocks = {t.rank: t.clock for t in self.tracks.values() if t.alive and not t.completed}
        downs = slowed_down(clocks)
        if not downs or not pace_known(downs, clocks):
            return  # nothing slowed, or the others have not reported as far yet: together or alone is not known
        if not slowed_together(downs, clocks):
            self._slow_ranks(downs, "")  # the others kept their pace: no doubt which ranks are slow
            return
        # Every rank slowed together (lock-step collectives): the slow one is the rank whose own work grew, the
        # one NOT waiting in a collective when sampled. A sample can catch it in the collective too: up to 3.
        if self._slow_samples and (len(self._slow_samples) >= SLOW_SAMPLES or self.mono - self._slow_samples[-1] < 1.0):
            return
        if not self._slow_samples:
            self._say("ddptui: every rank's steps got slower (" + "; ".join(d.text() for d in downs)
                      + "); sampling stacks to find the rank whose own work grew")
        self._slow_samples.append(self.mono)
        self._emit(CollectStacks("slow", slowed=tuple(downs)))  # a sample's verdict: summary.json's slow, never its hang

    def _slow_sampled(self, downs, hv) -> None:
        culprits = set(hv.culprits) if hv is not None else set()
        named = [d for d in downs if d.rank in culprits]
        if named:
            self._slow_ranks(named, " (every rank slowed in lock-step; it is the one not waiting in a collective)")
        elif len(self._slow_samples) >= SLOW_SAMPLES:
            self._slow_ranks(downs, f" (every rank slowed in lock-step; {SLOW_SAMPLES} stack samples did not single "
                                    "one out)")
        if self.slow_info is not None and hv is not None:
            self.slow_info["verdict"] = {"text": hv.text, "culprits": list(hv.culprits), "waiting": list(hv.waiting),
                                         "where": hv.where, "stacks": hv.path}

    def _slow_ranks(self, downs, why: str) -> None:
        for d in downs:
            self._set_status(self.tracks[d.rank], "slow", d.detail())
        self._slow_named([d.rank for d in downs], "; ".join(d.text() for d in downs) + why)

    def _slow_named(self, ranks, text: str) -> None:
        self.slow_info = {"ranks": list(ranks), "text": text, "wall": self.wall}
        self._say(f"ddptui: {text}")

    # ---- stacks and verdicts -------------------------------------------------------------------------
    def stack_targets(self) -> list[tuple[int, int]]:
        """(rank, pid) of every live rank whose pid is known: whose stacks can be taken."""
        return [(t.rank, t.pid) for t in self.tracks.values() if t.pid and t.alive]

    def dump_requested(self) -> list:
        """`d`, `ddptui dump`, SIGUSR1: stacks now; a verdict only while the run is actually stalled."""
        st = self.stall_info
        if st is None:
            return [CollectStacks("on request")]
        return [CollectStacks("on request", tuple(st["stalled"]), st["since"])]

    def stacks_collected(self, req: CollectStacks, results: dict | None, folder: str | None) -> list:
        """The stacks `req` asked for, taken and recorded in `folder` (results: rank -> stacks.StackResult; None: no
        live rank to take them from). Returns the verdict read from them, and what the request was for."""
        hv = self._stack_verdict(req, results, folder)
        if req.why == "slow":
            self._slow_sampled(req.slowed, hv)
        elif req.why == "stall" and self.profile.on_stall == "stop":
            self._say("ddptui: on_stall=stop: stacks collected, tearing every rank down")
            self._emit(TearDown("stalled", EXIT_STALLED))
        return self._take()

    def _stack_verdict(self, req: CollectStacks, results: dict | None, folder: str | None):
        if results is None:
            self._say("ddptui: no live rank to collect stacks from")
            return None
        slow = req.slowed is not None
        if req.judged == "on request":
            from .hang_verdict import ranks_text
            self._say(f"ddptui: stacks of {ranks_text(sorted(results))} recorded in {folder} "
                      "(no rank is stalled: no verdict)")
            return None
        where = run_verdicts.wheres(self.profile, results)
        if not where and not slow:
            self._hang_without_stacks(req.stalled or (), req.since or self.wall)
            return self.hang
        steps = {r: t.step for r, t in self.tracks.items()}
        since = req.since or self.wall
        text, culprits, waiting = run_verdicts.stack_sentence(where, steps, req.stalled, since, req.slowed)
        if not slow and self.xla_rdv is not None:
            calls = run_verdicts.xla_calls(self.profile, results)
            self._xla_fix_hint(calls, culprits)
            text, culprits, waiting = run_verdicts.with_xla(self.xla_rdv, text, culprits, waiting, where, calls, steps)
        hv = run_verdicts.hang_event(text, culprits, waiting, where, steps, self.wall, folder, slow)
        if not slow:
            self.hang = hv  # the run's hang verdict comes from stalls only
        self._emit(hv)
        self._say(f"ddptui: {hv.text}")
        return hv

    def _hang_without_stacks(self, stalled, since: float) -> None:
        if self.xla_rdv is not None:
            self._xla_fix_hint({}, ())
        self.hang = run_verdicts.hang_without_stacks(stalled, {r: self.tracks[r].step for r in stalled}, since,
                                                     self.xla_rdv, self.wall)
        self._emit(self.hang)
        self._say(f"ddptui: {self.hang.text}")

    # ---- XLA rendezvous evidence (runners/xla_evidence.py): XLA has no Flight Recorder, its warnings are the record
    def _replica_kind(self) -> str:
        """Who could have made the initial weights equal: "xla" (nothing, unless the program broadcasts), "ddp"
        (DistributedDataParallel broadcast them when it wrapped the model) or "plain"."""
        if self.profile.runner == "xla":
            return "xla"
        return "ddp" if any(src == "ddp" for _, src in self.first_digests.values()) else "plain"

    def _xla_lines(self, lines: list[str], blob: str, wall: float) -> None:
        rdv = self.xla_rdv
        if xla_evidence.NEEDLE not in blob and not (rdv.keys and ("Fatal Python" in blob or " in _" in blob)):
            return
        for ln in lines:
            rl = rdv.feed(ln, wall)
            if rl is not None and rl.kind == "terminated" and self.profile.xla.pjrt_device == "CPU":
                self._xla_worker_aborts(wall)

    def _xla_worker_aborts(self, wall: float) -> None:
        """XLA's termination timeout is a FATAL log line: abort() of the one worker process, every thread replica in it.
        A replica that raised keeps its own exception as its cause."""
        for t in self.tracks.values():
            if t.alive and t.returncode is None and t.exc is None and not t.completed:
                t.returncode, t.signal = -6, "SIGABRT"
                t.exit_wall = t.exit_wall or wall
                self._rank_ended(t, False)

    def _xla_stall(self, found):
        """XLA's rendezvous warning (5 s into a collective wait) is a stall now, whatever the progress limits say: XLA
        aborts the worker 10 s later, and the stacks must be taken before that."""
        rdv = self.xla_rdv
        if rdv is None or not rdv.keys or isinstance(found, stall_rule.Stall):
            return found
        rdv.steps_now({r: t.step for r, t in self.tracks.items()})
        if not rdv.stalled or rdv.terminated or any(t.exc is not None for t in self.tracks.values()):
            return found  # settled, too late, or a replica raised: the others wait for it in vain (a crash)
        live = stall_rule.live_tracks(self.tracks.values())
        if not live:
            return found
        waited = max(0.0, self.wall - (rdv.since or self.wall))
        limit = stall_rule.Limit(waited, f"XLA rendezvous warning: {rdv.describe()}")
        quiet = tuple(stall_rule.Quiet(t.rank, self.mono - t.last_progress, limit, None) for t in live)
        trigger = max(quiet, key=lambda q: q.quiet)
        reason = (f"XLA warns that {rdv.describe()} has waited {waited:.0f} s for replicas that did not arrive "
                  f"(rendezvous.cc, since {time.strftime('%H:%M:%S', time.localtime(rdv.since))})")
        return stall_rule.Stall(stalled=sorted(q.rank for q in quiet), progressing=[], trigger=trigger, reason=reason,
                                quiet=quiet)

    def _xla_fix_hint(self, calls: dict, culprits=()) -> None:
        """DDP's own collectives on PJRT CPU thread replicas: the project knows the fix (profiles/xla-ddp-backend.yaml)."""
        x = self.profile.xla
        if self.matcher is None or x.pjrt_device != "CPU" or x.num_devices < 2:
            return
        if xla_evidence.ddp_collective(self.xla_rdv, calls, tuple(culprits)):
            self._raise_hint("xla-ddp-thread-collectives", None, self.xla_rdv.lines[0] if self.xla_rdv.lines else "")

    # ---- the conclusion ------------------------------------------------------------------------------
    def settle(self) -> list:
        """At the end: a launcher traceback still held back is shown; every rank not ended yet ends now."""
        held = self.launcher_log.flush()
        if held:
            self._emit(ev.LogLines(None, "err", self.wall, self.mono, tuple(held)))
        for t in self.tracks.values():
            if t.alive and t.exit_wall is None:
                t.exit_wall = self.wall
            if t.status not in ("exited", "failed", "killed"):
                self._rank_ended(t, stopped=True)
        return self._take()

    def oom_suspects(self) -> list[int]:
        """Pids killed by SIGKILL that nobody we know of sent: whether the kernel's OOM killer did is worth a look."""
        return [t.pid for t in self.tracks.values()
                if t.pid and t.signal == "SIGKILL" and self._stopped_by(t) is None]

    def _stopped_by(self, t: RankTrack) -> str | None:
        if self._ended_by_our_stop(t, "by ddptui" in t.outcome):
            return "ddptui"
        if self.launcher_log.pid_stopped(t.pid):
            return "launcher"
        return None

    def conclude(self, status: str | None, exit_code: int | None, launchers: list[Launcher] = (),
                 oom: dict[int, str] | None = None, recorded: dict[int, dict] | None = None) -> tuple[list, str, int]:
        """The run's conclusion after `settle`: the replica verdict, the crash verdict, the status and exit code.

        status/exit_code: what ended the run (a TearDown's), or None when every process exited on its own;
        launchers: the plan's non-rank processes; oom: pid -> the OOM evidence of `oom_suspects()`; recorded: rank
        -> the error it recorded in torchrun's error file (torch's @record), for ranks with no exception report."""
        oom, recorded = oom or {}, recorded or {}
        rep = None
        if self.profile.replica_check:
            res = replica.compare({r: t.digests for r, t in self.tracks.items() if t.digests is not None},
                                  self.world, {r: d for r, (d, _) in self.first_digests.items()}, self._replica_kind())
            if res.hint:
                self._raise_hint(res.hint, None, res.text)
            text = res.text
            if status is not None or any(t.status == "failed" and not t.completed for t in self.tracks.values()):
                text += " (digests taken when the ranks exited, not after a completed run)"
            rep = ev.ReplicaVerdict(res.status, text, res.param, res.ranks, res.params, res.table, self.wall)
            self._emit(rep)
        self.replica = rep
        if status in (None, "failed"):
            self.crash = self._crash_verdict(oom, recorded)
            self.crash = self._xla_abort_verdict(self.crash)
        else:
            self.crash = None
        if self.crash and rep is not None and rep.status == "differ" and not any(
                t.signal or t.exc for t in self.tracks.values()):
            self.crash = None  # the ranks only exited non-zero because their own replica check failed
        if self.crash:
            self._emit(self.crash)
        all_done = all(t.completed for t in self.tracks.values())  # a launcher failing over exit-time aborts only
        dead = [pr for pr in launchers if pr.returncode and not all_done]
        for pr in dead:
            self._say(f"ddptui: launcher {pr.name} exited with {signal_of(pr.returncode) or pr.returncode}")
        if status is None:
            bad = [t for t in self.tracks.values() if t.status == "failed"] + dead
            status, exit_code = ("failed", EXIT_FAILED) if bad else ("ok", EXIT_OK)
        if rep is not None and rep.status == "differ" and status in ("ok", "failed"):
            status, exit_code = "replicas differ", EXIT_REPLICAS
        return self._take(), status, exit_code

    def _crash_verdict(self, oom: dict[int, str], recorded: dict[int, dict]) -> ev.CrashVerdict | None:
        """Who failed first, from every rank's evidence (runners/crash.py decides); each rank's outcome follows it."""
        evidence = []
        for t in self.tracks.values():
            stopped_by = self._stopped_by(t)
            exc = t.exc if t.exc is not None else recorded.get(t.rank)
            words = oom.get(t.pid, "") if t.signal == "SIGKILL" and stopped_by is None and t.pid else ""
            evidence.append(run_verdicts.rank_evidence(t, stopped_by, exc, words))
        crash, outcomes = run_verdicts.crash(evidence, self.launcher_log.root_rank, self.wall)
        for r, (status, words) in outcomes.items():
            t = self.tracks[r]
            was, t.outcome = (t.status, t.outcome), words
            if status == "failed" and was[0] != "failed":  # taken for stopped until its exit code arrived
                self._set_status(t, status, t.signal or (f"exit {t.returncode}" if t.returncode else "failed"))
                self._hint_exit(t)
            elif status == "killed" and was != (status, words):  # the verdict knows better who stopped it
                self._set_status(t, status, words)
        return crash

    def _xla_abort_verdict(self, crash):
        rdv = self.xla_rdv
        if rdv is None or not rdv.terminated:
            return crash
        culprits = self.hang.culprits if self.hang is not None else ()
        self._xla_fix_hint({}, culprits)
        crash, aborted = run_verdicts.xla_abort(crash, rdv, list(self.tracks.values()), culprits, self.wall)
        for r in aborted:
            self.tracks[r].outcome = run_verdicts.XLA_ABORTED
        return crash

    def summary(self, status: str, exit_code: int, run_dir: str, duration_s: float, cpu_s: float,
                stacks: list[str], survivors: list[str]) -> dict:
        """summary.json: the run's conclusion, every rank's end, the verdicts and hints (figures of the I/O side in)."""
        rep = self.replica
        return {
            "profile": self.profile.name, "runner": self.profile.runner, "run_dir": run_dir,
            "status": status, "exit_code": exit_code, "world_size": self.world,
            "duration_s": duration_s, "ddptui_cpu_s": cpu_s,
            "ranks": {r: {"status": t.status, "outcome": t.outcome, "returncode": t.returncode,
                          "signal": t.signal, "steps": t.step, "first_loss": t.first_loss,
                          "last_loss": t.loss, "workload_loss": t.summary_loss, "pid": t.pid,
                          "workload_verdict": t.verdict}
                      for r, t in self.tracks.items()},
            "replica": None if rep is None else {"status": rep.status, "text": rep.text, "param": rep.param,
                                                 "ranks": list(rep.ranks)},
            "stall": self.stall_info,
            "slow": self.slow_info,
            "hang": None if self.hang is None else {"text": self.hang.text, "culprits": list(self.hang.culprits),
                                                    "waiting": list(self.hang.waiting), "where": self.hang.where},
            "crash": None if self.crash is None else {"text": self.crash.text, "root_rank": self.crash.root_rank,
                                                      "victims": list(self.crash.victims), "exit": self.crash.exit,
                                                      "excerpt": list(self.crash.excerpt),
                                                      "together": list(self.crash.together),
                                                      "stopped": list(self.crash.stopped),
                                                      "never_started": list(self.crash.never_started),
                                                      "outcomes": dict(self.crash.outcomes)},
            "hints": self.hints,
            "stacks": stacks,
            "survivors": survivors,
        }


def _ranks_word(ranks) -> str:
    return f"rank {ranks[0]} is" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))} are"
