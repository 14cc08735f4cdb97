"""The headless front end: rank-prefixed, timestamped lines as they arrive, then a final summary."""
from __future__ import annotations

import os
import sys
import time

from ..runners import events as ev
from ..runners.evidence import stack_types
from ..runners.evidence.words import ranks_text
from ..runners.judge.world_view import UNSEEN_WHY
from . import hangup
from .attempt_words import ended_line, timeline
from .ranktag import untag_lines
from .rate import RunTally

_COLOURS = ("36", "33", "35", "32", "34", "31", "96", "93", "95", "92", "94", "91")


def _hms(wall: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(wall)) + f".{int(wall * 1000) % 1000:03d}"


class Console:
    def __init__(self, out=None, color: bool | None = None) -> None:
        self.out = out or sys.stdout
        if color is None:
            color = self.out.isatty() and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"
        self.color = color
        self.world = 0
        self.steps_total: int | None = None
        self.summary: dict | None = None
        self.replica: ev.ReplicaVerdict | None = None
        self.stacks: ev.StacksCollected | None = None  # the latest collection: a verdict's culprit stack comes from it
        self.tally = RunTally()  # the ranks' pace and the host's load, for the summary
        self.unseen: set[int] = set()  # ranks on other nodes, not watched by this ddptui (RankState "unseen")

    def _tag(self, rank: int | None) -> str:
        tag = "[launcher]" if rank is None else f"[rank {rank}]"
        if not self.color:
            return tag
        code = "2" if rank is None else _COLOURS[rank % len(_COLOURS)]
        return f"\x1b[{code}m{tag}\x1b[0m"

    def _note(self, wall: float, text: str, level: str = "ddptui") -> str:
        tag = f"[{level}]"
        if self.color:
            tag = f"\x1b[1;{'31' if level in ('stall', 'crash', 'replicas', 'node lost') else '33'}m{tag}\x1b[0m"
        return f"[{_hms(wall)}] {tag} {text}\n"

    def handle(self, batch: list) -> None:
        parts: list[str] = []
        for e in batch:
            if isinstance(e, ev.LogLines):
                head = f"[{_hms(e.wall)}] {self._tag(e.rank)} "
                body = ("\n" + head).join(e.lines)
                if "[rank" in body and e.rank is not None:  # one scan of the batch; lines with their own tag are rare
                    body = ("\n" + head).join(untag_lines(e.rank, e.lines))
                parts.append(head + body + "\n")
            elif isinstance(e, ev.Progress):
                self.tally.progress(e.rank, e.wall, e.step, e.samples)
            elif isinstance(e, ev.Resources):
                self.tally.resources(e.load, e.cpus)
            elif isinstance(e, ev.RunStarted):
                self.world, self.steps_total = e.world_size, e.steps
                here = "" if e.here is None else f", {e.here} of them on this node's agent, watched here"
                parts.append(self._note(e.wall, f"run {e.profile} ({e.runner}, {e.world_size} ranks{here}) -> {e.run_dir}"))
            elif isinstance(e, ev.RankState) and e.status == ev.RankStatus.UNSEEN:
                self.unseen.add(e.rank)
            elif isinstance(e, ev.RankState) and e.status in ("failed", "stalled", "slow", "killed"):
                parts.append(self._note(e.wall, f"rank {e.rank} {e.status}" + (f": {e.detail}" if e.detail else "")))
            elif isinstance(e, ev.HintRaised):
                who = "" if e.rank is None else f" (rank {e.rank})"
                parts.append(self._note(e.wall, f"{e.title}{who}: {e.explanation} Fix: {e.fix}", "hint"))
            elif isinstance(e, ev.StallDetected):
                said = e.reason or f"made no progress for {e.threshold:g} s"
                parts.append(self._note(e.wall, f"stall: {ranks_text(e.stalled, sort=False, plural=True)}: {said}", "stall"))
            elif isinstance(e, ev.StallCleared):
                parts.append(self._note(e.wall, f"stall over: {ranks_text(e.ranks, sort=False)} progressing again"))
            elif isinstance(e, ev.StacksCollected):
                self.stacks = e
                parts.append(self._note(e.wall, f"stacks of {len(e.threads)} ranks collected in {e.seconds:.2f} s "
                                        f"({', '.join(sorted(set(e.method.values())))}) -> {e.path}"))
            elif isinstance(e, ev.HangVerdict):
                parts.append(self._note(e.wall, e.text, "slow" if e.reason == "slow" else "stall"))
                # the culprit's stack follows the verdict
                parts += [f"{ln}\n" for ln in culprit_stacks(e, self.stacks, self.unseen)]
                if e.fix:
                    parts.append(f"    fix: {e.fix}\n")
            elif isinstance(e, ev.CrashVerdict):
                parts.append(self._note(e.wall, e.text, "crash"))
                parts += [f"    {ln}\n" for ln in e.excerpt[-12:]]
            elif isinstance(e, ev.ReplicaVerdict):
                self.replica = e
            elif isinstance(e, ev.AttemptStarted) and e.attempt > 0:
                parts.append(self._note(e.wall, f"attempt {e.attempt} began: {e.why}", "attempt"))
            elif isinstance(e, ev.AttemptEnded):
                parts.append(self._note(e.wall, ended_line(e.attempt, e.status, e.verdict, e.stacks), "attempt"))
            elif isinstance(e, ev.ReplicaDiverged):
                parts.append(self._note(e.wall, e.text + ("; on_divergence=stop: the run is stopped" if e.stop else ""),
                                        "replicas"))
            elif isinstance(e, ev.JobState):
                parts.append(self._note(e.wall, job_line(e)))
            elif isinstance(e, ev.NodeLost):
                parts.append(self._note(e.wall, f"{e.node} ({ranks_text(e.ranks, sort=False) if e.ranks else 'no ranks'}): {e.why}",
                                        "node lost"))
            elif isinstance(e, ev.RunFinished):
                self.summary = e.summary
                parts.append(self.render_summary(e))
        if parts:
            try:
                self.out.write("".join(parts))
                self.out.flush()
            except OSError as e:
                if not hangup.output_gone(self.out, e):
                    raise

    def render_summary(self, e: ev.RunFinished) -> str:
        s = e.summary
        unseen = [r for r in s.get("unseen") or () if isinstance(r, int)]
        seen = f"{len(s.get('ranks') or {})} of {s.get('world_size')} ranks seen here" if unseen else ""
        rows = [f"\n== ddptui: {s.get('profile')} ({s.get('runner')}, {seen or str(s.get('world_size')) + ' ranks'}) "
                f"finished in {s.get('duration_s', 0):.1f} s =="]
        ranks = sorted([*(s.get("ranks") or {}).items(),
                        *((str(r), {"status": ev.RankStatus.UNSEEN, "outcome": UNSEEN_WHY}) for r in unseen)],
                       key=lambda kv: int(kv[0]))
        # where each rank ran (records older than nodes: the host, or nothing)
        where = {r: str(info.get("node") or info.get("host") or "-") for r, info in ranks}
        wn = max([4, *map(len, where.values())])
        wp = max([3, *(len(str(info.get("pid") or "-")) for _, info in ranks)])
        rows.append(f"{'rank':>4}  {'node':<{wn}}  {'pid':>{wp}}  {'status':<8} {'exit':<9} {'steps':>6}  loss first -> last")
        for r, info in ranks:
            exit_ = info.get("signal") or ("-" if info.get("returncode") is None else str(info["returncode"]))
            fl, ll = info.get("first_loss"), info.get("last_loss")
            wl = info.get("workload_loss")
            if wl:
                fl, ll = wl.get("first"), wl.get("last")
            loss = f"{fl:.4f} -> {ll:.4f}" if fl is not None and ll is not None else "-"
            steps = "-" if info.get("steps") is None else str(info["steps"])
            pid = str(info.get("pid") or "-")
            rows.append(f"{r:>4}  {where[r]:<{wn}}  {pid:>{wp}}  {info.get('status', '?'):<8} {exit_:<9} {steps:>6}  {loss}"
                        + (f"   ({info['outcome']})" if info.get("outcome") not in (None, "", "exited 0") else ""))
        job = s.get("job")
        if isinstance(job, dict) and job.get("id"):
            by = job.get("cancelled_by")
            rows.append(f"slurm job {job['id']}: {job.get('end') or job.get('state') or '?'}"
                        + (" (cancelled by ddptui)" if job.get("cancelled_by_ddptui")
                           else f" (cancelled from outside ddptui: scancel by {by})" if str(by).startswith("uid ")
                           else f" ({by})" if by and by != "ddptui" else ""))
        for node, lost in (s.get("nodes_lost") or {}).items():
            lost = lost if isinstance(lost, dict) else {}
            rows.append(f"node lost: {node}" + (f" ({ranks_text(lost['ranks'], sort=False)})" if lost.get("ranks") else "")
                        + (f": {lost['why']}" if lost.get("why") else ""))
        attempts = s.get("attempts")
        if isinstance(attempts, list) and len(attempts) > 1:  # the run restarted: its timeline, then its last attempt
            rows.append(f"attempts: {len(attempts)} ({s.get('restarts')} restart(s) of torchrun, at most "
                        f"{s.get('max_restarts')}); the ranks above are the last attempt's")
            rows += [f"  {row}" for row in timeline(attempts)]
        pace = self.tally.line(s.get("ranks"))
        if pace:
            rows.append(pace)
        div = s.get("divergence")
        if isinstance(div, dict) and div.get("text"):  # the live check's word, then the end's
            rows.append(str(div["text"]))
        rep = s.get("replica")
        if rep:  # a text that already says "replicas differ: ..." is not prefixed again
            rows.append(rep["text"] if str(rep["text"]).startswith("replicas ") else f"replicas: {rep['text']}")
        if s.get("slow"):
            rows.append(f"slow: {s['slow']['text']}")
            sampled = s["slow"].get("verdict") or {}
            if sampled.get("text"):  # what the stack sample of the slowed run showed: a slow-down, not a stall
                rows.append(f"slow: {sampled['text']}")
            if sampled.get("fix"):
                rows.append(f"  fix: {sampled['fix']}")
        if s.get("stall") and s["stall"].get("reason"):
            rows.append(f"stall: {s['stall']['reason']}")
        if s.get("hang"):
            rows.append(f"stall: {s['hang']['text']}")
            if s["hang"].get("fix"):
                rows.append(f"  fix: {s['hang']['fix']}")
        if s.get("crash"):
            rows.append(f"crash: {s['crash']['text']}")
        if s.get("own_exit"):  # ranks that chose their exit status: no crash
            rows.append(f"exit: {s['own_exit']['text']}")
        for h in s.get("hints") or []:
            rows.append(f"hint: {h['title']}: {h['fix']}")
        rows.append(f"status: {s.get('status')} (exit {e.exit_code})   record: {s.get('run_dir')}")
        return "\n".join(rows) + "\n"


def job_line(e: ev.JobState) -> str:
    """"slurm job 12 PENDING (Priority)", "slurm job 12 RUNNING on node0,node1": the job's state as Slurm says it."""
    return (f"slurm job {e.job_id} {e.state}" + (f" ({e.reason})" if e.reason else "")
            + (f" on {','.join(e.nodes)}" if e.nodes else ""))


def culprit_stacks(hang: ev.HangVerdict, stacks: ev.StacksCollected | None, unseen=()) -> list[str]:
    """The culprits' stacks as the verdict names them (user frames first, library frames folded) and the folder;
    a culprit on another node this ddptui does not watch (`unseen`) is said to be so."""
    if stacks is None or not hang.path or stacks.path != hang.path:
        return []
    out = []
    for r in hang.culprits:
        if r in unseen and r not in stacks.threads:
            out.append(f"    rank {r}: unseen here ({UNSEEN_WHY})")
            continue
        where = hang.where.get(r) or {}
        worker = where.get("worker") or {}
        if worker.get("pid") is not None:
            found = [w for w in stacks.workers.get(r, []) if w.get("pid") == worker["pid"]]
            threads, who = stack_types.from_json(found[0]["threads"] if found else []), f"rank {r}'s {worker.get('label')}"
        else:
            threads, who = stack_types.from_json(stacks.threads.get(r, [])), f"rank {r}"
        thread = next((t for t in threads if t.name == where.get("thread")), None) or next(
            (t for t in threads if t.name == "MainThread"), None)
        if thread is None or not thread.frames:
            why = str(stacks.method.get(r, "")).removeprefix("unavailable: ")
            out.append(f"    {who}: no stack" + (f" ({why})" if why.startswith("the process is stopped") else ""))
            continue
        out.append(f"    {who}, thread {thread.name}, innermost user frame first:")
        out += stack_types.folded_lines(thread.frames, indent="      ")
    out.append(f"    stacks: {stacks.path.rstrip('/')}/")
    return out
