"""Per-rank progress bookkeeping and the decisions made from it: stalled, slow, crashed, completed."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from ..events import RankStatus, rank_ended
from ..evidence.steptime import StepClock

MAX_POINTS = 2000  # loss points kept per rank (older ones thinned, first and last always kept)
POINTS_PER_EVENT = 500  # loss points one Progress event carries at most


@dataclass
class RankTrack:
    rank: int
    started: float  # monotonic
    status: str = RankStatus.STARTING
    step: int | None = None
    loss: float | None = None
    first_loss: float | None = None
    losses: list = field(default_factory=list)  # (step or index, loss)
    summary_loss: dict | None = None  # the workload's own "loss: A -> B over N steps"
    last_progress: float = 0.0  # monotonic
    last_progress_wall: float = 0.0
    output_note: str = ""  # an attached rank's output ddptui cannot read ("output not readable"): no step is seen
    quiet_by: str = ""  # what dates its quiet when no output does (an attached rank's threads asleep: attach_sched.py)
    clock: StepClock = field(default_factory=StepClock)  # step durations
    cpu_hist: deque = field(default_factory=lambda: deque(maxlen=16))  # (monotonic, CPU seconds) samples
    pid: int | None = None
    ran: bool = False  # its program ran: a line or a report of its own (ranks sharing one pid are told apart so)
    host: str = ""
    node: str = ""  # the node as its launcher names it (Slurm node name, torchrun's node<N>), else the host
    returncode: int | None = None
    signal: str | None = None
    exit_wall: float | None = None
    tail: deque = field(default_factory=lambda: deque(maxlen=40))
    err_tail: deque = field(default_factory=lambda: deque(maxlen=80))
    digests: list | None = None
    verdict: dict | None = None
    exc: dict | None = None
    collectives: dict = field(default_factory=dict)  # pg name -> its Flight Recorder numbers (runners/evidence/collectives.py)
    # (its step, {pg name: collectives enqueued}) at each of its recent `coll` reports (runners/evidence/lockstep.py)
    coll_marks: deque = field(default_factory=lambda: deque(maxlen=16))
    debug_sock: str | None = None  # its torch debug server's unix socket (a `debug_server` report), on its node
    first_failure_wall: float | None = None
    phase: str = ""  # the start-up phase it said last (runners/judge/ingest.py PHASES), "" before any
    phase_mono: float = 0.0  # monotonic time it said it
    stalled: bool = False
    outcome: str = ""  # why it ended, in words
    steps_total: int | None = None
    samples: int | None = None  # samples in its newest optimizer step, as the rank counted them (Progress.samples)
    rss_peak: int | None = None  # the highest RSS sampled of its process, bytes (a SIGKILL's memory evidence)
    new_losses: list = field(default_factory=list)  # (step, loss) since the last Progress event
    reports_losses: bool = False  # the rank reports its losses itself (ddptui_report)
    reported_step: bool = False  # a step came from its own report: the optimizer hook counts finished steps
    parsed_steps: int = 0  # step numbers read from its lines that moved its step on
    printed_step: int | None = None  # the newest step number read from its own lines (its own numbering)
    parsed_step_loss: bool = False  # a line of its own gave a step with its loss
    _drawn_to: int | None = None  # the last parsed point's step when the first report arrived

    def take_new_losses(self) -> tuple:
        """The loss points seen since the last call, evenly thinned to POINTS_PER_EVENT (the last one kept)."""
        pts, self.new_losses = self.new_losses, []
        if len(pts) > POINTS_PER_EVENT:
            k = (len(pts) - 1) / (POINTS_PER_EVENT - 1)
            pts = [pts[round(i * k)] for i in range(POINTS_PER_EVENT)]
        return tuple(pts)

    def saw_output(self, mono: float, wall: float) -> None:
        self.last_progress, self.last_progress_wall = mono, wall
        self.ran = True
        self.quiet_by = ""

    def saw_step(self, step: int | None, loss: float | None, mono: float, wall: float, reported: bool = False) -> bool:
        """Record a step/loss (`reported`: from the rank's own report, not a parsed log line); True if it is news."""
        news = False
        if step is not None and not reported:
            self.printed_step = step
        if step is not None and (self.step is None or step > self.step):
            if reported:
                self.reported_step = True
            else:  # reported steps are timed by the rank's own clock (Session._report)
                self.clock.read(step, mono)
                self.parsed_steps += 1
            self.step, news = step, True
        if not reported and step is not None and loss is not None:
            self.parsed_step_loss = True
        if loss is not None and self._curve_takes(step, reported):
            self.loss, news = loss, True
            if self.first_loss is None:
                self.first_loss = loss
            point = (step if step is not None else self.step if self.step is not None else len(self.losses), loss)
            self.losses.append(point)
            self.new_losses.append(point)
            if len(self.losses) > MAX_POINTS:
                self.losses = self.losses[:1] + self.losses[1:-1:2] + self.losses[-1:]
        if news:
            self.saw_output(mono, wall)
        return news

    def _curve_takes(self, step: int | None, reported: bool) -> bool:
        """One loss curve per rank, one point per step. A rank that reports its losses owns the curve from its
        first report on (a script may also print them: those parsed lines no longer add points), and reported
        points for steps the parsed lines already drew are skipped once, where the two sources meet."""
        if not reported:
            return not self.reports_losses
        if not self.reports_losses:
            self.reports_losses = True
            self._drawn_to = self.losses[-1][0] if self.losses else None
        if self._drawn_to is not None and step is not None:
            if step <= self._drawn_to:
                return False
            self._drawn_to = None  # past the meeting point: the rank's own numbering rules from here on
        return True

    @property
    def step_named(self) -> int | None:
        """The step a verdict names ("at step 5"): the rank's own printed number where it tells the same moment as
        the optimizer hook's count (a loop from 0 prints one less than the steps done, and a sudden death can lose the
        hook's last batched report: the count would be 5 or 6 by chance, the printed line is always there), else the
        count."""
        p = self.printed_step
        return p if p is not None and self.step is not None and 0 <= self.step - p <= 1 else self.step

    @property
    def past_first_step(self) -> bool:
        """Its first step is done: a step it reported itself, a line with a step and its loss, or a second step
        read from its lines (a step number alone may come before that step's work: "hanging at step 0")."""
        return self.reported_step or self.parsed_step_loss or self.parsed_steps >= 2

    @property
    def alive(self) -> bool:
        return self.returncode is None and not rank_ended(self.status)

    @property
    def completed(self) -> bool:
        """The workload finished its work (its own verdict arrived), whatever the exit said afterwards."""
        if self.verdict is not None:
            return True
        reached = self.steps_total is None or (self.step or 0) >= self.steps_total
        return self.digests is not None and self.exc is None and reached


@dataclass(frozen=True)
class Behind:
    """A rank far behind the lead at one moment of their own clocks: its step then and the lead's."""
    rank: int
    step: int
    lead: int

    def detail(self) -> str:
        return f"at step {self.step}, {self.lead - self.step} steps behind the lead ({self.lead})"


def behind_by(lead: int, bound: int | None = None) -> float:
    """How far behind the lead a straggler is: more than 5 steps and a quarter of the lead's, and than `bound`."""
    return max(5, 0.25 * lead, bound or 0)


def _marks(tracks, remote, wall_offset: float) -> dict[int, list]:
    """rank -> its (step, time) marks on one clock: the live ranks that counted a step (see `aligned_steps`)."""
    marks = {}
    for t in tracks:
        if not t.alive or t.step is None or not t.clock.marks:
            continue
        if t.clock.own and t.rank in remote:
            if any(w is None for _, _, w in t.clock.marks):
                continue
            marks[t.rank] = [(s, w - wall_offset) for s, _, w in t.clock.marks]
        else:
            marks[t.rank] = [(s, m) for s, m, _ in t.clock.marks]
    return marks


def _steps_at(marks: dict, moment: float) -> tuple[int, dict[int, int]] | None:
    """(the most steps any rank had surely counted by `moment`, rank -> the most it can have counted then)."""
    at_least = [s for m in marks.values() for s, at in m if at <= moment]
    if not at_least:
        return None
    return max(at_least), {r: next(s for s, at in m if at >= moment) for r, m in marks.items()}


def aligned_steps(tracks, remote=frozenset(), wall_offset: float = 0.0) -> tuple[int, dict[int, int]] | None:
    """(the lead's step, rank -> its step) at one moment of the live ranks' own clocks, or None before two ranks
    can be compared.

    A rank's step count as read is as old as its last batched report (0.1 s apart, later under load), so counts read
    together are of different moments. They are compared at the moment T the least recent rank last counted a step:
    each rank's step at T is at most that of its first mark (runners/evidence/steptime.py) at or after T, and the lead is the
    most steps any rank had surely counted by T. Ranks on this host are timed by their monotonic clocks (one clock
    per host); a rank on another node (`remote`) by the wall time its report carries, moved onto the engine's
    monotonic clock by `wall_offset` (engine wall - engine monotonic); one whose report has no wall time is left
    out. Marks of ranks that report no clock are the engine's read times (the engine's clock)."""
    marks = _marks(tracks, remote, wall_offset)
    if len(marks) < 2:
        return None
    return _steps_at(marks, min(m[-1][1] for m in marks.values()))


PACE = 1.25  # a straggler's steps take at least this many times the lead's (its mean step time against the lead's)


def find_slow(tracks, remote=frozenset(), wall_offset: float = 0.0, bound: int | None = None) -> list[Behind]:
    """Ranks progressing but far behind the others, and stepping slower than the lead: a straggler in a workload not
    in lock-step. `bound`: the most steps the ranks can be apart at all (runners/evidence/lockstep.py).

    Far behind is a gap to the lead at one moment of their clocks (`aligned_steps`); slower is a mean step time
    (its own clock; its first step, start-up, is never timed) PACE times the lead rank's or more. A gap alone is also
    where a rank started: one whose first step came late (its lazy set-up, a core it waited for on a loaded machine)
    starts behind and then keeps pace or catches up; beside busy loops a 1.1 s first step read as "10 steps behind
    the lead (11)" while the real straggler, named second, went unsaid."""
    tracks = {t.rank: t for t in tracks}
    marks = _marks(tracks.values(), remote, wall_offset)
    if len(marks) < 2:
        return []
    moment = min(m[-1][1] for m in marks.values())
    found = _steps_at(marks, moment)
    if found is None:
        return []
    lead, steps = found
    leader = max(marks, key=lambda r: max((s for s, at in marks[r] if at <= moment), default=-1))
    pace = tracks[leader].clock.mean()
    need = behind_by(lead, bound)
    out = []
    for r, s in sorted(steps.items()):
        mine = tracks[r].clock.mean()
        if r != leader and lead - s > need and pace is not None and mine is not None and mine >= PACE * pace:
            out.append(Behind(r, s, lead))
    return out
