"""A launched run: plan, spawn, one turn at a time, tear down (runners/run_loop.py runs the loop; the judge decides)."""
from __future__ import annotations

import glob
import json
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path

from . import events as ev
from .edge import control, open_files, procs
from .edge.clock import now
from .edge.preflight import Problem
from .edge.preflight import check as preflight_check
from .edge.slurm_job import SlurmJobWatch
from .edge.tail import Tailer
from .evidence import fr_records, signals, slurm_state
from .evidence.hints import HintMatcher
from .judge.job_follow import Agent, node_of_agent
from .judge.judge import CRASH_GRACE, EXIT_FAILED, EXIT_OK, EXIT_REPLICAS, EXIT_STALLED, EXIT_USAGE, TearDown  # noqa: F401
from .launch import fr_env
from .launch.plan import LaunchPlan
from .launch.registry import runner_for, traits_of
from .launch.slurm import prepare
from .run_loop import Over, RunLoop, RunResult

TEARDOWN_DEADLINE = 5.0
DISCOVER_EARLY, DISCOVER_FOUND = 0.2, 2.0  # how often to look for launcher-created log files


def rendezvous_port(profile) -> int:
    """The profile's master_port (or c10d endpoint's port), or with `auto` a port free on that address now.
    The slurm runner's port is chosen on the job's first node (runners/launch/slurm.py): 0 here."""
    if not runner_for(profile.runner).picks_port:
        return 0
    host, port = profile.rendezvous
    if port != "auto":
        return int(port)
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def make_plan(profile, run_dir: Path, port: int, dashboard_pid: int | None = None):
    return runner_for(profile.runner).plan(profile, run_dir, port, dashboard_pid)


class Session(RunLoop):
    """Runs one profile: its plan's processes spawned, followed turn by turn until they end, a stop or the judge
    asks for a teardown, then torn down (bounded) and concluded."""

    def __init__(self, profile, runs_root: Path | str = "runs", emit: Callable[[list], None] | None = None,
                 pyspy: str | None = None, stack_method: str = "auto", record_dir: Path | str | None = None) -> None:
        """record_dir: the record's folder when it is fixed already (the engine in a batch job ddptui submitted)."""
        super().__init__(profile, runs_root, emit, pyspy, stack_method, runner=traits_of(profile),
                         record_dir=record_dir)
        self.plan: LaunchPlan | None = None
        self._subreaper = False  # this run made the process a subreaper (undone when it ends)
        self._sockets: str | None = None  # the folder of the ranks' debug sockets (runners/launch/fr_env.py), removed at the end
        self.channel: control.Channel | None = None  # runners/edge/control.py: viewers in other processes ask through it
        self._next_discover = self._next_sample = self._next_check = self._next_job = 0.0

    # ---- start ---------------------------------------------------------------------------------------
    def _start(self) -> RunResult | None:
        p = self.profile
        try:  # first: the record is this engine's (engine.lock) and answers viewers from now on
            self.channel = control.Channel(self.run_dir, self.request_dump, self.request_stop, self.feed.add).open()
        except control.ChannelError as e:
            self._launcher_line(f"ddptui: {e}")
            return self._finish("failed", EXIT_USAGE)
        self.record.write_json("profile.json", p.to_json())
        port = rendezvous_port(p)
        plan = self.plan = make_plan(p, self.run_dir, port, os.getpid())
        self.record.write_json("plan.json", plan.to_json())
        if plan.job is not None:  # the folder Slurm writes rank files into: before srun
            if plan.job.mode == "sbatch":  # the engine runs in the job: `ddptui PROFILE` submits (tui/slurm_submit.py)
                self._launcher_line("ddptui: a Slurm batch run is submitted by `ddptui PROFILE [--no-ui]`, whose engine"
                                    " runs in the job; follow it with `ddptui attach RUN_DIR`")
                return self._finish("failed", EXIT_USAGE)
            prepare(plan, self.run_dir)
        here = plan.ranks_here
        self._carry_out(self.judge.begin(plan.world_size, len(plan.procs), here, now=now()))
        self._emit(ev.RunStarted(str(self.run_dir), p.name, p.runner, self.world, p.steps, time.time(),
                                 len(here) if self.judge.state.partial else None))
        if plan.job is not None and plan.job.attempt is not None:  # each run of the batch script: one attempt
            self._carry_out(self.judge.requeued(plan.job.attempt, plan.job.job_id, self._earlier_attempts(), now=now()))
        self._sockets, problem = fr_env.prepare(p, self.run_dir)  # before any rank starts: they bind in it
        if problem:
            self._launcher_line(f"ddptui: {problem}")
        if self._sockets:
            swept = fr_env.sweep_stale(keep=self._sockets)
            if swept:
                self._launcher_line(f"ddptui: removed {len(swept)} socket folder(s) of ddptui runs that were killed"
                                    f" ({', '.join(swept)})")
        problems = self._preflight()
        if problems:
            return self._finish("preflight failed", EXIT_USAGE, problems)
        self.judge.matcher = HintMatcher()
        if plan.job is None:
            # orphaned ranks of a launcher that died come to us, to be torn down; a Slurm job's processes are
            # slurmstepd's, and a subreaper that is an ancestor of slurmd (a test's cluster) would adopt its forks
            self._subreaper = procs.become_subreaper()
        tailer = self._tailer = Tailer()
        for n, spec in enumerate(plan.procs):
            if self._stop.is_set():  # a stop (SIGTERM, SIGINT, the UI) ends spawning at once; the loop tears down
                self._launcher_line(f"ddptui: stop requested while spawning: {n} of {len(plan.procs)} "
                                    "processes started, no more")
                break
            try:
                proc = procs.spawn(spec)
            except procs.SpawnError as e:
                self._launcher_line(str(e))
                return self._finish("failed", EXIT_FAILED)
            self.procs.append(proc)
            tailer.add(spec.stdout, spec.stdout_rank, "out")
            if spec.stderr != spec.stdout:
                tailer.add(spec.stderr, spec.stdout_rank, "err")
            self._emit(ev.ProcessStarted(spec.name, proc.pid, spec.ranks, proc.started))
            self.judge.process_started(proc.pid, spec.stdout_rank)
        for src in plan.sources:
            tailer.add(src.path, src.rank, src.stream, learn=src.learn_rank)
        if plan.job is not None and self.procs:
            self._follow_job(SlurmJobWatch(plan.job))
            self.judge.job_submitted(plan.job.launch)
        self._flush()
        return None

    def _preflight(self) -> list:
        problems = preflight_check(self.profile)
        problems += self._open_files()
        for pr in problems:
            self._launcher_line(f"ddptui: preflight {pr.severity}: {pr.message}" + (f" (fix: {pr.fix})" if pr.fix else ""))
        return [pr for pr in problems if pr.severity == "error"]

    def _open_files(self) -> list[Problem]:
        """The soft open-file limit raised for the ranks this engine follows; an error where the hard limit is too
        low (the engine would fail part way, with the ranks running)."""
        plan = self.plan
        assert plan is not None  # planned before the preflight
        ranks = len(plan.ranks_here) if plan.ranks_here is not None else plan.world_size
        soft, _ = open_files.ensure(open_files.needed(ranks))
        why = open_files.too_few(ranks, soft)
        if why is None:
            return []
        return [Problem("error", "open-files", why, "raise the hard limit of open files (`ulimit -Hn`, LimitNOFILE= in"
                        " a systemd unit, nofile in /etc/security/limits.conf) or run fewer ranks on this node")]

    # ---- one turn ------------------------------------------------------------------------------------
    def _poll(self) -> Over | None:
        tailer, mono = self.tailer, time.monotonic()
        if mono >= self._next_discover:
            tailer.discover()
            # quickly until every file a launcher will create exists, then only for new ones (a restart's)
            self._next_discover = mono + (DISCOVER_FOUND if tailer.all_found() else DISCOVER_EARLY)
        self._read_any = bool(self._read_lines(tailer))
        if self.slurm is not None:
            self.slurm.ask_canceller()
        end: TearDown | None = None
        for proc in self.procs:
            if proc.returncode is None and proc.poll() is not None:
                end = self._proc_exited(proc) or end
        if mono >= self._next_sample:
            self._sample_resources()
            self._next_sample = mono + 1.0
        if mono >= self._next_check:
            self._next_check = mono + 0.25
            self._check_rank_pids()
            end = self._carry_out(self._check()) or end
            end = self._carry_out(self.judge.watchdog(self._agents(), now=now())) or end
        if self.slurm is not None and mono >= self._next_job:
            self._next_job = mono + slurm_state.poll_interval(self.slurm.poll())
            end = end or self.slurm.end
        if self._dump.is_set():
            self._dump.clear()
            self._carry_out(self.judge.dump_requested(now=now()))
        if self._stop.is_set() and end is None:
            end = TearDown("stopped", EXIT_FAILED)
            why = f" ({self._stop_why})" if self._stop_why else ""
            self._launcher_line(f"ddptui: stop requested{why}, tearing every rank down")
        if end is not None or all(pr.returncode is not None for pr in self.procs):
            return Over(end)
        return None

    def _proc_exited(self, proc: procs.Spawned, torn_down: bool = False) -> TearDown | None:
        assert proc.returncode is not None, "called once it exited"
        self._check_rank_pids()  # the deaths the watcher saw first, with their times (and a launcher's ranks' codes)
        self._catch_up()
        at = now()
        launcher = proc.spec.stdout_rank is None
        self._carry_out(self.judge.process_exited(proc.spec.name, proc.spec.ranks, proc.pid, proc.returncode,
                                                  proc.exited, launcher, torn_down, now=at))
        if launcher and not torn_down:
            others = any(pr.returncode is None for pr in self.procs if pr is not proc)
            return self._carry_out(self.judge.agent_exited(proc.spec.name, proc.spec.ranks, proc.returncode,
                                                           signals.signal_name(proc.returncode), others, now=at))
        return None

    def _agents(self) -> list[Agent]:
        """The plan's processes still running that start ranks (per-node agents, sbatch, srun): the watchdog's."""
        return [Agent(pr.spec.name, node_of_agent(pr.spec.name), pr.spec.ranks) for pr in self.procs
                if pr.returncode is None and pr.spec.stdout_rank is None]

    # ---- the end -------------------------------------------------------------------------------------
    def _end(self, end: TearDown | None) -> RunResult:
        if any(pr.returncode is None for pr in self.procs):
            td = self._teardown(end.status if end is not None else None)
            self._launcher_line(f"ddptui: teardown took {td['seconds']:.2f} s"
                                + (" (SIGKILL needed)" if td["killed"] else ""))
            for proc in self.procs:
                if proc.returncode is not None and proc.exited:
                    self._proc_exited(proc, torn_down=True)
        tailer = self.tailer
        for rank, stream, lines in tailer.drain():
            at = now()
            self._renumber(tailer, at)
            self.ingest(rank, stream, lines, time.time(), time.monotonic(), at)
            self._flush()  # one chunk at a time: what is left after the ranks exit can be large
        return self._conclude(end)

    def _close(self) -> None:
        if self.procs:  # also when every process we started has exited: their orphans may not have
            self._teardown()

    def _release(self) -> None:
        if self.channel is not None:  # after the summary: a viewer that sees the lock free sees the run's end
            self.channel.close()
        self.feed.close()  # after the channel: no viewer subscribes any more
        if self._subreaper:
            procs.stop_subreaping()
        fr_env.remove(self._sockets)

    def _teardown(self, why: str | None = None) -> dict:
        """Tear every process down (bounded), and say which ones outlived SIGKILL."""
        self.judge.teardown_began(why, now=now())
        extra = self._here(self.judge.rank_pids())
        if self.slurm is not None:
            self.slurm.cancel(self.procs, self._kill_now.is_set)
            extra = set()  # Slurm's ranks are slurmstepd's children, not ours: ended through scancel only
        td = procs.teardown(self.procs, extra, TEARDOWN_DEADLINE, hurry=self._kill_now.is_set)
        who = {pr.pid: pr.spec.name for pr in self.procs}
        who.update({t.pid: f"rank {t.rank}" for t in self.tracks.values() if t.pid})
        for s in td["survivors"]:
            line = procs.describe_survivor(s["pid"], s["state"], who.get(s["pid"]))
            self.survivors.append(line)
            self._launcher_line(f"ddptui: {line}")
        return td

    def _earlier_attempts(self) -> list:
        try:
            earlier = json.loads((self.run_dir / "summary.json").read_text()).get("attempts")
        except (OSError, ValueError, AttributeError):
            return []
        return earlier if isinstance(earlier, list) else []

    # ---- where the ranks' stacks and records are -----------------------------------------------------
    def _stderr_path(self, rank: int) -> str | None:
        learned = self._tailer.learned_file(rank, "err") if self._tailer is not None else None
        if learned:  # c10d: the folder whose hello named this rank, whatever the plan guessed
            return learned
        plan = self.plan
        assert plan is not None, "stacks are taken once the run started"
        for spec in plan.procs:
            if spec.stdout_rank == rank:
                return spec.stderr
        for src in plan.sources:
            if src.rank == rank and src.stream == "err":
                hits = glob.glob(src.path)
                return hits[-1] if hits else None
        # ranks that share a launcher's stderr (XLA thread replicas)
        for spec in plan.procs:
            if rank in spec.ranks:
                return spec.stderr
        return None

    def _fr_sockets(self, targets) -> tuple[dict[int, str], str]:
        return ({t.rank: t.debug_sock for t in targets},
                fr_records.why_no_socket(self.profile.flight_recorder, fr_env.enabled(self.profile)))
