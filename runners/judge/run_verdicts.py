"""The run's hang and crash verdicts built from rank tracks, stack results and evidence: pure, no I/O."""
from __future__ import annotations

import dataclasses
import time

from .. import events as ev
from ..evidence import fix_lines, fr_analysis, xla_evidence
from ..evidence import hang_verdict as verdict
from ..evidence.crash import RankEvidence, ended_by, short_exit, victim_marker
from ..evidence.crash import decide as decide_crash
from ..evidence.words import ranks_text, unseen_words


def thread_filter(xla_replicas: bool, rank: int):
    """XLA thread replicas share one process: each rank's stack is its own thread's."""
    return verdict.xla_thread_filter(rank) if xla_replicas else None


def wheres(xla_replicas: bool, results: dict) -> dict:
    """rank -> hang_verdict.Where, for every rank whose stacks were read."""
    return {rank: verdict.classify(res.threads, thread_filter=thread_filter(xla_replicas, rank), workers=res.workers)
            for rank, res in results.items() if res.threads}


def xla_calls(xla_replicas: bool, results: dict) -> dict:
    """rank -> the XLA library call its thread is in (xla_evidence.library_call), or None."""
    calls = {}
    for r, res in results.items():
        th = verdict.pick_thread(res.threads, thread_filter(xla_replicas, r)) if res.threads else None
        calls[r] = xla_evidence.library_call(th.frames) if th is not None else None
    return calls


def hang_without_stacks(stalled, steps: dict, since: float, rdv, wall: float, finding=None,
                        xla: bool = False, attached: bool = False) -> ev.HangVerdict:
    """The stall said in words when there are no stacks to read (on_stall: wait, or none could be taken); led by the
    Flight Recorder finding when there is one (`finding`: fr_analysis.Finding). `attached`: a job ddptui did not
    launch, which it never sends SIGUSR1."""
    at = ", ".join(f"rank {r} at step {steps.get(r)}" for r in stalled)
    how = "press d for stacks (py-spy)" if attached else "press d / send SIGUSR1 for stacks"
    text = (f"{ranks_text(stalled)} made no progress since "
            f"{time.strftime('%H:%M:%S', time.localtime(since))} ({at}); {how}")
    text = with_xla(rdv, text, (), tuple(stalled), {}, {}, {})[0]
    if xla:
        text = xla_without_fr(text, False, rdv)
    if finding is not None and finding.kind != "none" and not finding.completed:
        return ev.HangVerdict(f"{finding.sentence()}; {text}", finding.culprits, finding.waiting, {}, wall,
                              collective=finding.to_dict(), fix=fix_lines.for_finding(finding))
    return ev.HangVerdict(text, (), tuple(stalled), {}, wall,
                          collective=finding.to_dict() if finding is not None else {})


def stack_sentence(where: dict, steps: dict, stalled, since: float, slowed=None, unseen: tuple[int, ...] = ()):
    """(text, culprits, waiting) read from the stacks: a hang of the stalled ranks or, with ``slowed``
    (steptime.SlowDown list), a slow-down of a run that still moves, never phrased as a hang. `unseen`: ranks on
    other nodes, not watched here: the one holding the others up may be among them."""
    if slowed is not None:
        return verdict.slow_sentence(where, {d.rank: d.text() for d in slowed})
    return verdict.hang_sentence(where, steps, stalled, since, unseen)


def stopped_words(state: str) -> str:
    """A stopped process's state in words: "stopped (SIGSTOP: state T)", or for "t" held by a tracer."""
    if state[:1] == "t":
        return "held by a debugger or tracer (state t: tracing stop)"
    return "stopped (SIGSTOP: state T)"


def with_stopped(stopped: dict[int, str], nodes: dict[int, str], text: str, culprits, waiting, where: dict,
                 steps: dict, since: float):
    """The hang sentence led by the ranks found stopped (rank -> its State: stacks.StackResult.state; nodes: rank ->
    its node, named when the run spans several): a stopped rank is the culprit, whatever else its stacks (none),
    its Flight Recorder (none) or py-spy (ptrace refused) could not say. The ranks that wait for it follow."""
    if not stopped:
        return text, tuple(culprits), tuple(waiting)
    rs = sorted(stopped)
    who = ", ".join(f"{r}" + (f" ({nodes[r]})" if nodes.get(r) else "") for r in rs)
    states = {stopped_words(s) for s in stopped.values()}
    lead = (f"{'rank' if len(rs) == 1 else 'ranks'} {who} {'is' if len(rs) == 1 else 'are'} "
            + (states.pop() if len(states) == 1 else "stopped (" + "; ".join(
                f"rank {r}: {stopped_words(stopped[r])}" for r in rs) + ")"))
    known = {r: w for r, w in where.items() if r not in stopped and (w.file or w.detail)}
    others = [r for r in known if known[r].category in verdict.WAITING]
    since_txt = time.strftime("%H:%M:%S", time.localtime(since))
    if others and len(others) == len(known):
        return (f"{lead}, every other rank waits for {'it' if len(rs) == 1 else 'them'}: "
                f"{verdict._wait_group(sorted(others), known)} since {since_txt}", tuple(rs), tuple(sorted(others)))
    return f"{lead}; {text}", tuple(rs), tuple(sorted(set(waiting) - set(rs)))


def with_xla(rdv, text: str, culprits, waiting, where: dict, calls: dict, steps: dict):
    """The hang sentence with XLA's rendezvous evidence in it (op, keys, since when), when there is some."""
    if rdv is None or not rdv.stalled:
        return text, culprits, waiting
    return xla_evidence.stall_sentence(rdv, text, tuple(culprits), tuple(waiting), where, calls, steps)


def collective_finding(fr: dict | None, collectives: dict, world: int | None, unseen: tuple[int, ...] = ()):
    """What Flight Recorder says: from the dumps taken with the stacks (rank -> dump), else from the ranks' live
    `coll` reports (rank -> RankTrack.collectives); None when there is neither. `unseen`: ranks on other nodes."""
    if fr:
        return fr_analysis.analyse(fr, world, unseen=unseen)
    return fr_analysis.from_collectives(collectives or {}, world, unseen)


def with_collective(finding, text: str, culprits, waiting, where: dict, steps: dict, since: float):
    """The hang sentence led by the Flight Recorder finding, ending with the culprits' own frames from the stacks and
    since when nothing moved; the stack sentence as it was when the finding says nothing (no dump, or every
    collective completed)."""
    if finding is None or finding.kind == "none":
        return text, tuple(culprits), tuple(waiting)
    if stuck_but_ranks_outside(finding, culprits):
        return (f"{text}; Flight Recorder has noted no rank completing collective #{finding.seq} "
                f"({finding.call.op if finding.call else 'the collective'}) yet: its completion noted late, as gloo "
                f"notes it, while {ranks_text(culprits)} {'is' if len(culprits) == 1 else 'are'} outside any collective",
                tuple(culprits), tuple(waiting))
    if finding.completed:  # a mismatch every rank went through: worth saying, but not what holds the ranks now
        return f"{text}; Flight Recorder: {finding.sentence()}", tuple(culprits), tuple(waiting)
    phrases = {r: f"{_phrase(where[r])}, {verdict._step(steps, r)}" for r in finding.culprits if r in where}
    ats = {r: where[r].at for r in finding.entered if r in where}
    return (f"{finding.sentence(phrases, ats)}; no progress since {time.strftime('%H:%M:%S', time.localtime(since))}",
            finding.culprits, finding.waiting)


def stuck_but_ranks_outside(finding, culprits) -> bool:
    """Flight Recorder says every member entered the collective and none completed it, yet the stacks find stalled
    ranks outside any collective (`culprits`): no transport holds them, the completion was noted late (gloo notes it
    well after the op; a rank already waits in the next collective, which a rank outside never entered), and the
    stacks' words and culprits stand."""
    return finding is not None and finding.kind == "stuck" and bool(culprits)


def _phrase(w) -> str:
    """Where a culprit is: its own frame, or the collective it waits in (a side of a mismatch is in one)."""
    if w.category in verdict.WAITING and w.file:
        return f"waits in {w.detail} at {w.at}"
    return verdict.where_phrase(w)


def xla_without_fr(text: str, stacks: bool, rdv) -> str:
    """An XLA hang verdict says where it comes from: XLA has no Flight Recorder to name the collective and the rank."""
    said = [w for w, got in (("the stacks", stacks), ("XLA's warnings", rdv is not None and rdv.stalled)) if got]
    return f"{text} ({xla_evidence.NO_FLIGHT_RECORDER}" + (f": read from {' and '.join(said)} alone)" if said else ")")


def hang_event(text: str, culprits, waiting, where: dict, steps: dict, wall: float, folder: str,
               slow: bool, finding=None, fix: str = "") -> ev.HangVerdict:
    """The verdict as an event, with its fix line read from the same evidence (runners/evidence/fix_lines.py) unless `fix`
    says it (ranks found stopped)."""
    return ev.HangVerdict(text, tuple(culprits), tuple(waiting), {r: w.to_dict(steps.get(r)) for r, w in where.items()},
                          wall, folder, "slow" if slow else "stall", finding.to_dict() if finding is not None else {},
                          fix or fix_lines.fix_line(None if stuck_but_ranks_outside(finding, culprits) else finding,
                                                    where, culprits, waiting, slow))


def rank_evidence(t, stopped_by: str | None, exc: dict | None, kill=None, stderr_seen: bool = True,
                  stopped_how: str = "") -> RankEvidence:
    """What the crash rule reads of one rank track (runners/evidence/crash.py); kill: a SIGKILL's oom.Reading; stopped_how:
    its end in words when more is known than who stopped it."""
    return RankEvidence(
        t.rank, t.returncode, died_at=t.exit_wall,
        error_at=t.first_failure_wall if exc is not None else None, exc=exc,
        err_lines=tuple(t.err_tail), out_lines=tuple(t.tail), started=t.ran or exc is not None,
        completed=t.completed, stopped_by=stopped_by, step=t.step_named, kill=kill, stderr_seen=stderr_seen,
        stopped_how=stopped_how)


def crash(evidence: list[RankEvidence], launcher_root: int | None, wall: float, unseen: tuple[int, ...] = ()):
    """(CrashVerdict, {rank: (status, words)}) or (None, {}): who failed first, and every other rank's fate (`unseen`:
    the world's ranks on other nodes, not watched here)."""
    v = decide_crash(evidence, launcher_root, unseen)
    if v is None:
        return None, {}
    return ev.CrashVerdict(v.text, v.root, v.victims, v.what, v.excerpt, wall, v.together, v.stopped,
                           v.never_started, {r: words for r, (_, words) in sorted(v.outcomes.items())}), v.outcomes


def lost_words(lost: dict) -> str:
    """'node node1 lost (why)' for every node lost (node -> {"ranks", "why", "wall"}), as crash verdicts begin."""
    return "; ".join(f"node {n} lost ({v['why']})" for n, v in lost.items())


def node_lost_crash(crash, lost: dict, tracks: dict, wall: float):
    """The crash verdict of a run that lost a node (node -> {"ranks", "why", "wall"}): (CrashVerdict, {rank: (status,
    words)} for the ranks whose end it words anew).

    When the rank the crash rule put first only failed because its peer went away (a victim, and the rule found no
    rank with an error of its own), and a node was lost, the lost node is the root cause: its ranks went with it, the
    failed ranks are its victims, the ranks ddptui tore down were torn down after the node was lost. Otherwise the
    verdict stands, led by the node lost."""
    said = lost_words(lost)
    gone = sorted({r for v in lost.values() for r in v["ranks"]})
    nodes = ", ".join(lost)
    if crash is not None and crash.exit == LAUNCHER_FAILED:
        crash = None  # torchrun's own error followed the loss (its rendezvous store went with the node)
    if crash is None:  # no rank failed: the ranks ddptui stopped, it stopped because the node was lost
        outcomes = {r: ("killed", f"torn down by ddptui after node {nodes} was lost") for r, t in tracks.items()
                     if r not in gone and t.status == ev.RankStatus.KILLED and t.outcome == ended_by("ddptui")}
        return ev.CrashVerdict(said, None, tuple(gone), "node lost", (), wall,
                               outcomes={r: w for r, (_, w) in outcomes.items()}), outcomes
    went = {r: ("killed", f"lost with node {n}") for n, v in lost.items() for r in v["ranks"]
            if r in tracks and tracks[r].status == ev.RankStatus.KILLED}  # no end of their own seen: went with the node
    root = tracks.get(crash.root_rank)
    peer = root is not None and victim_marker(RankEvidence(root.rank, exc=root.exc, err_lines=tuple(root.err_tail)))
    if root is None or not peer or root.rank in gone:
        return dataclasses.replace(crash, text=f"{said}. {crash.text}",
                                   outcomes={**crash.outcomes, **{r: w for r, (_, w) in went.items()}}), went
    failed = sorted({crash.root_rank, *crash.victims, *crash.together} - set(gone))
    stopped = sorted(set(crash.stopped) - set(gone))
    outcomes, parts = {}, [f"{said}: the root cause"]
    for r in failed:
        t = tracks[r]
        m = victim_marker(RankEvidence(r, exc=t.exc, err_lines=tuple(t.err_tail)))
        what = short_exit(RankEvidence(r, t.returncode))
        parts.append(f"rank {r} failed after it ({what}" + (f": {m})" if m else ")"))
        outcomes[r] = ("failed", f"failed after node {nodes} was lost ({what}" + (f": {m})" if m else ")"))
    if stopped:
        parts.append(f"{ranks_text(stopped)} torn down by ddptui after it")
        outcomes.update({r: ("killed", f"torn down by ddptui after node {nodes} was lost") for r in stopped})
    if gone:
        parts.append(f"{ranks_text(gone)} lost with {'it' if len(lost) == 1 else 'them'}")
        outcomes.update(went)
    text = "; ".join(parts)
    return (dataclasses.replace(crash, text=text, root_rank=None, victims=tuple(failed), exit="node lost", excerpt=(),
                                together=(), stopped=tuple(stopped),
                                outcomes={**crash.outcomes, **{r: w for r, (_, w) in outcomes.items()}}),
            outcomes)


LAUNCHER_FAILED = "launcher failed"  # a crash verdict's `exit` when torchrun's own error is the root cause


def launcher_failed(err, stopped: list[int], unseen: tuple[int, ...], wall: float, launcher: str = "torchrun"):
    """The crash verdict of a run no rank failed in, whose launcher raised an error of its own (`err`, a
    launcher_log.AgentError: torchrun's agent lost its rendezvous store, its port was taken): that error is the root
    cause, and the ranks it stopped (`stopped`) went because of it. `launcher`: the failed launcher's name, said
    where the error is not torchrun's own. (CrashVerdict, {rank: words})."""
    who = "torchrun" if err.torchrun else f"the launcher {launcher}"
    text = f"{who} failed on its own ({err.type}: {err.msg[:200]})" if err.msg else f"{who} failed on its own ({err.type})"
    if stopped:
        text += f" and stopped {ranks_text(stopped)}"
    if unseen:
        text += f"; {unseen_words(unseen)}"
    outcomes = {r: f"{ended_by('launcher')} after it failed ({err.type})" for r in stopped}
    return ev.CrashVerdict(text, None, (), LAUNCHER_FAILED, err.lines, wall, stopped=tuple(stopped),
                           outcomes=outcomes), outcomes


XLA_ABORTED = "XLA aborted after its rendezvous termination timeout"


def xla_abort(crash_v, rdv, tracks, hang_culprits, wall: float):
    """When XLA aborted the worker, say so instead of a replica "failing first" or being "stopped by the launcher".

    Returns (CrashVerdict, ranks whose outcome is XLA's abort)."""
    words = xla_evidence.abort_sentence(rdv)
    if crash_v is not None and any(t.exc is not None for t in tracks):
        return dataclasses.replace(crash_v, text=f"{crash_v.text}; then {words}"), []  # a replica raised first
    aborted = [t.rank for t in tracks if t.exc is None and not t.completed and t.signal == "SIGABRT"]
    root = hang_culprits[0] if len(hang_culprits) == 1 else None
    text = words + (f"; the stall verdict names rank {root} as the replica that never joined" if root is not None
                    else "")
    return ev.CrashVerdict(text, root, (), "SIGABRT", tuple(rdv.lines), wall,
                           outcomes={r: XLA_ABORTED for r in aborted}), aborted
