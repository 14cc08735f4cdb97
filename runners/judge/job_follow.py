"""Decisions about the job and the nodes a multi-node run lives on: Slurm's job states, a node lost, agents that linger."""
from __future__ import annotations

from dataclasses import dataclass, replace

from .. import events as ev
from ..evidence import slurm_state
from ..evidence.crash import RankEvidence, victim_marker
from ..evidence.words import ranks_text
from .run_state import EXIT_FAILED, ProbeNodes, RunState, TearDown

# Seconds an agent (a torchrun per node, sbatch/srun) gets to exit by itself once the run failed or lost a node
# (the profile's agent_exit_grace). After a network partition one torchrun agent never exited by itself (field
# notes): past this it is torn down.
AGENT_EXIT_GRACE = 15.0
# Seconds a rank waits in its rendezvous before ddptui asks the job's nodes that have no rank there yet whether they
# still answer, and between two asks of one node: a node lost during start-up is otherwise only a stall once
# startup_grace (60 s) ran out. A healthy node answers in well under a second; a start-up that is merely slow (torch
# importing on a loaded node) costs one srun per node per ask.
STARTUP_ASK_AFTER, STARTUP_ASK_EVERY = 10.0, 20.0
# the start-up phases from the rendezvous on: a node with a rank this far has answered
_JOINED = ("rendezvous", "waiting for first step")


@dataclass(frozen=True)
class NodeAnswer:
    """What a node said when ddptui asked it through srun in the job (runners/edge/node_probe.py)."""
    status: str  # "answered"; "unreachable": srun could not reach its slurmd; "unknown": no conclusion (job gone...)
    said: str  # srun's words when the node did not answer
    states: dict  # pid -> its state there as /proc says it ("S (sleeping)", "T (stopped)"), or "gone"


@dataclass(frozen=True)
class Agent:
    """A process of the plan still running that starts ranks on one node (or the whole job), as the watchdog sees it."""
    name: str
    node: str  # "" when it stands for every node (sbatch, one srun)
    ranks: tuple[int, ...]


def node_of_agent(name: str) -> str:
    """The node a per-node agent serves, from the plan's process name ("torchrun-node1" -> "node1"); "" if none."""
    _, sep, node = name.rpartition("-")
    return node if sep and node.startswith("node") else ""


def agent_lost_node(returncode: int, signal: str | None, ranks_failed: bool, others_running: bool) -> bool:
    """A node's agent ended while other nodes still run: the node is lost unless its own ranks failed (that is a crash,
    whose root cause the crash verdict names). Killed by a signal, it is lost whatever its ranks did."""
    if not others_running or returncode == 0:
        return False
    return signal is not None or not ranks_failed


class JobFollow:
    """The job's state as Slurm reports it, and the run's nodes, over a RunState."""

    def __init__(self, state: RunState, agent_exit_grace: float = AGENT_EXIT_GRACE, life=None) -> None:
        self.s = state
        self.life = life  # rank_lifecycle.RankLifecycle: ranks Slurm stopped are judged again when that is learned
        self.grace = agent_exit_grace
        self.job: slurm_state.JobInfo | None = None  # what Slurm said last
        self.job_id: str | None = None
        self.job_nodes: tuple[str, ...] = ()
        self.cancelled_by_us = False
        self.lost = state.nodes_lost  # node -> {"ranks", "why", "wall"}
        self.ours_at: float | None = None  # wall time ddptui ran its own scancel
        # Slurm cancelled the job (or its step): {"at": wall (Slurm's, to the second), "how": "cancelled" | "ended at its
        # time limit" | "preempted", "evidence": Slurm's own words}; who asked: {"uid", "user", "at"} from slurmctld's
        # log, or {"why"} it could not be read
        self.cancel: dict | None = None
        self.canceller: dict | None = None
        self._said_cancel: tuple | None = None  # what was said of it last (said again once who asked is known)
        self._failed_at: float | None = None  # mono: the run failed or lost a node; agents get self.grace
        self._watchdog_fired = False
        self.under_slurm = False  # the ranks run under a Slurm job or step ddptui follows
        self.launch = ""  # SlurmJob.launch
        self._ended_job = False  # a teardown was asked for (a node lost, a rank failed under Slurm, the watchdog)
        self._asked_peers = False  # the nodes of a failed rank's lost peers were asked, before the teardown
        self._asked_at: dict[str, float] = {}  # node -> mono it was last asked during start-up
        # node -> (its ranks, words for its loss, why ddptui asked it): what its answer is read against
        self._asked_why: dict[str, tuple[tuple[int, ...], str, str]] = {}

    # ---- Slurm's job -------------------------------------------------------------------------------------
    def submitted(self, launch: str = "srun") -> None:
        """The ranks run under a Slurm job (`launch`: "srun", a task per rank, or "torchrun", an agent per node): until
        it runs, they are not late, they have not started."""
        self.s.job_waiting = True
        self.under_slurm = True
        self.launch = launch

    def attached(self, job_id: str) -> None:
        """`ddptui attach --slurm`: the ranks are a running Slurm job's, followed but not submitted by ddptui."""
        self.under_slurm = True
        self.job_id = job_id

    def job_info(self, info: slurm_state.JobInfo, nodes: tuple[str, ...], down: tuple[str, ...] = ()) -> None:
        """Slurm's answer about the job (`nodes`: its node list expanded; `down`: those Slurm has down)."""
        s = self.s
        self.job_id = info.job_id
        due = {"CANCELLED": "", "TIMEOUT": "TIME LIMIT", "PREEMPTED": "PREEMPTION"}.get(info.state)
        end = slurm_state.slurm_time(info.end) if info.end else None
        if due is not None and end is not None:
            self._cancel_seen(end, due, f"Slurm: job {info.job_id} {info.state} at {info.end}")
        if not slurm_state.changed(self.job, info):
            return
        first_run = info.state in slurm_state.RUNNING and s.job_waiting
        self.job = info
        if nodes:
            self.job_nodes = nodes
        s.emit(ev.JobState(info.job_id, info.state, info.reason, tuple(nodes), s.wall))
        if info.state in slurm_state.WAITING:
            s.job_waiting = True
            return
        s.job_waiting = False
        if first_run:
            # the startup grace of every rank counts from the job's start, not from its submission
            for t in s.tracks.values():
                if not t.ran:
                    t.last_progress = s.mono
        if info.state in slurm_state.NODE_FAILED:
            lost = down or nodes or self.job_nodes
            ranks = tuple(sorted(r for r, t in s.tracks.items() if t.node in lost)) or tuple(sorted(s.tracks))
            self.node_lost(", ".join(lost) or "?", ranks, f"Slurm ended job {info.job_id} with {info.state}"
                           + (f" ({info.reason})" if info.reason else ""))
        elif info.state in slurm_state.ENDED and info.state != "COMPLETED" and not s.tearing_down:
            s.say(f"ddptui: Slurm job {info.job_id} ended {slurm_state.end_words(info)}")

    def cancelling(self) -> None:
        """ddptui cancels the job now (its teardown): a CANCELLED job is then ddptui's doing, not a failure, unless
        Slurm had cancelled it before (runners/evidence/slurm_state.py: what Slurm records of that)."""
        self.cancelled_by_us = True
        if self.ours_at is None:
            self.ours_at = self.s.wall

    # ---- Slurm's cancel ------------------------------------------------------------------------------------
    def stepd_lines(self, lines) -> None:
        """slurmstepd's `*** STEP 4.0 ON n1 CANCELLED AT 2026-12-04T19:32:02 ***` in a task's or the batch's output."""
        for ln in lines:
            c = slurm_state.stepd_cancel(ln) if slurm_state.CANCEL_NEEDLE in ln else None
            at = slurm_state.slurm_time(c.at) if c is not None else None
            if c is not None and at is not None:
                self._cancel_seen(at, c.due, f"slurmstepd: {c.what} ON {c.node} CANCELLED AT {c.at}"
                                  + (f" DUE TO {c.due}" if c.due else ""))

    def _cancel_seen(self, at: float, due: str, evidence: str) -> None:
        how = slurm_state.cancel_words(due)
        if how is None:
            return  # a node failure (a node lost, said by its own rules) or a requeue: no stop of the job as such
        if self.cancel is not None and self.cancel["at"] <= at:
            return
        self.cancel = {"at": at, "how": how, "due": due, "evidence": evidence}
        self._decide()

    @property
    def wants_canceller(self) -> bool:
        """Slurm cancelled the job, not at its time limit, and who asked is not read yet (slurmctld's log)."""
        return self.cancel is not None and not self.cancel["due"] and self.canceller is None and self.job_id is not None

    def canceller_read(self, requests: list, where: str) -> None:
        """slurmctld's kill requests of the job: (wall, uid, user name) each, read from `where` (else why not)."""
        if requests:
            wall, uid, user = min(requests)
            self.canceller = {"uid": uid, "user": user, "at": wall, "source": where}
        else:
            self.canceller = {"why": where if not where.startswith("/") else f"{where} names no kill request"}
        self._decide()

    def ours(self) -> bool:
        """ddptui's own scancel is what cancelled the job: it came before anyone else's (slurmctld's log, to the
        millisecond; without it, slurmstepd's or scontrol's time, to the second)."""
        if not self.cancelled_by_us:
            return False
        if self.cancel is None:
            return True
        first = (self.canceller or {}).get("at")
        if first is not None:
            return self.ours_at is not None and first >= self.ours_at - 0.05
        return self.ours_at is not None and self.ours_at <= self.cancel["at"] + 1.0

    def outside(self) -> bool:
        """Slurm stopped the job, and not because ddptui asked."""
        return self.cancel is not None and not self.ours()

    def who(self) -> str:
        """'uid 0 (root)', or why who cancelled it is not known here."""
        c = self.canceller or {}
        if "uid" in c:
            return f"uid {c['uid']}" + (f" ({c['user']})" if c.get("user") else "")
        return ""

    def stop_words(self) -> str:
        """A rank's end when Slurm stopped it: 'stopped by Slurm: scancel by uid 0 (root) at 19:32:02'."""
        import time
        c = self.cancel
        assert c is not None  # said only once Slurm's cancel is known (outside())
        when = time.strftime("%H:%M:%S", time.localtime((self.canceller or {}).get("at") or c["at"]))
        if self.who() and not c["due"]:
            return f"stopped by Slurm: scancel by {self.who()} at {when}"
        job = f"job {self.job_id}" if self.job_id else "the job"
        return f"stopped by Slurm: {job} {c['how']} at {when}, not by ddptui"

    def _decide(self) -> None:
        """Once Slurm's cancel is known (or who asked for it): say it, and judge the ranks it stopped again."""
        s = self.s
        if not self.outside():
            s.slurm_stop = None
            return
        assert self.cancel is not None  # outside() says it is known
        words = self.stop_words()
        s.slurm_stop = {"at": self.cancel["at"] if self.canceller is None or "at" not in self.canceller
                        else min(self.cancel["at"], self.canceller["at"]), "words": words}
        why = (self.canceller or {}).get("why")
        if self._said_cancel != (self.who(), why) and not self.wants_canceller:  # said once who asked is read
            self._said_cancel = (self.who(), why)
            s.say(f"ddptui: Slurm {self.cancel['how']} {'job ' + self.job_id if self.job_id else 'the job'}, not ddptui"
                  f" ({self.cancel['evidence']})"
                  + (f", asked by {self.who()} (slurmctld's log)" if self.who()
                     else f"; who asked is not known here: {why}" if why else "")
                  + ": its ranks are stopped by Slurm, not failed")
        if self.life is not None:
            self.life.slurm_stopped_again(words)
        if not any(t.status == ev.RankStatus.FAILED for t in s.tracks.values()):
            s.first_failure = None  # the ranks "failed" of Slurm's signals only: nothing to tear down for
            if not self.lost:
                self._failed_at = None

    # ---- nodes -------------------------------------------------------------------------------------------
    def node_lost(self, node: str, ranks: tuple[int, ...], why: str, teardown: bool = True) -> None:
        """A node stopped taking part: say so once, and tear the run down (exit 1)."""
        s = self.s
        if node in self.lost:
            return
        self.lost[node] = {"ranks": list(ranks), "why": why, "wall": s.wall}
        s.emit(ev.NodeLost(node, tuple(ranks), why, s.wall))
        s.say(f"ddptui: node {node} lost: {why}; tearing the run down")
        if self._failed_at is None:
            self._failed_at = s.mono
        if teardown:
            self._tear_down()

    def launcher_lines(self, lines, exit_codes) -> None:
        """srun's own words (its output is the launcher's): a node of the job failed; how tasks ended, which with one
        task per rank (launch srun) are the ranks' exit codes, handed to `exit_codes` as (rank, code) pairs."""
        if self.launch == "srun":
            codes = [(task, code) for ln in lines for task, code in slurm_state.task_ends(ln) if task in self.s.tracks]
            if codes:
                exit_codes(codes)
        for ln in lines:
            node = slurm_state.node_failure(ln)
            if node:
                ranks = tuple(sorted(r for r, t in self.s.tracks.items() if t.node == node))
                # lines bring events only: the teardown is asked for at the next check
                self.node_lost(node, ranks or tuple(sorted(self.s.tracks)), f"srun: node failure on {node}",
                               teardown=False)

    def agent_exited(self, name: str, ranks: tuple[int, ...], returncode: int, signal: str | None,
                     others_running: bool) -> None:
        """A process of the plan that starts ranks on one node ended (`others_running`: other nodes' agents run)."""
        s = self.s
        node = node_of_agent(name)
        if not node or s.tearing_down:
            return
        on_node = self._ranks_on(node, ranks)
        # its ranks failed or died first (the death watch saw it, even with no exit code yet): a crash, not a lost node
        failed = any(s.tracks[r].status == ev.RankStatus.FAILED or s.tracks[r].exc is not None
                     or (s.tracks[r].pid and s.tracks[r].pid in s.died_at) for r in on_node)
        if agent_lost_node(returncode, signal, failed, others_running):
            self.node_lost(node, on_node, f"its agent {name} ended ({signal or f'exit {returncode}'}) while the other "
                                          "nodes still ran, with no error of its ranks")

    def _ranks_on(self, node: str, planned: tuple[int, ...]) -> tuple[int, ...]:
        """The ranks that said they run on `node` (c10d gives nodes their ranks at rendezvous), else the plan's."""
        said = tuple(sorted(r for r, t in self.s.tracks.items() if t.node == node))
        return said or tuple(planned)

    def new_attempt(self) -> None:
        """The launcher restarted every rank: the failure that started the agents' grace is the last attempt's."""
        self._failed_at = None

    # ---- the watchdog ------------------------------------------------------------------------------------
    def check(self, agents: list[Agent]) -> None:
        """Agents still running agent_exit_grace s after the run failed or lost a node are torn down, and their node
        named lost: the ranks they started are gone or failed, they wait for peers that will not come."""
        s = self.s
        if self._failed_at is None and s.first_failure is not None:
            self._failed_at = s.first_failure
        if self.lost and not self._ended_job:
            self._tear_down()
            return
        if self.under_slurm and not self._asked_peers and not self._ended_job and not s.tearing_down \
                and not self.outside():
            ask = self._lost_peers()  # from the first error read, before the rank has even exited
            if ask:  # the teardown waits for their answer (the next check): scancel ends the job srun asks in
                self._asked_peers = True
                s.emit(ProbeNodes(ask))
                return
        if self.under_slurm and s.first_failure is not None and not self._ended_job and not s.tearing_down \
                and not self.outside():
            # the surviving tasks block in their collective (the plan leaves --kill-on-bad-exit out): the crash grace
            # gives the survivors nothing; ddptui ends the job now, through scancel, and the first failure stays the cause
            s.say("ddptui: a rank failed; ending the Slurm job now")
            self._tear_down()
            return
        if self.under_slurm and s.first_failure is None and not self._ended_job and not s.tearing_down:
            ask = self._silent_nodes()
            if ask:
                s.emit(ProbeNodes(ask))
        if self._watchdog_fired or self._failed_at is None or not agents or s.mono - self._failed_at <= self.grace \
                or s.restart_expected:  # the agent restarts every rank: the next attempt (attempts.py)
            return
        if any(s.tracks[r].alive for a in agents for r in a.ranks if r in s.tracks and a.node == ""):
            return  # a whole-job agent with live ranks: the crash grace of the watch tears those down
        self._watchdog_fired = True
        names = ", ".join(a.name for a in agents)
        s.say(f"ddptui: {names} still running {self.grace:g} s after the run failed (agent_exit_grace); tearing down")
        for a in agents:
            if a.node and a.node not in self.lost:
                self.node_lost(a.node, self._ranks_on(a.node, a.ranks),
                               f"its agent {a.name} did not exit {self.grace:g} s after the run failed",
                               teardown=False)
        self._tear_down()

    # ---- asking nodes whether they answer (node_probe.py does the asking) ----------------------------------
    def _lost_peers(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """Every rank that failed says its peer went away ("Connection reset by peer"): a victim, whose cause may be a
        whole node gone (its ranks' own deaths are not seen from here). The other nodes with ranks not known to have
        ended, to ask before the teardown whether they still answer (node, pids of those ranks there)."""
        s = self.s
        failed = [t for t in s.tracks.values() if t.status == ev.RankStatus.FAILED or t.exc is not None]
        said = [(t.rank, victim_marker(RankEvidence(t.rank, exc=t.exc, err_lines=tuple(t.err_tail)))) for t in failed]
        if not failed or not all(m for _, m in said):
            return ()  # a rank failed on its own: that is the cause, nothing to ask
        mine = {t.node for t in failed}
        peers: dict[str, list] = {}
        for t in s.tracks.values():
            if t.alive and t.node and t.node not in mine and t not in failed:
                peers.setdefault(t.node, []).append(t)
        why = ", ".join(f"rank {r}: {m}" for r, m in said)
        lost_peer = f"{ranks_text([r for r, _ in said])} lost {'its peer' if len(said) == 1 else 'their peers'}"
        for node, ts in peers.items():
            ranks = tuple(t.rank for t in ts)
            self._asked_why[node] = (ranks, f"and {ranks_text(ranks)} there {'is' if len(ranks) == 1 else 'are'} "
                                            f"gone ({why})", lost_peer)
        return tuple((node, tuple(t.pid for t in ts if t.pid)) for node, ts in sorted(peers.items()))

    def _silent_nodes(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """During start-up, once a rank has waited STARTUP_ASK_AFTER s in its rendezvous: the job's nodes where no rank
        has reached its rendezvous yet (node, pids of its ranks there), each asked at most every STARTUP_ASK_EVERY s."""
        s = self.s
        if s.job_waiting or not self.job_nodes or any(t.step is not None for t in s.tracks.values()):
            return ()
        waiting = [t for t in s.tracks.values() if t.alive and t.phase == "rendezvous"]
        if not waiting or s.mono - min(t.phase_mono for t in waiting) < STARTUP_ASK_AFTER:
            return ()
        joined = {t.node for t in s.tracks.values() if t.phase in _JOINED}
        unheard = tuple(r for r, t in sorted(s.tracks.items()) if not t.node)
        out = []
        for node in self.job_nodes:
            if node in joined or node in self.lost or s.mono - self._asked_at.get(node, -1e9) < STARTUP_ASK_EVERY:
                continue
            there = [t for t in s.tracks.values() if t.node == node]
            ranks = tuple(t.rank for t in there) or unheard
            if not ranks:
                continue
            self._asked_at[node] = s.mono
            w = [t.rank for t in waiting]
            waits = f"{ranks_text(w)} wait{'s' if len(w) == 1 else ''}"
            self._asked_why[node] = (ranks, f"while {waits} for {ranks_text(ranks)} in the rendezvous"
                                            + ("" if there else " (not heard from yet)"),
                                     f"{ranks_text(w)} {'has' if len(w) == 1 else 'have'} waited "
                                     f"{s.mono - min(t.phase_mono for t in waiting):.0f} s in the rendezvous")
            out.append((node, tuple(t.pid for t in there if t.pid)))
        return tuple(out)

    def probed(self, answers: dict) -> None:
        """The nodes' answers (node -> NodeAnswer): a node srun could not reach is lost, with what made ddptui ask."""
        s = self.s
        for node, a in sorted(answers.items()):
            ranks, why, because = self._asked_why.get(node, (self._ranks_on(node, ()), "", ""))
            asked = f"ddptui: asked {node} through srun whether it still answers" + (f" ({because})" if because else "")
            if a.status == "unreachable":
                self.node_lost(node, ranks, f"its slurmd does not answer (srun: {a.said})" + (f", {why}" if why else ""))
            elif a.status == "answered":
                seen = [f"rank {t.rank}: {a.states[t.pid]}" for t in s.tracks.values()
                        if t.rank in ranks and a.states.get(t.pid)]
                s.say(f"{asked}: it does" + (f" ({', '.join(seen)})" if seen else ""))
            else:
                s.say(f"{asked}: could not tell ({a.said})")

    def _tear_down(self) -> None:
        """Ask for the run's teardown (exit 1), once, unless it is already under way."""
        if not self._ended_job and not self.s.tearing_down:
            self.s.emit(TearDown("failed", EXIT_FAILED))
        self._ended_job = True

    # ---- the end -----------------------------------------------------------------------------------------
    def status(self, status: str, exit_code: int) -> tuple[str, int]:
        """A lost node makes the run failed (exit 1), also one a stall was said for (the lost node stalled it); a job
        Slurm ended badly (not by ddptui's scancel) fails an otherwise ok run."""
        j = self.job
        bad_job = (j is not None and j.state in slurm_state.ENDED and j.state != "COMPLETED"
                   and not (j.state == "CANCELLED" and self.ours()))
        if self.lost and status not in ("failed", "stopped"):
            return "failed", EXIT_FAILED  # a stall or differing replicas of a run that lost a node: the node's loss
        if self.outside() and self.s.crash is None and status in ("ok", "failed"):
            return "cancelled", EXIT_FAILED  # Slurm stopped every rank, none failed by itself: no crash
        if bad_job and status == "ok":
            return "failed", EXIT_FAILED
        return status, exit_code

    def summary(self) -> dict:
        """summary.json's `job` (None without a Slurm job) and `nodes_lost`."""
        j = self.job
        if j is not None and self.cancel is not None and not self.cancel["due"] and j.state not in slurm_state.ENDED:
            # slurmstepd said CANCELLED while the job is still ending: ddptui's engine inside the job writes this
            # before its own job can end (scancel from outside); Slurm ends it CANCELLED
            j = replace(j, state="CANCELLED")
        job = None if j is None else {"id": j.job_id, "state": j.state, "reason": j.reason,
                                      "exit_code": j.exit_code, "nodes": list(self.job_nodes),
                                      # ddptui's scancel is what ended it (a job that failed first says FAILED)
                                      "cancelled_by_ddptui": self.ours() and j.state == "CANCELLED",
                                      # who else did, when Slurm cancelled it (runners/evidence/slurm_state.py)
                                      "cancelled_by": self.cancelled_by(),
                                      "end": slurm_state.end_words(j)}
        return {"job": job, "nodes_lost": {n: dict(v) for n, v in self.lost.items()}}

    def cancelled_by(self) -> str | None:
        """summary.json's job `cancelled_by`: 'ddptui', 'uid 0 (root)', 'not ddptui (who: ...)'; None: not cancelled."""
        if self.cancel is None:
            return "ddptui" if self.cancelled_by_us and self.job is not None and self.job.state == "CANCELLED" else None
        if self.ours():
            return "ddptui"
        if self.cancel["due"]:
            return f"Slurm ({self.cancel['how']})"
        return self.who() or "not ddptui" + (f" (who: {self.canceller['why']})" if self.canceller and
                                             "why" in self.canceller else "")
