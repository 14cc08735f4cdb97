"""Verdicts read from the stacks collected: the hang of stalled ranks, a slow-down's sample, or none (on request)."""
from __future__ import annotations

from ..evidence import fix_lines, xla_evidence
from ..evidence.words import ranks_text
from . import run_verdicts
from .run_state import CollectStacks, RunState


class StackVerdicts:
    """Reads stack results against a RunState's tracks; the run's hang verdict (stalls only) is kept in it."""

    def __init__(self, state: RunState) -> None:
        self.s = state

    def targets(self) -> list[tuple[int, int]]:
        """(rank, pid) of every live rank whose pid is known: whose stacks can be taken."""
        return [(t.rank, t.pid) for t in self.s.tracks.values() if t.pid and t.alive]

    def read(self, req: CollectStacks, results: dict | None, folder: str | None, fr: dict | None = None):
        """The HangVerdict read from `results` (rank -> stacks.StackResult; None: no live rank to take them from) and
        `fr` (rank -> Flight Recorder dump, when taken) for what `req` asked, or None when it wanted none or none
        could be read."""
        s = self.s
        if results is None:
            s.say("ddptui: no live rank to collect stacks from")
            return None
        assert folder is not None  # given with the results (Session._collect_stacks)
        slow = req.slowed is not None
        if req.judged == "on request":
            s.say(f"ddptui: stacks of {ranks_text(sorted(results))} recorded in {folder} "
                  "(no rank is stalled: no verdict)")
            return None
        where = run_verdicts.wheres(s.runner.xla_replicas, results)
        finding = None if slow else self.finding(fr)
        stopped = {} if slow else {r: res.state for r, res in results.items() if res.state}
        if not where and not slow and not stopped:
            self.without_stacks(req.stalled or (), req.since or s.wall, finding)
            return s.hang
        steps = s.steps()
        since = req.since or s.wall
        text, culprits, waiting = run_verdicts.stack_sentence(where, steps, req.stalled, since, req.slowed,
                                                              s.unseen())
        if not slow and s.xla_rdv is not None:
            calls = run_verdicts.xla_calls(s.runner.xla_replicas, results)
            self.xla_fix_hint(calls, culprits)
            text, culprits, waiting = run_verdicts.with_xla(s.xla_rdv, text, culprits, waiting, where, calls, steps)
        if not slow and s.runner.xla_replicas:
            text = run_verdicts.xla_without_fr(text, True, s.xla_rdv)
        text, culprits, waiting = run_verdicts.with_collective(finding, text, culprits, waiting, where, steps, since)
        nodes = {r: t.node for r, t in s.tracks.items()}
        named = {r: nodes[r] for r in stopped} if len(set(nodes.values())) > 1 else {}
        text, culprits, waiting = run_verdicts.with_stopped(stopped, named, text, culprits, waiting, where, steps,
                                                            since)
        fix = fix_lines.for_stopped(stopped, {r: s.tracks[r].pid for r in stopped}, named) if stopped else ""
        hv = run_verdicts.hang_event(text, culprits, waiting, where, steps, s.wall, folder, slow, finding, fix)
        if not slow:
            s.hang = hv  # the run's hang verdict comes from stalls only
        s.emit(hv)
        s.say(f"ddptui: {hv.text}")
        return hv

    def finding(self, fr: dict | None):
        """What Flight Recorder says of the collectives (fr_analysis.Finding): from the dumps taken with the stacks,
        else from the ranks' live reports; None with neither (XLA has none)."""
        s = self.s
        return run_verdicts.collective_finding(fr, {r: t.collectives for r, t in s.tracks.items()}, s.world,
                                               s.unseen())

    def without_stacks(self, stalled, since: float, finding=None) -> None:
        """The run's hang verdict in words, when there are no stacks to read (on_stall: wait, or none could be taken)."""
        s = self.s
        finding = finding if finding is not None else self.finding(None)
        if s.xla_rdv is not None:
            self.xla_fix_hint({}, ())
        s.hang = run_verdicts.hang_without_stacks(stalled, {r: s.tracks[r].step for r in stalled}, since,
                                                  s.xla_rdv, s.wall, finding, s.runner.xla_replicas, s.attached)
        s.emit(s.hang)
        s.say(f"ddptui: {s.hang.text}")

    def xla_fix_hint(self, calls: dict, culprits=()) -> None:
        """DDP's own collectives on PJRT CPU thread replicas: the project knows the fix (profiles/xla-ddp-backend.yaml)."""
        s = self.s
        x = s.profile.xla
        if s.matcher is None or x.pjrt_device != "CPU" or x.num_devices < 2:
            return
        if xla_evidence.ddp_collective(s.xla_rdv, calls, tuple(culprits)):
            assert s.xla_rdv is not None  # ddp_collective finds DDP's collectives in XLA's rendezvous only
            s.raise_hint("xla-ddp-thread-collectives", None, s.xla_rdv.lines[0] if s.xla_rdv.lines else "")
