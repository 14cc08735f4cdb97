"""The periodic watch over a running run: timeout, crash grace, stall / held / cleared, slow-down and its samples."""
from __future__ import annotations

import time
from collections.abc import Callable

from .. import events as ev
from ..evidence import lockstep
from ..evidence import stall as stall_rule
from ..evidence.steptime import SLOWER, SlowDown, pace_known, slowed_down, slowed_together
from ..evidence.words import rank_list, ranks_text, seconds_words
from .rank_track import Behind, aligned_steps, behind_by, find_slow
from .run_state import EXIT_FAILED, EXIT_REPLICAS, EXIT_STALLED, CollectStacks, RunState, TearDown
from .stack_verdicts import StackVerdicts

CRASH_GRACE = 5.0  # seconds survivors get to fail on their own after a rank died, before we tear them down
SLOW_SAMPLES = 3  # stack samples taken at most to single out the slow rank of a run slowed in lock-step


class Watch:
    """Decides, at the clock of a RunState, when to stop a run, when it stalled or slowed, and which stacks to take."""

    def __init__(self, state: RunState, verdicts: StackVerdicts) -> None:
        self.s = state
        self.verdicts = verdicts
        # on_stall: stop, stacks taken: True when the launcher is to restart the hung ranks instead of a teardown
        # (runners/judge/attempts.py Attempts.end_hung, set by the Judge)
        self.restart_hung: Callable[[], bool] = lambda: False
        self.new_attempt()

    def new_attempt(self) -> None:
        """What the watch remembers of the ranks, forgotten when the launcher restarts them (a new attempt)."""
        self._slow_samples: list[float] = []  # when stacks were sampled to find the slow rank
        self._held_said = False  # the current stall hold (busy ranks past their limit) was said
        self.held: stall_rule.Held | None = None  # the hold of the last check, if any
        self._cpu_pid: dict[int, int] = {}  # rank -> pid its CPU history belongs to
        self._no_cpu: dict[int, str] = {}  # rank -> why it has no CPU sample at all (it runs on another node)
        self._slow_kind = ""  # what named them: "behind" (a straggler), "slower" (its step times), "machine" (none)
        self._host: tuple[float, int | None] | None = None  # this host's last load average and CPUs (resources)
        self._sampled: list[set[int]] = []  # the ranks each slow-down sample found outside a collective

    # ---- CPU samples (the stall rule's busy test) ----------------------------------------------------
    def sample_targets(self) -> dict[int, int | None]:
        """rank -> its pid (None: not known yet, its launcher's stands in) for every live rank to sample."""
        return {t.rank: t.pid for t in self.s.tracks.values() if t.alive}

    def resources(self, samples: dict[int, tuple[int, float, float, int]], emit: bool = True,
                  no_cpu: dict[int, str] | None = None, host_load: tuple[float, int | None] | None = None) -> None:
        """samples: rank -> (pid sampled, mono, CPU seconds, RSS bytes). Each rank's CPU seconds are kept for the
        stall rule's busy test; with `emit`, CPU % and RSS of the ranks whose own pid is known, and host_load (the
        engine host's load average and CPUs: sent even before any rank's pid is known, a start-up's load shows).
        no_cpu: rank -> why it cannot be sampled ("runs on node1"): neither busy nor idle to the busy test."""
        self._no_cpu = dict(no_cpu or {})
        if host_load is not None and self._no_cpu and all(r in self._no_cpu for r in self.sample_targets()):
            host_load = None  # every rank runs on another node: this host's load says nothing of theirs
        if host_load is not None:
            self._host = host_load
        cpu, rss, held = {}, {}, {}
        for rank, (pid, mono, used, size) in samples.items():
            t = self.s.tracks[rank]
            if self._cpu_pid.get(rank) != pid:  # another process now (its launcher's until its hello, a restart)
                self._cpu_pid[rank] = pid
                _rebase(t.cpu_hist, mono, used)
            prev = t.cpu_hist[-1] if t.cpu_hist else None
            t.cpu_hist.append((mono, used))
            if t.pid:
                cpu[rank] = 100.0 * (used - prev[1]) / (mono - prev[0]) if prev and mono > prev[0] else 0.0
                rss[rank] = size
                t.rss_peak = max(t.rss_peak or 0, size)
                held[pid] = size  # thread replicas share one process: counted once
        if held:
            self.s.rss_all_peak = max(self.s.rss_all_peak or 0, sum(held.values()))
        if (cpu or host_load is not None) and emit:
            load, cpus = host_load if host_load is not None else (None, None)
            self.s.emit(ev.Resources(cpu, rss, self.s.wall, load, cpus))

    # ---- the periodic decisions ----------------------------------------------------------------------
    def busy_test_due(self) -> bool:
        """A rank is past its quiet limit: `check` will want the machine's cores and load, and, while no stall is
        said yet (`stall_info` None), CPU seconds sampled as of now rather than as of the last periodic sample."""
        s = self.s
        return s.first_failure is None and stall_rule.any_over(
            stall_rule.quiet_ranks(s.profile, s.tracks.values(), s.mono, with_cpu=False))

    def check(self, cores: int = 1, load: float = 0.0) -> None:
        """The periodic decisions at the state's clock: timeout, crash grace, stall / held / cleared, slow-down.
        cores/load: the cores ddptui may use and the 1-minute load average (the busy test's floor)."""
        s = self.s
        p = s.profile
        mono = s.mono
        if p.timeout and mono - s.started_mono > p.timeout:
            s.say(f"ddptui: timeout of {p.timeout:g} s reached, tearing every rank down")
            s.emit(TearDown("timeout", EXIT_FAILED))
            return
        if s.divergence_stop:  # the live replica check found them diverged (ingest.py), on_divergence: stop
            s.divergence_stop = False
            s.say("ddptui: on_divergence=stop: replicas diverged, tearing every rank down")
            s.emit(TearDown("replicas differ", EXIT_REPLICAS))
            return
        if s.ending_attempt:
            return  # ddptui ends the hung ranks of this attempt: the launcher restarts them (attempts.py)
        if s.job_waiting and not any(t.ran for t in s.tracks.values()):
            for t in s.tracks.values():  # a pending job's ranks are not quiet, they are not there: no stall clock
                t.last_progress = mono
            return
        if s.first_failure is not None and s.restart_expected:
            return  # the launcher stops the survivors and restarts every rank: the next attempt (attempts.py)
        if s.first_failure is not None and mono - s.first_failure > CRASH_GRACE:
            live = [t.rank for t in s.tracks.values() if t.alive]
            if live and s.attached:  # not ddptui's job: its own launcher ends the survivors, or they run on
                s.say(f"ddptui: a rank failed {CRASH_GRACE:g} s ago; {ranks_text(live, sort=False, plural=True)}"
                      + " still run; attached, ddptui stops nothing: it concludes and detaches")
                s.emit(TearDown("failed", EXIT_FAILED))
                return
            if live:
                s.say(f"ddptui: a rank failed {CRASH_GRACE:g} s ago; tearing down survivors "
                      + rank_list(live))
                s.emit(TearDown("failed", EXIT_FAILED))
                return
        if s.first_failure is None:
            found = self._xla_stall(self._judge_stall(cores, load))
            self.held = found if isinstance(found, stall_rule.Held) else None
            if isinstance(found, stall_rule.Stall) and s.stall_info is None:
                self._stalled(found)
                return
            if isinstance(found, stall_rule.Held) and s.stall_info is None and not self._held_said:
                self._held_said = True
                s.say(f"ddptui: {found.reason}")
            if found is None:
                self._held_said = False
                if s.stall_info is not None:
                    ended, s.stall_info = s.stall_info, None  # it moved again: a later stall is a new one
                    s.emit(ev.StallCleared(tuple(ended["stalled"]), s.wall))
                    for t in s.tracks.values():
                        if t.stalled:
                            t.stalled = False
                            s.set_status(t, ev.RankStatus.RUNNING, "progressing again")
            self._check_slow()

    # ---- stall ---------------------------------------------------------------------------------------
    def _judge_stall(self, cores: int, load: float):
        """None, a Stall, or Held: ranks past their limit while a quiet one still burns CPU."""
        s = self.s
        tracks = s.tracks.values()
        if not stall_rule.any_over(stall_rule.quiet_ranks(s.profile, tracks, s.mono, with_cpu=False)):
            return None
        quiet = stall_rule.quiet_ranks(s.profile, tracks, s.mono, no_cpu=self._no_cpu)
        floor = stall_rule.busy_floor(cores, stall_rule.sharing_cores(quiet), load)
        if all(q.no_cpu for q in quiet):  # this host's load says nothing of ranks that all run on other nodes
            return stall_rule.judge(quiet, floor)
        return stall_rule.judge(quiet, floor, cores, load)

    def _stalled(self, found) -> None:
        s = self.s
        wall, mono = s.wall, s.mono
        stalled, progressing, limit = found.stalled, found.progressing, found.trigger.limit
        # a rank that never wrote a line: its quiet time counts from the start
        since = min(s.tracks[r].last_progress_wall or wall - (mono - s.tracks[r].last_progress) for r in stalled)
        s.stall_info = {"stalled": stalled, "progressing": progressing, "threshold": limit.seconds,
                        "rule": limit.rule, "reason": found.reason, "trigger": found.trigger.rank,
                        "detected": wall, "since": since}
        for q in found.quiet:
            if q.rank in stalled:
                t = s.tracks[q.rank]
                t.stalled = True
                s.set_status(t, ev.RankStatus.STALLED, f"{q.words()} ({q.limit.rule})"
                             + ("" if q.cpu is None else f", {q.cpu * 100:.0f} % of a core")
                             + (f", CPU not measured ({q.no_cpu})" if q.no_cpu else ""))
        s.emit(ev.StallDetected(tuple(stalled), tuple(progressing), since, limit.seconds, wall, found.reason))
        if s.runner.stall_hint is not None and s.world > 1:
            code, line = s.runner.stall_hint
            s.raise_hint(code, None, line)
        if s.profile.on_stall == "wait":
            self.verdicts.without_stacks(stalled, since)
            return
        s.emit(CollectStacks("stall", tuple(stalled), since))  # on_stall=stop tears down once they are in

    def _xla_stall(self, found):
        """XLA's rendezvous warning (5 s into a collective wait) is a stall now, whatever the progress limits say: XLA
        aborts the worker 10 s later, and the stacks must be taken before that."""
        s = self.s
        rdv = s.xla_rdv
        if rdv is None or not rdv.keys or isinstance(found, stall_rule.Stall):
            return found
        rdv.steps_now(s.steps())
        if not rdv.stalled or rdv.terminated or any(t.exc is not None for t in s.tracks.values()):
            return found  # settled, too late, or a replica raised: the others wait for it in vain (a crash)
        live = stall_rule.live_tracks(s.tracks.values())
        if not live:
            return found
        waited = max(0.0, s.wall - (rdv.since or s.wall))
        limit = stall_rule.Limit(waited, f"XLA rendezvous warning: {rdv.describe()}")
        quiet = tuple(stall_rule.Quiet(t.rank, s.mono - t.last_progress, limit, None) for t in live)
        trigger = max(quiet, key=lambda q: q.quiet)
        reason = (f"XLA warns that {rdv.describe()} has waited {waited:.0f} s for replicas that did not arrive "
                  f"(rendezvous.cc, since {time.strftime('%H:%M:%S', time.localtime(rdv.since))})")
        return stall_rule.Stall(stalled=sorted(q.rank for q in quiet), progressing=[], trigger=trigger, reason=reason,
                                quiet=quiet)

    # ---- stacks --------------------------------------------------------------------------------------
    def dump_requested(self) -> None:
        """`d`, `ddptui dump`, SIGUSR1: stacks now; a verdict only while the run is actually stalled."""
        st = self.s.stall_info
        if st is None:
            self.s.emit(CollectStacks("on request"))
        else:
            self.s.emit(CollectStacks("on request", tuple(st["stalled"]), st["since"]))

    def stacks_collected(self, req: CollectStacks, results: dict | None, folder: str | None,
                         fr: dict | None = None) -> None:
        """The stacks `req` asked for (and the ranks' Flight Recorder dumps, `fr`): the verdict read from them, and
        what the request was for."""
        hv = self.verdicts.read(req, results, folder, fr)
        if req.why == "slow":
            self._slow_sampled(req.slowed, hv)
        elif req.why == "stall" and self.s.profile.on_stall == "stop" and not self.restart_hung():
            self.s.say("ddptui: on_stall=stop: stacks collected, tearing every rank down")
            self.s.emit(TearDown("stalled", EXIT_STALLED))

    # ---- slow-down -----------------------------------------------------------------------------------
    def _check_slow(self) -> None:
        """Name a rank whose steps got SLOWER x its own early steps (by its own clock), or a straggler, once; while
        the run lives, a named rank that is back at pace is said to be so (the verdict stays the run's)."""
        s = self.s
        if s.slow_info is not None:
            self._recheck_slow()
            return
        lag = self._behind()
        if lag:
            for b in lag:
                s.set_status(s.tracks[b.rank], ev.RankStatus.SLOW, b.detail())
            lead = lag[0].lead
            self._slow_named([b.rank for b in lag], f"{_ranks_word([b.rank for b in lag])} far behind the other "
                                                    f"ranks (lead at step {lead})", "behind")
            return
        clocks = {t.rank: t.clock for t in s.tracks.values() if t.alive and not t.completed}
        downs = slowed_down(clocks)
        if not downs or not pace_known(downs, clocks):
            return  # nothing slowed, or the others have not reported as far yet: together or alone is not known
        if not slowed_together(downs, clocks):
            self._slow_ranks(downs, "")  # the others kept their pace: no doubt which ranks are slow
            return
        # Every rank slowed together (lock-step collectives): the slow one is the rank whose own work grew, the
        # one NOT waiting in a collective when sampled. A sample can catch it in the collective too: up to 3.
        if self._slow_samples and (len(self._slow_samples) >= SLOW_SAMPLES or s.mono - self._slow_samples[-1] < 1.0):
            return
        if not self._slow_samples:
            s.say("ddptui: every rank's steps got slower (" + "; ".join(d.text() for d in downs)
                  + f"){self._overload_words()}; sampling stacks to find the rank whose own work grew")
        self._slow_samples.append(s.mono)
        s.emit(CollectStacks("slow", slowed=tuple(downs)))  # a sample's verdict: summary.json's slow, never its hang

    def _slow_sampled(self, downs, hv) -> None:
        culprits = set(hv.culprits) if hv is not None else set()
        overloaded = bool(self._overload_words())
        if overloaded:
            # on a machine over its cores a rank waiting for a core is caught outside its collective by chance: the
            # same rank must be found there twice
            self._sampled.append(culprits)
            culprits = {r for r in culprits if sum(r in c for c in self._sampled) >= 2}
        named = [d for d in downs if d.rank in culprits]
        if named:
            self._slow_ranks(named, " (every rank slowed in lock-step; it is the one not waiting in a collective"
                                    + (", in two stack samples" if overloaded else "") + ")")
        elif len(self._slow_samples) >= SLOW_SAMPLES and overloaded:
            self._slow_named([], "every rank's steps got slower together (" + "; ".join(d.text() for d in downs)
                             + f"){self._overload_words()}: the machine's load, not one rank ({SLOW_SAMPLES} stack "
                             "samples found no rank twice outside a collective)", "machine")
        elif len(self._slow_samples) >= SLOW_SAMPLES:
            self._slow_ranks(downs, f" (every rank slowed in lock-step; {SLOW_SAMPLES} stack samples did not single "
                                    "one out)")
        if self.s.slow_info is not None and hv is not None:
            self.s.slow_info["verdict"] = {**hv.fields_json("text", "culprits", "waiting", "where"),
                                           "stacks": hv.path, "fix": hv.fix}  # its stacks folder, by that name

    def _slow_ranks(self, downs, why: str) -> None:
        for d in downs:
            self.s.set_status(self.s.tracks[d.rank], ev.RankStatus.SLOW, d.detail())
        self._slow_named([d.rank for d in downs], "; ".join(d.text() for d in downs) + why, "slower")

    def _slow_named(self, ranks, text: str, kind: str) -> None:
        self.s.slow_info = {"ranks": list(ranks), "text": text, "wall": self.s.wall}
        self._slow_kind = kind
        self.s.say(f"ddptui: {text}")

    def _overload_words(self) -> str:
        """'while the machine is overloaded (load 18.5 on 2 cpus)' when this host's load is over its CPUs, else ''."""
        load, cpus = self._host or (0.0, None)
        if not cpus or load <= cpus:
            return ""
        return f" while the machine is overloaded ({stall_rule.load_words(load, cpus)})"

    def _behind(self) -> list:
        """The stragglers at one moment of the ranks' clocks, beyond what ties the ranks together."""
        s = self.s
        bound = lockstep.step_bound(s.tracks.values(), s.first_digests)
        if bound is not None and bound <= lockstep.LOCKSTEP:
            return []  # ranks in lock-step cannot be steps apart: a gap is when their counts were read
        return find_slow(s.tracks.values(), set(self._no_cpu), s.wall - s.mono, bound)

    def _recheck_slow(self) -> None:
        """A live slow rank that is back at pace is no longer shown slow (a straggler that caught up, steps as fast
        as its first ones again); one running that slows again is shown slow again (a stalled one stays stalled).
        Hysteresis: back means within half the gap that names a straggler, or steps under half the slow-down factor."""
        s = self.s
        assert s.slow_info is not None  # rechecked only once ranks were named slow
        named = [s.tracks[r] for r in s.slow_info["ranks"] if s.tracks[r].alive and not s.tracks[r].completed]
        if not named:
            return
        if self._slow_kind == "behind":
            found = aligned_steps(s.tracks.values(), set(self._no_cpu), s.wall - s.mono)
            if found is None:
                return
            lead, steps = found
            for t in named:
                step = steps.get(t.rank)
                if step is None:
                    continue
                if t.status == ev.RankStatus.SLOW and lead - step <= behind_by(lead) / 2:
                    self._back(t, f"caught up: at step {step}, the lead at {lead}")
                elif t.status == ev.RankStatus.RUNNING and lead - step > behind_by(lead):
                    s.set_status(t, ev.RankStatus.SLOW, Behind(t.rank, step, lead).detail())
            return
        for t in named:
            base, now = t.clock.baseline(), t.clock.recent()
            if base is None or now is None:
                continue
            if t.status == ev.RankStatus.SLOW and now < SLOWER / 2 * base:
                self._back(t, f"back at pace: steps take {seconds_words(now)}, its first {t.clock.timed_steps} "
                              f"steps' {seconds_words(base)}")
            elif t.status == ev.RankStatus.RUNNING and now >= SLOWER * base:
                s.set_status(t, ev.RankStatus.SLOW,
                             SlowDown(t.rank, now, base, t.clock.timed_steps, t.clock.timed_to).detail())

    def _back(self, t, words: str) -> None:
        self.s.set_status(t, ev.RankStatus.RUNNING, words)
        self.s.say(f"ddptui: rank {t.rank} {words}")


def _rebase(hist, mono: float, used: float) -> None:
    """A rank's CPU history now counts another process's seconds (its own, once its hello named it, after its
    launcher's tree): move the history onto the new count, assuming the last measured share held since the last
    sample, so the busy test keeps its evidence across the switch. An XLA replica's hello comes on its launcher's
    output and is no output of its own: a busy start-up held past its limit was called stalled in the sample's gap
    (after 209 s of a held start at load 20). With fewer than two samples it starts over."""
    if len(hist) < 2:
        hist.clear()
        return
    (m0, c0), (m1, c1) = hist[-2], hist[-1]
    share = (c1 - c0) / (m1 - m0) if m1 > m0 else 0.0
    shift = c1 + share * max(0.0, mono - m1) - used
    moved = [(m, c - shift) for m, c in hist]
    hist.clear()
    hist.extend(moved)


def _ranks_word(ranks) -> str:
    return f"{ranks_text(ranks, sort=False)} {'is' if len(ranks) == 1 else 'are'}"
