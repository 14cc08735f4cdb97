"""The run's conclusion once every process is gone: replica and crash verdicts, status and exit code, summary.json."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .. import events as ev
from ..evidence import kill_reading, nccl_finding, own_exit, replica
from ..evidence.crash import signal_of
from . import run_verdicts
from .rank_lifecycle import RankLifecycle
from .run_state import EXIT_FAILED, EXIT_OK, EXIT_REPLICAS, RunState
from .stack_verdicts import StackVerdicts


@dataclass(frozen=True)
class Launcher:
    """A process of the plan that is not a rank (torchrun, the XLA spawner), as the conclusion needs it."""
    name: str
    returncode: int | None


class Conclusion:
    """Concludes a RunState: the verdicts it ends with, each rank's final outcome, the status, the summary."""

    def __init__(self, state: RunState, lifecycle: RankLifecycle, verdicts: StackVerdicts) -> None:
        self.s = state
        self.life = lifecycle
        self.verdicts = verdicts

    def settle(self) -> None:
        """At the end: a launcher traceback still held back is shown; every rank not ended yet ends now."""
        s = self.s
        held = s.launcher_log.flush()
        if held:
            s.emit(ev.LogLines(None, "err", s.wall, s.mono, tuple(held)))
        self.life.end_the_rest()

    def conclude(self, status: str | None, exit_code: int | None, launchers: Sequence[Launcher] = (),
                 oom: dict[int, kill_reading.KillEvidence] | None = None, recorded: dict[int, dict] | None = None,
                 nccl: tuple[dict, dict] | None = None) -> tuple[str, int]:
        """The replica verdict, the crash verdict (to the outbox), the status and exit code, after `settle`.

        status/exit_code: what ended the run (a TearDown's), or None when every process exited on its own;
        launchers: the plan's non-rank processes; oom: pid -> what the machine says of `oom_suspects()`; recorded: rank
        -> the error it recorded in torchrun's error file (torch's @record), for ranks with no exception report;
        nccl: (rank -> dump, rank -> why unreadable) of the Flight Recorder dumps NCCL wrote itself at a timeout."""
        s = self.s
        oom, recorded = oom or {}, recorded or {}
        rep = None
        if s.profile.replica_check:
            cut_short = status is not None or any(t.status == ev.RankStatus.FAILED and not t.completed
                                                  for t in s.tracks.values())
            res = replica.compare({r: t.digests for r, t in s.tracks.items() if t.digests is not None},
                                  s.world, {r: d for r, (d, _) in s.first_digests.items()}, self._replica_kind(),
                                  cut_short, s.unseen())
            if res.hint:
                s.raise_hint(res.hint, None, res.text)
            text = res.text
            if cut_short and res.status != "unavailable":
                text += " (digests taken when the ranks exited, not after a completed run)"
            rep = ev.ReplicaVerdict(res.status, text, res.param, res.ranks, res.params, res.table, s.wall)
            s.emit(rep)
        s.replica = rep
        if status in (None, "failed"):
            s.crash = self._xla_abort_verdict(self.crash_verdict(oom, recorded)) or self._launcher_verdict(launchers)
        else:
            s.crash = None
        if s.crash and rep is not None and rep.status == "differ" and not any(
                t.signal or t.exc for t in s.tracks.values()):
            s.crash = None  # the ranks only exited non-zero because their own replica check failed
        if nccl:
            s.crash = nccl_finding.with_dumps(s.crash, nccl[0], nccl[1], s.world)
        if s.crash:
            s.emit(s.crash)
        elif any(self.life.stopped_by(t) in ("slurm", "ddptui") for t in s.tracks.values()):
            # a peer that "went away" was stopped with the others (Slurm's cancel, ddptui's teardown): no rank
            # crashed, and the hint's "find the rank that failed first" would send the user after a crash that is not
            s.hints = [h for h in s.hints if h["code"] != "peer-closed"]
        all_done = all(t.completed for t in s.tracks.values())  # a launcher failing over exit-time aborts only
        dead = [pr for pr in launchers if pr.returncode and not all_done]
        for pr in dead:
            s.say(f"ddptui: launcher {pr.name} exited with {signal_of(pr.returncode) or pr.returncode}")
        if status is None:
            bad = [t for t in s.tracks.values() if t.status == ev.RankStatus.FAILED] + dead
            status, exit_code = ("failed", EXIT_FAILED) if bad else ("ok", EXIT_OK)
        if rep is not None and rep.status == "differ" and status in ("ok", "failed"):
            status, exit_code = "replicas differ", EXIT_REPLICAS
        elif s.diverged is not None and status == "ok" and (rep is None or rep.status not in ("identical", "differ")):
            status, exit_code = "replicas differ", EXIT_REPLICAS  # the end had no word on them: the live check's stands
        return status, exit_code  # type: ignore[return-value]  # a TearDown's status comes with its exit code

    def _replica_kind(self) -> str:
        """Who could have made the initial weights equal: "xla" (nothing, unless the program broadcasts), "ddp"
        (DistributedDataParallel broadcast them when it wrapped the model) or "plain"."""
        if self.s.runner.xla_replicas:
            return "xla"
        return "ddp" if any(src == "ddp" for _, src in self.s.first_digests.values()) else "plain"

    def crash_verdict(self, oom: dict[int, kill_reading.KillEvidence], recorded: dict[int, dict]
                       ) -> ev.CrashVerdict | None:
        """Who failed first, from every rank's evidence (runners/evidence/crash.py decides); each rank's outcome follows it
        (also at the end of an attempt the launcher restarts: runners/judge/attempts.py).
        Ranks that ended by an exit status of their own are no crash: own_exit says them."""
        s = self.s
        evidence = []
        for t in s.tracks.values():
            stopped_by = self.life.stopped_by(t)
            exc = t.exc if t.exc is not None else recorded.get(t.rank)
            kill = None
            if t.signal == "SIGKILL" and stopped_by is None:  # nobody we know of sent it: was it the OOM killer?
                # (ignore: a rank with no pid finds no evidence in oom, which is by pid)
                kill = kill_reading.read_kill(t.pid, oom.get(t.pid) or kill_reading.KillEvidence(), t.rss_peak,  # type: ignore[arg-type]
                                             s.rss_all_peak)
                self._kill_hint(t.rank, kill)
            # an attached rank's stderr may go where it cannot be read: there an exit 1 may hide a traceback
            seen = not s.attached or bool(t.err_tail)
            how = ""
            if stopped_by == "slurm":  # who cancelled the job, and when
                assert s.slurm_stop is not None  # stopped_by() says "slurm" only once Slurm's stop is known
                how = s.slurm_stop["words"]
            evidence.append(run_verdicts.rank_evidence(t, stopped_by, exc, kill, seen, how))
        crash, outcomes = run_verdicts.crash(evidence, s.launcher_log.root_rank, s.wall, s.unseen())
        s.own_exit = own_exit.decide(evidence, {r: str(t.verdict.get("text") or "")
                                                for r, t in s.tracks.items() if t.verdict})
        if s.own_exit is not None:
            outcomes = s.own_exit.outcomes
        for r, (status, words) in outcomes.items():
            t = s.tracks[r]
            if t.node in s.nodes_lost and t.status == ev.RankStatus.KILLED:
                continue  # it went with its node (rank_lifecycle): the node lost is its end, not the crash's words
            was, t.outcome = (t.status, t.outcome), words
            if status == "failed" and was[0] != "failed":  # taken for stopped until its exit code arrived
                s.set_status(t, status, t.signal or (f"exit {t.returncode}" if t.returncode else "failed"))
                self.life.hint_exit(t)
            elif status == "killed" and was != (status, words):  # the verdict knows better who stopped it
                s.set_status(t, status, words)
        return crash

    def _launcher_verdict(self, launchers: Sequence[Launcher]) -> ev.CrashVerdict | None:
        """No rank failed, but a launcher (torchrun, or another whose stream holds the error) exited non-zero over an
        error of its own: that error is why the run ended."""
        s = self.s
        err = s.launcher_log.agent_error
        failed = [pr.name for pr in launchers if pr.returncode]
        if err is None or not failed or all(t.completed for t in s.tracks.values()):
            return None
        stopped = sorted(r for r, t in s.tracks.items() if self.life.stopped_by(t) == "launcher")
        crash, outcomes = run_verdicts.launcher_failed(err, stopped, s.unseen(), s.wall, failed[0])
        for r, words in outcomes.items():
            t = s.tracks[r]
            if t.outcome != words:
                t.outcome = words
                s.set_status(t, ev.RankStatus.KILLED, words)
        return crash

    def _kill_hint(self, rank: int, kill: kill_reading.Reading) -> None:
        """The SIGKILL hint the memory evidence supports: less memory only where memory was short, or may have been."""
        s = self.s
        hint = s.matcher.for_kill(kill) if s.matcher is not None else None
        if hint is not None:
            s.hint(hint, rank, f"killed by SIGKILL ({kill.words})", s.wall)

    def _xla_abort_verdict(self, crash):
        s = self.s
        rdv = s.xla_rdv
        if rdv is None or not rdv.terminated:
            return crash
        culprits = s.hang.culprits if s.hang is not None else ()
        self.verdicts.xla_fix_hint({}, culprits)
        crash, aborted = run_verdicts.xla_abort(crash, rdv, list(s.tracks.values()), culprits, s.wall)
        for r in aborted:
            s.tracks[r].outcome = run_verdicts.XLA_ABORTED
        return crash

    def summary(self, status: str, exit_code: int, run_dir: str, duration_s: float, cpu_s: float,
                stacks: list[str], survivors: list[str]) -> dict:
        """summary.json: the run's conclusion, every rank's end, the verdicts and hints (figures of the I/O side in)."""
        s = self.s
        rep, hang, crash = s.replica, s.hang, s.crash
        return {
            "profile": s.profile.name, "runner": s.profile.runner, "run_dir": run_dir,
            "status": status, "exit_code": exit_code, "world_size": s.world,
            "unseen": list(s.unseen()),  # ranks of the world on other nodes, not watched by this ddptui
            "duration_s": duration_s, "ddptui_cpu_s": cpu_s,
            "ranks": {r: {"status": t.status, "outcome": t.outcome, "returncode": t.returncode,
                          "signal": t.signal, "steps": t.step, "samples_per_step": t.samples,
                          "step_time_s": t.clock.mean(),
                          "first_loss": t.first_loss,
                          "last_loss": t.loss, "workload_loss": t.summary_loss, "pid": t.pid,
                          "host": t.host, "node": t.node,
                          "workload_verdict": t.verdict}
                      for r, t in s.tracks.items()},
            "replica": None if rep is None else rep.fields_json("status", "text", "param", "ranks"),
            # the live check's first divergence (the end's "replica" stays the last word)
            "divergence": None if s.diverged is None else s.diverged.fields_json("text", "step", "since", "param",
                                                                                 "ranks", "agree", "stop"),
            # the live check's interval (0: off; attached: no hooks), complete sets compared, the newest agreeing step
            "replica_checks": {"every": 0 if s.attached else s.profile.replica_check_every,
                               "compared": s.live_replicas.compared, "last_agreed": s.live_replicas.agreed},
            "stall": s.stall_info,
            "slow": s.slow_info,
            "hang": None if hang is None else hang.fields_json("text", "culprits", "waiting", "where", "collective",
                                                               "fix"),
            "crash": None if crash is None else {**crash.fields_json("text", "root_rank", "victims", "exit", "excerpt",
                                                                     "together", "stopped", "never_started",
                                                                     "outcomes"),
                                                 "collective": crash.collective or None},
            "own_exit": s.own_exit.to_dict() if s.own_exit is not None else None,
            "hints": s.hints,
            "stacks": stacks,
            "survivors": survivors,
        }
