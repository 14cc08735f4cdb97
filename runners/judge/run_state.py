"""What every part of the judge shares: the rank tracks, the clock as last told, the verdicts so far, and the outbox."""
from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass
from typing import NamedTuple

from .. import events as ev
from ..evidence import replica, xla_evidence
from ..evidence.launcher_log import TorchrunLog
from ..evidence.own_exit import OwnExit
from .rank_track import RankTrack
from .runner_traits import PLAIN, RunnerTraits

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_STALLED, EXIT_REPLICAS = 0, 1, 2, 3, 4


class Now(NamedTuple):
    """The moment an input to the judge was taken: the judge's clock while it decides from that input."""
    mono: float
    wall: float


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
class ProbeNodes:
    """Ask each node, through srun in the job, whether it still answers and the state of these pids there
    (runners/edge/node_probe.py); hand the answers to `Judge.nodes_probed`."""
    nodes: tuple[tuple[str, tuple[int, ...]], ...]  # (node, pids of its ranks)


@dataclass(frozen=True)
class EndAttempt:
    """End these ranks of attempt `attempt` (their stacks are taken), not their launcher: torchrun restarts every rank
    after a failure, as the next attempt (runners/judge/attempts.py)."""
    attempt: int
    pids: tuple[int, ...]


@dataclass(frozen=True)
class TearDown:
    """End the run: tear every process down, with this status and exit code unless the conclusion says worse."""
    status: str
    exit_code: int


class Steps(dict):
    """rank -> its step (None: none seen), and `unread`: the ranks whose steps cannot be seen at all (an attached rank
    whose output cannot be read): their None is no evidence that they never stepped."""

    def __init__(self, steps: dict, unread: Set[int] = frozenset()) -> None:
        super().__init__(steps)
        self.unread = set(unread)


class RunState:
    """One run's shared state. The parts (ingest, rank_lifecycle, watch, stack_verdicts, conclusion) read and write
    it; what they decide goes to the outbox (`emit`, `say`) in order, and the facade hands it out with `take`."""

    def __init__(self, profile, mono: float, wall: float, matcher=None, runner: RunnerTraits = PLAIN) -> None:
        self.profile = profile
        self.runner = runner  # what the profile's runner declares of its ranks
        self.world = profile.world_size
        self.tracks: dict[int, RankTrack] = {}
        self.matcher = matcher  # runners.evidence.hints.HintMatcher, or None: no hints
        self.mono, self.wall = mono, wall
        self.started_mono = mono
        self.hints: list[dict] = []
        self.stall_info: dict | None = None
        self.slow_info: dict | None = None  # the slow ranks named, once per run
        self.hang: ev.HangVerdict | None = None
        self.crash: ev.CrashVerdict | None = None
        self.own_exit: OwnExit | None = None  # the ranks ended by an exit status of the program's own, no crash
        self.replica: ev.ReplicaVerdict | None = None
        self.first_digests: dict[int, tuple[list, str]] = {}  # rank -> (digests before its first update, source)
        self.live_replicas = replica.LiveCheck()  # the ranks' digests every replica_check_every steps, compared
        self.diverged: ev.ReplicaDiverged | None = None  # what the live check found, once
        self.divergence_stop = False  # on_divergence: stop, and not yet carried out (watch.py tears down)
        self.launcher_log = TorchrunLog()  # what torchrun says about its ranks
        self.died_at: dict[int, float] = {}  # pid -> wall time the death watch saw it die
        self.rss_all_peak: int | None = None  # the most RSS the ranks on this machine held together, bytes
        self.first_failure: float | None = None  # monotonic time the first rank failed
        self.tearing_down = False
        self.nodes_lost: dict[str, dict] = {}  # node -> {"ranks", "why", "wall"}: nodes that stopped taking part
        self.stop_at: float | None = None  # wall time ddptui began signalling the run's processes (its teardown)
        self.stop_why: str | None = None  # the run's status then: "stalled", "timeout", "stopped", "failed"
        self.one_launcher = False  # a single process runs every rank: its local ranks are the global ones
        # this ddptui sees only some of the world's ranks (one node's agent of a multi-node torchrun, each node under
        # its own ddptui): the tracks are those ranks, by their global numbers once their hellos said them
        self.partial = False
        self.renumbered: dict[int, int] = {}  # the plan's number of a rank -> its global number, where they differ
        self.said_hello: set[int] = set()  # ranks whose hello was read (their number is their own word for it)
        self.unseen_said = False  # the unseen ranks were named (runners/judge/world_view.py)
        self.attached = False  # `ddptui attach`: the job is not ddptui's, it signals none of its processes
        self.job_waiting = False  # the ranks' batch job has not started them yet (Slurm: pending): no stall clock
        # Slurm stopped the job, not ddptui (runners/judge/job_follow.py): {"at": wall, "words": a stopped rank's end}
        self.slurm_stop: dict | None = None
        # XLA's rendezvous warnings in the worker's log: collective evidence (runners/evidence/xla_evidence.py)
        self.xla_rdv = xla_evidence.Rendezvous() if runner.xla_replicas else None
        self.attempt = 0  # the launcher's restarts so far: the current attempt (runners/judge/attempts.py)
        self.max_restarts = runner.max_restarts
        self.ending_attempt = False  # ddptui ends this attempt's hung ranks for the launcher to restart (EndAttempt)
        self._out: list = []

    @property
    def restarts_left(self) -> int:
        return max(0, self.max_restarts - self.attempt)

    @property
    def restart_expected(self) -> bool:
        """A failure of this attempt is not the run's end: the launcher restarts every rank (ddptui's own launch)."""
        return self.restarts_left > 0 and not self.attached

    def begin(self, world: int, processes: int, here: tuple[int, ...] | None = None) -> None:
        """Track ranks 0..world-1, or only `here` (LaunchPlan.ranks_here: this ddptui sees part of the world)."""
        self.world = world
        self.partial = here is not None and len(here) < world
        self.one_launcher = processes == 1 and not self.partial
        now = self.mono
        ranks = range(world) if here is None else here
        self.tracks = {r: RankTrack(r, now, last_progress=now, steps_total=self.profile.steps) for r in ranks}

    def unseen(self) -> tuple[int, ...]:
        """The world's ranks this ddptui does not watch (they run on other nodes); () when it watches every one."""
        return tuple(r for r in range(self.world) if r not in self.tracks) if self.partial else ()

    def plan_ranks(self, ranks) -> tuple[int, ...]:
        """Ranks as the plan numbered them (ProcSpec.ranks), by the numbers the tracks have now."""
        return tuple(self.renumbered.get(r, r) for r in ranks)

    # ---- the outbox ----------------------------------------------------------------------------------
    def take(self) -> list:
        """What was decided since the last call, in order."""
        out, self._out = self._out, []
        return out

    def emit(self, e) -> None:
        self._out.append(e)

    def say(self, text: str) -> None:
        """A launcher line (ddptui's own words), at the state's clock."""
        self._out.append(ev.LogLines(None, "err", self.wall, self.mono, (text,)))

    def set_status(self, t: RankTrack, status: str, detail: str, wall: float | None = None) -> None:
        if t.status != status or detail:
            t.status = status
            self.emit(ev.RankState(t.rank, status, detail, wall or self.wall))

    def hint(self, hint, rank, line: str, wall: float) -> None:
        if hint.code in self.runner.quiet_hints:
            return  # the recipe is already applied: the warning comes from a real hang, which the verdict names
        self.hints.append({"code": hint.code, "title": hint.title, "explanation": hint.explanation,
                           "fix": hint.fix, "rank": rank, "line": line[:500]})
        self.emit(ev.HintRaised(hint.code, hint.title, hint.explanation, hint.fix, rank, line[:500], wall))

    def raise_hint(self, code: str, rank, line: str) -> None:
        if self.matcher is not None:
            hint = self.matcher.raise_code(code)
            if hint is not None:
                self.hint(hint, rank, line, self.wall)

    # ---- what several parts read ---------------------------------------------------------------------
    def pid_ranks(self) -> dict[int, int]:
        return {t.pid: t.rank for t in self.tracks.values() if t.pid}

    def steps(self) -> dict[int, int | None]:
        return Steps({r: t.step for r, t in self.tracks.items()},
                     {r for r, t in self.tracks.items() if t.step is None and t.output_note})
