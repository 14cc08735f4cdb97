"""How each rank ended: process exits, deaths the watch saw, torchrun's exit codes and ddptui's own teardown."""
from __future__ import annotations

from collections.abc import Set

from ..events import ProcessExited, RankStatus, rank_ended
from ..evidence.crash import RankEvidence, ended_by, ended_by_our_stop, exit_words, signal_of, stopped_words
from .rank_track import RankTrack
from .run_state import RunState


class RankLifecycle:
    """Rank ends over a RunState: the status and outcome words of each rank when its process is known to be gone."""

    def __init__(self, state: RunState) -> None:
        self.s = state

    def watched_pids(self) -> set[int]:
        """Pids of rank processes not known to be dead: the death watch should watch them."""
        return {t.pid for t in self.s.tracks.values() if t.pid and t.exit_wall is None}

    def rank_pids(self) -> set[int]:
        return {t.pid for t in self.s.tracks.values() if t.pid}

    def process_started(self, pid: int, stdout_rank: int | None) -> None:
        if stdout_rank is not None:
            self.s.tracks[stdout_rank].pid = pid

    def deaths(self, seen: list[tuple[int, float, int | None]], own: set[int], gone: Set[int] = frozenset()) -> None:
        """Rank processes that died: `seen` (pid, wall, returncode or None) as the death watch saw them, `own` the
        pids of processes ddptui started itself (their exit code comes with `process_exited`), `gone` pids found
        dead without a watch (their time is now)."""
        alive: dict[int, list[RankTrack]] = {}  # several ranks share a pid when they are threads (XLA on CPU)
        for t in self.s.tracks.values():
            if t.pid and t.exit_wall is None and t.pid not in own:
                alive.setdefault(t.pid, []).append(t)
        for pid, wall, rc in sorted(seen, key=lambda d: d[1]):  # in the order they really died
            self.s.died_at.setdefault(pid, wall)
            for t in alive.pop(pid, []):
                if t.returncode is None and rc is not None:
                    t.returncode, t.signal = rc, signal_of(rc)
                self._rank_died(t, wall)
        for pid in sorted(gone):
            for t in alive.pop(pid, []):
                self._rank_died(t, self.s.wall)

    def _rank_died(self, t: RankTrack, wall: float) -> None:
        t.exit_wall = wall
        if t.returncode is not None or self.slurm_stopped(t):  # Slurm's cancel ended it: its exit code is no news
            self.rank_ended(t, False)
        elif not t.completed and self.s.first_failure is None and t.exc is not None:
            self.s.first_failure = self.s.mono

    def process_exited(self, name: str, ranks, pid: int, returncode: int, exited: float | None, launcher: bool,
                       torn_down: bool = False) -> None:
        """A process ddptui started exited (`launcher`: it starts ranks rather than being one); feed `deaths` first."""
        sig = signal_of(returncode)
        self.s.emit(ProcessExited(name, tuple(ranks), returncode, sig, exited or self.s.wall))
        for r in ranks:
            t = self.s.tracks[r]
            if t.exit_wall is not None and not launcher:
                continue
            if launcher and t.returncode is None:
                # the launcher exits 0 only if every rank did; otherwise ranks without a failure entry were stopped by it
                t.returncode = 0 if returncode == 0 else None
            elif not launcher:
                t.returncode, t.signal = returncode, sig
                t.exit_wall = self.s.died_at.get(pid)  # when it died, not the loop turn that noticed it
            t.exit_wall = t.exit_wall or exited
            self.rank_ended(t, torn_down or (launcher and t.returncode is None))

    def exit_codes(self, codes) -> None:
        """(rank, exit code) pairs the launcher's log gave: a death seen before its code was known ends now."""
        for rank, code in codes:
            t = self.s.tracks.get(rank)
            if t is not None and t.returncode is None:
                t.returncode, t.signal = code, signal_of(code)
                if t.exit_wall is not None:  # its death was seen before its exit code was known
                    self.rank_ended(t, False)

    def rank_ended(self, t: RankTrack, stopped: bool) -> None:
        """Its status when it ended, from what is known now; the crash verdict settles it at the end."""
        s = self.s
        if rank_ended(t.status):
            return
        rc = t.returncode
        own_error = t.first_failure_wall is not None or t.exc is not None
        by_launcher = s.launcher_log.pid_stopped(t.pid)
        stop_signal = t.signal in ("SIGTERM", "SIGINT") and s.first_failure is not None
        failed = [x for x in s.tracks.values() if x.status == RankStatus.FAILED]
        first = min(failed, key=lambda x: x.first_failure_wall or s.wall) if failed else None
        if rc == 0:
            t.outcome = "exited 0"
            s.set_status(t, RankStatus.EXITED, "exit 0")
        elif t.node in s.nodes_lost and rc is None and not own_error:  # no word of it since: it went with its node
            t.outcome = f"lost with node {t.node}"
            s.set_status(t, RankStatus.KILLED, t.outcome)
        elif self.slurm_stopped(t):  # Slurm's cancel ended it (scancel from outside, its time limit): not a failure
            assert s.slurm_stop is not None  # slurm_stopped() says it is set
            t.outcome = s.slurm_stop["words"]
            s.set_status(t, RankStatus.KILLED, t.outcome)
        elif self.ended_by_our_stop(t, stopped):  # ddptui's own signal (or a launcher passing it on): not a failure
            words = stopped_words(s.stop_why, first.rank if first else None)
            t.outcome = words if t.ran else f"never started ({words})"
            s.set_status(t, RankStatus.KILLED, t.outcome)
        elif rc is not None and rc < 0 and t.completed and not stopped:
            t.outcome = f"completed, then died at exit ({t.signal})"
            s.set_status(t, RankStatus.EXITED, t.outcome)
            self.hint_exit(t)
        elif not own_error and (stopped or by_launcher or stop_signal):
            if not t.ran:  # not a line, not a report (the hello either): its program never ran
                t.outcome = "never started"
            else:
                t.outcome = ended_by("ddptui" if s.tearing_down and stopped else "launcher",
                                     first.rank if first else None)
            s.set_status(t, RankStatus.KILLED, t.outcome)
        else:
            what = exit_words(rc, t.exc) if rc is not None else (t.signal or "exit ?")
            t.outcome = f"failed ({what})"
            t.first_failure_wall = min(t.first_failure_wall or t.exit_wall or s.wall, t.exit_wall or s.wall)
            if s.first_failure is None:
                s.first_failure = s.mono
            s.set_status(t, RankStatus.FAILED, what)
            self.hint_exit(t)

    def ended_by_our_stop(self, t: RankTrack, stopped: bool) -> bool:
        """It died after ddptui began tearing the run down, with no error of its own before (crash.ended_by_our_stop);
        with no death time known, `stopped` during the teardown says so."""
        if t.exit_wall is None:
            return stopped and self.s.tearing_down
        return ended_by_our_stop(RankEvidence(t.rank, t.returncode, died_at=t.exit_wall,
                                              error_at=t.first_failure_wall), self.s.stop_at)

    def slurm_stopped(self, t: RankTrack) -> bool:
        """It died after Slurm cancelled the job (not ddptui: runners/judge/job_follow.py), with no error of its own before,
        and before any teardown of ddptui's own began."""
        stop, s = self.s.slurm_stop, self.s
        if stop is None or t.exit_wall is None or (s.stop_at is not None and s.stop_at < stop["at"]):
            return False
        return ended_by_our_stop(RankEvidence(t.rank, t.returncode, died_at=t.exit_wall,
                                              error_at=t.first_failure_wall if t.exc is not None else None),
                                 stop["at"])

    def slurm_stopped_again(self, words: str) -> None:
        """Slurm's cancel was learned (or who asked for it): the ranks it stopped, already ended, say so now."""
        for t in self.s.tracks.values():
            if t.returncode == 0 or t.status == RankStatus.EXITED or not self.slurm_stopped(t):
                continue
            if not rank_ended(t.status):  # died with no exit code known yet (srun ended before it said one)
                self.rank_ended(t, False)
            elif t.outcome != words:
                t.outcome = words
                self.s.set_status(t, RankStatus.KILLED, words)

    def stopped_by(self, t: RankTrack) -> str | None:
        """Who sent the signal it ended with: "slurm" (its cancel), "ddptui", "launcher", or None (nobody we know of)."""
        if self.slurm_stopped(t):
            return "slurm"
        if self.ended_by_our_stop(t, "by ddptui" in t.outcome):
            return "ddptui"
        if self.s.launcher_log.pid_stopped(t.pid):
            return "launcher"
        return None

    def oom_suspects(self) -> list[int]:
        """Pids killed by SIGKILL that nobody we know of sent: whether the kernel's OOM killer did is worth a look."""
        return [t.pid for t in self.s.tracks.values()
                if t.pid and t.signal == "SIGKILL" and self.stopped_by(t) is None]

    def hint_exit(self, t: RankTrack) -> None:
        s = self.s
        if s.matcher is not None and t.returncode is not None:
            hint = s.matcher.for_exit(t.rank, t.returncode, completed=t.completed,
                                      in_process=s.runner.in_process, env=s.profile.env)
            if hint is not None:
                s.hint(hint, t.rank, t.outcome, s.wall)

    def teardown_began(self, why: str | None = None) -> None:
        """ddptui begins signalling the run's processes now (`why`: the run's status, when it decided to)."""
        if why is not None:
            self.s.stop_why = why
        self.s.tearing_down = True
        if self.s.stop_at is None:
            self.s.stop_at = self.s.wall

    def xla_worker_aborts(self, wall: float) -> None:
        """XLA's termination timeout is a FATAL log line: abort() of the one worker process, every thread replica in it.
        A replica that raised keeps its own exception as its cause."""
        for t in self.s.tracks.values():
            if t.alive and t.returncode is None and t.exc is None and not t.completed:
                t.returncode, t.signal = -6, "SIGABRT"
                t.exit_wall = t.exit_wall or wall
                self.rank_ended(t, False)

    def end_the_rest(self) -> None:
        """At the end: every rank not ended yet ends now, as stopped."""
        for t in self.s.tracks.values():
            if t.alive and t.exit_wall is None:
                t.exit_wall = self.s.wall
            if not rank_ended(t.status):
                self.rank_ended(t, stopped=True)
