"""A ddptui batch job followed from the login node (its submitter, `ddptui attach --slurm JOB`): while Slurm holds the
job back its state and reason are said; once the engine in the job has started its attempt, its record is followed
(tui/follow.py) in the console or the dashboard, stop and stacks through the engine's control channel, or through
Slurm when the engine runs on another host and its socket does not answer here."""
from __future__ import annotations

import signal
import socket
import sys
import time
from pathlib import Path

from ..runners import events as ev
from ..runners.edge import control, slurm_job
from ..runners.edge.slurm_job import SlurmJobWatch
from ..runners.evidence import slurm_state
from ..runners.launch.plan import SlurmJob
from .attach_words import attach_command
from .follow import FollowSource, RecordReader

POLL = 1.0  # seconds between looks at the job's state and its record while its engine has not started
# Polls in a row that must find the job ended before the follower believes it: just after `scontrol requeue` Slurm
# still says the job FAILED for a moment (seen for over a second on the test cluster)
ENDED_POLLS = 5


class AttemptsSeen:
    """How many attempts the record's engine started and how many runs it finished, read as the record grows: the
    engine of the job's current attempt runs while it started more than it finished. What it read is held for the
    follow, which goes on with the same reader (the record is read once)."""

    def __init__(self, run_dir: Path) -> None:
        self.reader = RecordReader(Path(run_dir))
        self.held: list[ev.Event] = []
        self.started = self.finished = 0

    def read(self) -> AttemptsSeen:
        if not self.reader.run_dir.is_dir():  # not there yet (or not seen yet on this host's shared filesystem)
            return self
        got = self.reader.read()
        self.held += got
        self.started += sum(isinstance(e, ev.AttemptStarted) for e in got)
        self.finished += sum(isinstance(e, ev.RunFinished) for e in got)
        return self

    def close(self) -> None:
        self.reader.close()

    @property
    def engine_running(self) -> bool:
        return self.started > self.finished


class JobFollowSource(FollowSource):
    """FollowSource on a batch job's record: the earlier attempts' ends do not end it; when the engine is on another
    host (engine.json's) and does not answer here, the job's state says whether it lives, stop goes through
    `scancel --signal=TERM --batch` and a dump is refused in words."""

    def __init__(self, job_id: str, run_dir: Path, past: int, watch: SlurmJobWatch,
                 seen: AttemptsSeen | None = None) -> None:
        """seen: what the wait for the engine read, and its reader: the follow goes on from there."""
        super().__init__(run_dir, past=past, alive=self._engine_alive,
                         start=(seen.reader, seen.held) if seen is not None else None)
        self.job_id, self.watch = job_id, watch

    def engine_host(self) -> str | None:
        """The engine's host when it is not this one, else None."""
        host = control.read_info(self.run_dir).get("host")
        return host if isinstance(host, str) and host and host != socket.gethostname() else None

    def _engine_alive(self) -> bool:
        if self.engine_host() is None:
            return control.lock_held(self.run_dir)
        info = self.watch.poll()  # a lock taken on another host is not seen from here (shared filesystems)
        return info is not None and info.state not in slurm_state.ENDED

    def request_dump(self) -> bool:
        if super().request_dump():
            return True
        host = self.engine_host()
        if host is not None:
            self.emit([ev.LogLines(None, "err", time.time(), 0.0, (
                f"ddptui: job {self.job_id}'s engine runs on {host} and its control socket does not answer here: "
                "stacks cannot be asked from this host (its stall policy takes them)",))])
        return False

    def stop_run(self, why: str = "") -> str:
        try:
            control.ask(self.run_dir, "stop", timeout=2.0, why=why)
            return "asked the engine to stop every rank…"
        except control.ChannelError as e:
            problem = slurm_job.signal_engine(self.job_id, "TERM")
            if problem:
                return f"cannot stop it: {e}; scancel: {problem}"
            return (f"its control socket does not answer here ({e}); asked Slurm to signal job {self.job_id}'s engine "
                    "(scancel --signal=TERM --batch)")

    def again(self) -> JobFollowSource:
        return JobFollowSource(self.job_id, self.run_dir, self.past, self.watch)


def follow(job_id: str, run_dir: Path, stops: bool, ui: bool = False) -> int:
    """Wait (saying the job's state and reason) until the job's engine has started, then follow its record to the end
    of the job's run. stops (the submitter): Ctrl-C/SIGTERM stop the run through the engine (a job whose engine has
    not started is cancelled; a second one cancels the job); else (a viewer) they leave. Exit: the run's code."""
    watch = SlurmJobWatch(SlurmJob("sbatch", "srun", "", job_id))
    asked: list[str] = []
    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for s in old:
        signal.signal(s, lambda signum, frame: asked.append(signal.Signals(signum).name))
    try:
        seen = _wait_for_engine(job_id, run_dir, watch, asked, stops)
        if seen is None:
            return 0
        if isinstance(seen, int):
            return seen
        source = JobFollowSource(job_id, run_dir, seen.finished, watch, seen)
        if ui:
            for s, h in old.items():
                signal.signal(s, h)
            from .app import run_follow
            code = run_follow(source)
            if source.left:
                print(f"ddptui: left; job {job_id} goes on judging itself ({attach_command(run_dir)})", flush=True)
            return code
        return _console(source, stops, asked, old)
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _wait_for_engine(job_id: str, run_dir: Path, watch: SlurmJobWatch, asked: list[str],
                     stops: bool) -> AttemptsSeen | int | None:
    """The record's counts once the job's engine runs (or the job ended with a record to show); an exit code when it
    ended without one; None when the viewer left."""
    seen, said, cancelled, ended = AttemptsSeen(run_dir), None, False, 0
    while not seen.read().engine_running:
        if asked and not stops:
            seen.close()
            print(f"ddptui: left; job {job_id} goes on judging itself ({attach_command(run_dir)})", flush=True)
            return None
        if asked and not cancelled:
            cancelled = True
            print(f"ddptui: {asked[0]}: job {job_id}'s engine has not started: cancelling the job ({watch.cancel()})",
                  flush=True)
        info = watch.poll()
        if info is None and watch.last is None and watch.error:
            seen.close()
            print(f"ddptui: cannot follow job {job_id}: {watch.error}", file=sys.stderr)
            return 1
        now = (info.state, info.reason) if info is not None else None
        if now is not None and now != said:
            said = now
            why = f" ({info.reason})" if info is not None and info.reason else ""
            wait = "" if now[0] in slurm_state.ENDED else "; waiting for its engine to start"
            print(f"ddptui: job {job_id} is {now[0]}{why}{wait}", flush=True)
        if not watch.unanswered:  # a client call that timed out under load says nothing of the job
            ended = ended + 1 if info is None or info.state in slurm_state.ENDED else 0
        if ended >= ENDED_POLLS:  # once may be Slurm's word of a moment ago: a job just requeued, not listed yet
            if seen.read().engine_running or seen.finished:
                return seen if seen.engine_running else _ended(seen)
            seen.close()
            return _end_code(run_dir, job_id, watch.last)
        time.sleep(POLL)
    return seen


def _ended(seen: AttemptsSeen) -> AttemptsSeen:
    """A job that ended with its record whole: followed from its beginning to its last run's end."""
    seen.finished -= 1
    return seen


def _console(source: JobFollowSource, stops: bool, asked: list[str], old: dict) -> int:
    from .console import Console
    console = Console()
    source.prepare(console.handle)
    done = len(asked)

    def on_signal(signum, frame) -> None:
        nonlocal done
        name = signal.Signals(signum).name
        if not stops:
            source.request_stop()
            return
        done += 1
        if done == 1:
            print(f"ddptui: {name}: asking the engine of job {source.job_id} to stop the run", flush=True)
            print(f"ddptui: {source.stop_run(f'its submitter got {name}')}", flush=True)
        else:
            print(f"ddptui: {name} again: cancelling job {source.job_id} ({source.watch.cancel()})", flush=True)
    for s in old:
        signal.signal(s, on_signal)
    if asked and stops:  # asked while the engine was starting
        done -= 1
        on_signal(signal.SIGINT if asked[0] == "SIGINT" else signal.SIGTERM, None)
    code = source.run()
    if source.left:
        print(f"ddptui: left; job {source.job_id} goes on judging itself ({attach_command(source.run_dir)})",
              flush=True)
        return 0
    if source.died:
        print(f"ddptui: {source.died}", file=sys.stderr)
    return code


def _end_code(run_dir: Path, job_id: str, last) -> int:
    state = last.state if last is not None else "unknown"
    print(f"ddptui: job {job_id} ended ({state}) and its engine left no record of a run in {run_dir}",
          file=sys.stderr)
    return 1
