"""Every decision of a run, with no I/O, so that each can be tested without processes (session.py does the I/O).

`Judge` is the one object Session talks to; each job is its own module over the shared RunState (run_state.py):
ingest.py reads lines and reports, rank_lifecycle.py ends ranks, watch.py watches the running run,
stack_verdicts.py reads stacks, conclusion.py concludes."""
from __future__ import annotations

from collections.abc import Sequence, Set

from ..events import RankStatus
from . import world_view
from .attempts import Attempts
from .conclusion import Conclusion, Launcher
from .ingest import Ingest
from .job_follow import Agent, JobFollow  # noqa: F401 - Agent re-exported
from .rank_lifecycle import RankLifecycle
from .run_state import (  # noqa: F401 - re-exported
    EXIT_FAILED,
    EXIT_OK,
    EXIT_REPLICAS,
    EXIT_STALLED,
    EXIT_USAGE,
    CollectStacks,
    EndAttempt,
    Now,
    ProbeNodes,
    RunState,
    TearDown,
)
from .runner_traits import PLAIN, RunnerTraits
from .stack_verdicts import StackVerdicts
from .watch import CRASH_GRACE, SLOW_SAMPLES, Watch  # noqa: F401 - re-exported


class Judge:
    """The rank tracks of one run and every decision made from them.

    What was read, exited, died, sampled and collected goes in, each input with the moment it was taken (`now`, a
    `Now`; left out, the clock stays as last told: a test's fake clock set with `tick`): the judge never reads a
    clock, a file, a process or psutil. Each input method returns the outputs it caused, in order: `events.Event`s
    (ddptui's own lines as `LogLines` of rank None), `CollectStacks` and `TearDown`; the run loop
    (runners/run_loop.py) emits and records the events and carries out the requests.
    """

    def __init__(self, profile, mono: float, wall: float, matcher=None, runner: RunnerTraits = PLAIN) -> None:
        """runner: what the profile's runner declares of its ranks (launch/registry.traits_of); the plain default fits
        ranks that are processes of their own."""
        self.state = s = RunState(profile, mono, wall, matcher, runner)
        self.life = RankLifecycle(s)
        self.ingest = Ingest(s, self.life)
        self.stacks = StackVerdicts(s)
        self.watch = Watch(s, self.stacks)
        self.end = Conclusion(s, self.life, self.stacks)
        self.job = JobFollow(s, profile.agent_exit_grace, self.life)
        self.attempts = Attempts(s, self.end, self.watch, self.ingest, self.job)
        self.ingest.on_attempt = self.attempts.hello
        self.watch.restart_hung = self.attempts.end_hung

    # ---- what the session and the front ends read ----------------------------------------------------
    profile = property(lambda self: self.state.profile)
    world = property(lambda self: self.state.world)
    tracks = property(lambda self: self.state.tracks)
    hints = property(lambda self: self.state.hints)
    stall_info = property(lambda self: self.state.stall_info)
    slow_info = property(lambda self: self.state.slow_info)
    held = property(lambda self: self.watch.held)  # stall.Held: ranks past their limit, held off as busy, or None
    hang = property(lambda self: self.state.hang)
    crash = property(lambda self: self.state.crash)
    replica = property(lambda self: self.state.replica)
    launcher_log = property(lambda self: self.state.launcher_log)

    @property
    def matcher(self):
        return self.state.matcher

    @matcher.setter
    def matcher(self, matcher) -> None:
        self.state.matcher = matcher  # runners.evidence.hints.HintMatcher, or None: no hints

    # ---- the clock and the start ---------------------------------------------------------------------
    def tick(self, mono: float, wall: float) -> None:
        """Set the clock (a test's fake clock; the run loops hand each input its own `now` instead)."""
        self.state.mono, self.state.wall = mono, wall

    def _at(self, now: Now | None) -> None:
        if now is not None:
            self.state.mono, self.state.wall = now

    def say(self, text: str, now: Now | None = None) -> list:
        """A launcher line (ddptui's own words), at the judge's clock."""
        self._at(now)
        self.state.say(text)
        return self.state.take()

    def begin(self, world: int, processes: int, here: tuple[int, ...] | None = None, now: Now | None = None) -> list:
        """Ranks 0..world-1 are tracked from now (only `here` when this ddptui sees part of the world:
        LaunchPlan.ranks_here); `processes`: how many processes the plan starts."""
        self._at(now)
        self.state.begin(world, processes, here)
        self.attempts.begin()
        return self.state.take()

    def requeued(self, attempt: int, job_id: str | None, earlier: Sequence, now: Now | None = None) -> list:
        """This engine runs attempt `attempt` of a requeued Slurm job's record (attempts.Attempts.requeued)."""
        self._at(now)
        self.attempts.requeued(attempt, job_id, earlier)
        return self.state.take()

    def rank_learned(self, guess: int | None, rank: int, now: Now | None = None) -> list:
        """A rank's hello named `rank` where the plan guessed `guess` (tail.Tailer.take_renamed): feed it before the
        lines read with it. A ddptui that tracks only its node's ranks renumbers the track (runners/judge/world_view.py)."""
        self._at(now)
        world_view.renumber(self.state, guess, rank)
        return self.state.take()

    # ---- lines read (ingest.py) ----------------------------------------------------------------------
    def lines(self, rank: int | None, stream: str, lines: list[str], wall: float, mono: float,
              now: Now | None = None) -> list:
        """Lines read from one source in one go (rank None: a launcher's own output). Returns their LogLines (with
        reports taken out) and whatever they caused: progress is coalesced until `progress()`."""
        self._at(now)
        if self.job.under_slurm:  # slurmstepd's word of a cancel first: the ranks' ends that follow are Slurm's
            from ..evidence.slurm_state import CANCEL_NEEDLE, NODE_FAILURE_NEEDLE, TASK_END_NEEDLE
            blob = getattr(lines, "text", None) or "\n".join(lines)
            if CANCEL_NEEDLE in blob:
                self.job.stepd_lines(lines)
        self.ingest.lines(rank, stream, lines, wall, mono)
        if rank is None and self.job.under_slurm and (NODE_FAILURE_NEEDLE in blob or TASK_END_NEEDLE in blob):
            self.job.launcher_lines(lines, self.life.exit_codes)
        return self.state.take()

    def progress(self) -> list:
        """The Progress events coalesced since the last call: one per rank that moved (the UI samples them)."""
        self.ingest.progress()
        return self.state.take()

    # ---- ranks of a job ddptui did not launch (`ddptui attach`, runners/attach/session.py) ---------------
    def rank_found(self, rank: int, pid: int, host: str, node: str, wall: float, now: Now | None = None) -> list:
        """A rank found by runners/attach/find.py: what its injected hello would have said (pid, host, node)."""
        self._at(now)
        self.ingest._report({"k": "hello", "pid": pid, "host": host, "node": node, "world": self.world},
                            rank, wall, self.state.mono)
        return self.state.take()

    def rank_running(self, rank: int, detail: str = "", now: Now | None = None) -> list:
        """An attached rank found alive is running (not starting: ddptui cannot tell how far it is); `detail` says
        what is known of it ("output not readable")."""
        self._at(now)
        t = self.state.tracks.get(rank)
        if t is not None and t.alive:
            t.output_note = detail
            self.state.set_status(t, RankStatus.RUNNING, detail)
        return self.state.take()

    def quiet_since(self, rank: int, mono: float, wall: float, why: str) -> None:
        """An attached rank with no output to read shows no sign of progress since `mono`, as `why` says (its threads
        have not run since then, says the kernel): its stall clock counts from there, as a file's last write dates a
        rank that writes into one. Only ever earlier than what it has."""
        t = self.state.tracks.get(rank)
        if t is not None and t.alive and mono < t.last_progress:
            t.last_progress, t.last_progress_wall, t.quiet_by = mono, wall, why

    def debug_server_found(self, rank: int, address: str, wall: float, now: Now | None = None) -> list:
        """An attached rank serves torch's debug server at `address` (runners/attach/debug.py), as a launched rank's
        `debug_server` report says: its stacks (without ptrace) and Flight Recorder records are read there."""
        self._at(now)
        self.ingest._report({"k": "debug_server", "path": address}, rank, wall, self.state.mono)
        return self.state.take()

    def stack_moved(self, rank: int, mono: float, wall: float) -> None:
        """An attached rank showed a sign of life, as a line is: its sampled stack moved (runners/attach/liveness.py),
        or its threads wrote bytes nobody may read (runners/attach/sched.py)."""
        t = self.state.tracks.get(rank)
        if t is not None and t.alive:
            t.saw_output(mono, wall)

    # ---- processes (rank_lifecycle.py) ---------------------------------------------------------------
    def process_started(self, pid: int, stdout_rank: int | None) -> None:
        self.life.process_started(pid, stdout_rank)

    def watched_pids(self) -> set[int]:
        """Pids of rank processes not known to be dead: the death watch should watch them."""
        return self.life.watched_pids()

    def rank_pids(self) -> set[int]:
        return self.life.rank_pids()

    def deaths(self, seen: list[tuple[int, float, int | None]], own: set[int], gone: Set[int] = frozenset(),
               now: Now | None = None) -> list:
        """Rank processes that died (rank_lifecycle.RankLifecycle.deaths)."""
        self._at(now)
        self.life.deaths(seen, own, gone)
        return self.state.take()

    def process_exited(self, name: str, ranks, pid: int, returncode: int, exited: float | None, launcher: bool,
                       torn_down: bool = False, now: Now | None = None) -> list:
        """A process ddptui started exited (`launcher`: it starts ranks rather than being one); feed `deaths` first."""
        self._at(now)
        self.life.process_exited(name, self.state.plan_ranks(ranks), pid, returncode, exited, launcher, torn_down)
        return self.state.take()

    def teardown_began(self, why: str | None = None, now: Now | None = None) -> None:
        """ddptui begins signalling the run's processes now (`why`: the run's status, when it decided to)."""
        self._at(now)
        self.life.teardown_began(why)

    def oom_suspects(self) -> list[int]:
        """Pids killed by SIGKILL that nobody we know of sent: whether the kernel's OOM killer did is worth a look."""
        return self.life.oom_suspects()

    # ---- the watch (watch.py) ------------------------------------------------------------------------
    def sample_targets(self) -> dict[int, int | None]:
        """rank -> its pid (None: not known yet, its launcher's stands in) for every live rank to sample."""
        return self.watch.sample_targets()

    def resources(self, samples: dict[int, tuple[int, float, float, int]], emit: bool = True,
                  no_cpu: dict[int, str] | None = None, host_load: tuple[float, int | None] | None = None,
                  now: Now | None = None) -> list:
        """samples: rank -> (pid sampled, mono, CPU seconds, RSS bytes); no_cpu: rank -> why it has none (on another
        node); host_load: (1-minute load average, CPUs) of the engine's host (watch.Watch.resources)."""
        self._at(now)
        self.watch.resources(samples, emit, no_cpu, host_load)
        return self.state.take()

    def busy_test_due(self, now: Now | None = None) -> bool:
        """A rank is past its quiet limit: `check` will want the machine's cores and load, and fresh CPU samples."""
        self._at(now)
        return self.watch.busy_test_due()

    def check(self, cores: int = 1, load: float = 0.0, now: Now | None = None) -> list:
        """The periodic decisions at the judge's clock: timeout, crash grace, stall / held / cleared, slow-down.
        cores/load: the cores ddptui may use and the 1-minute load average (the busy test's floor)."""
        self._at(now)
        self.watch.check(cores, load)
        return self.state.take()

    # ---- stacks (stack_verdicts.py, asked for by the watch) ------------------------------------------
    def stack_targets(self) -> list[tuple[int, int]]:
        """(rank, pid) of every live rank whose pid is known: whose stacks can be taken."""
        return self.stacks.targets()

    def dump_requested(self, now: Now | None = None) -> list:
        """`d`, `ddptui dump`, SIGUSR1: stacks now; a verdict only while the run is actually stalled."""
        self._at(now)
        self.watch.dump_requested()
        return self.state.take()

    def stacks_collected(self, req: CollectStacks, results: dict | None, folder: str | None,
                         fr: dict | None = None, now: Now | None = None) -> list:
        """The stacks `req` asked for, taken and recorded in `folder` (results: rank -> stacks.StackResult; None: no
        live rank to take them from; fr: rank -> its Flight Recorder dump taken with them, as torch's
        fr_trace_json gives it normalised by runners/evidence/fr_records.normalise_all: pg_config keyed by the groups' real
        names, pg_status numbers as ints). Returns the verdict read from them, and what the request was for."""
        self._at(now)
        self.attempts.stacks_taken(folder)
        self.watch.stacks_collected(req, results, folder, fr)
        return self.state.take()

    # ---- the job and the nodes (job_follow.py) -------------------------------------------------------
    def job_submitted(self, launch: str = "srun") -> None:
        """The ranks run under a batch job (`launch`: SlurmJob.launch): no stall clock until it runs."""
        self.job.submitted(launch)

    def job_info(self, info, nodes: tuple[str, ...] = (), down: tuple[str, ...] = (), now: Now | None = None) -> list:
        """Slurm's answer about the job (slurm_state.JobInfo; `nodes` its node list expanded; `down` those of them
        Slurm has down, asked only when the job ended NODE_FAIL)."""
        self._at(now)
        self.job.job_info(info, nodes, down)
        return self.state.take()

    def job_cancelling(self, now: Now | None = None) -> None:
        """ddptui scancels the job now (teardown)."""
        self._at(now)
        self.job.cancelling()

    def job_canceller(self, requests: list, where: str, now: Now | None = None) -> list:
        """Who asked Slurm to kill the job (slurm_job.SlurmJobWatch.kill_requests: (wall, uid, user) each, and where
        that was read or why it could not be), once `job.wants_canceller`."""
        self._at(now)
        self.job.canceller_read(requests, where)
        return self.state.take()

    def node_lost(self, node: str, ranks: tuple[int, ...], why: str, now: Now | None = None) -> list:
        """A node cannot be reached or stopped taking part (e.g. stacks could not be taken there)."""
        self._at(now)
        self.job.node_lost(node, ranks, why)
        return self.state.take()

    def nodes_probed(self, answers: dict, now: Now | None = None) -> list:
        """The answers to a ProbeNodes request (node -> job_follow.NodeAnswer): a node srun cannot reach is lost."""
        self._at(now)
        self.job.probed(answers)
        return self.state.take()

    def agent_exited(self, name: str, ranks, returncode: int, signal: str | None, others_running: bool,
                     now: Now | None = None) -> list:
        """A per-node agent ended (feed `process_exited` first): a node lost unless its ranks failed themselves."""
        self._at(now)
        self.job.agent_exited(name, self.state.plan_ranks(ranks), returncode, signal, others_running)
        return self.state.take()

    def watchdog(self, agents: list, now: Now | None = None) -> list:
        """Agents (job_follow.Agent) still running long after the run failed or lost a node: tear down."""
        self._at(now)
        self.job.check(agents)
        return self.state.take()

    # ---- the conclusion (conclusion.py) --------------------------------------------------------------
    def settle(self, now: Now | None = None) -> list:
        """At the end: a launcher traceback still held back is shown; every rank not ended yet ends now."""
        self._at(now)
        self.end.settle()
        return self.state.take()

    def conclude(self, status: str | None, exit_code: int | None, launchers: Sequence[Launcher] = (),
                 oom: dict | None = None, recorded: dict[int, dict] | None = None,
                 nccl: tuple[dict, dict] | None = None, now: Now | None = None) -> tuple[list, str, int]:
        """The run's conclusion after `settle`: (events, status, exit code) (conclusion.Conclusion.conclude)."""
        self._at(now)
        status, exit_code = self.end.conclude(status, exit_code, launchers, oom, recorded, nccl)
        out = self.state.take()
        if self.job.lost:
            out = self._node_lost_crash(out)
        status, exit_code = self.job.status(status, exit_code)
        self.attempts.conclude(status)
        return out + self.state.take(), status, exit_code

    def end_attempt(self, status: str, now: Now | None = None) -> list:
        """The run ends with `status` before its summary: an attempt that `conclude` did not end (a run that ended
        before its ranks started) ends now."""
        self._at(now)
        self.attempts.conclude(status)
        return self.state.take()

    def _node_lost_crash(self, out: list) -> list:
        """The crash verdict of a run that lost a node says so first (and there is one even without rank evidence);
        a rank that failed only because its peer went away is the lost node's victim (run_verdicts.node_lost_crash)."""
        from .. import events as ev
        from .run_verdicts import node_lost_crash
        s = self.state
        s.crash, outcomes = node_lost_crash(s.crash, self.job.lost, s.tracks, s.wall)
        for r, (status, words) in outcomes.items():
            t = s.tracks[r]
            if (t.status, t.outcome) != (status, words):
                t.outcome = words
                s.set_status(t, status, words)
        now = s.take() + [s.crash]  # each rank's end as the verdict words it, then the verdict
        at = next((i for i, e in enumerate(out) if isinstance(e, ev.CrashVerdict)), len(out))
        return out[:at] + now + out[at + 1:]

    def summary(self, status: str, exit_code: int, run_dir: str, duration_s: float, cpu_s: float,
                stacks: list[str], survivors: list[str]) -> dict:
        """summary.json: the run's conclusion, every rank's end, the verdicts and hints (figures of the I/O side in)."""
        return {**self.end.summary(status, exit_code, run_dir, duration_s, cpu_s, stacks, survivors),
                **self.job.summary(), **self.attempts.summary()}
