"""The `ddptui` entry point: parses the command line and picks a front end (textual is imported only for the UI)."""
from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

USAGE = """\
ddptui [PROFILE] [options]                 open the dashboard (profile picker without PROFILE)
ddptui PROFILE --no-ui [options]           run headless: rank-prefixed lines, summary, exit code
ddptui PROFILE --dry-run [--set K=V ...]   print the launch plan (argv, env, cwd of every process)
ddptui PROFILE --detach [options]          start the run's engine in the background: prints its record and pid
ddptui [--no-ui] [--set K=V ...] -- CMD... wrap any launch: torchrun ... (per-rank logs), or a rank
                                           program spawned nproc x nnodes times with env:// variables
ddptui replay RUN_DIR [--no-ui]            reopen a finished run from its record
ddptui dump RUN_DIR                        ask the live ddptui of that run to collect stacks now
ddptui attach RUN_DIR [--no-ui | --watch]  watch a live (or finished) ddptui run from its record
ddptui attach (PID | --slurm JOB) [--no-ui | --watch]   watch a job ddptui did not launch (attach --help)
ddptui serve (RUN_DIR | --runs-dir D) [--port P]   a record, or the Runs screen of D, in a browser (serve --help)
ddptui compare RUN_DIR RUN_DIR... [--no-ui] [--json]   runs side by side: pace, step times, samples/s, losses
ddptui export RUN_DIR [--format csv|json] [--out FILE]  its steps per rank (loss, step time, samples/s) and events
ddptui profiles                            list the profiles found (shipped and ./profiles)
ddptui runs [--json] [--status S] [--profile P] [--since 7d]   the run records, newest first
ddptui runs prune (--keep N | --older-than 7d) [--dry-run]     remove old records (never a live run's)"""

EPILOG = """\
exit codes: 0 ok, 1 run failed (a rank failed, timeout, stopped), 2 bad profile or usage,
3 stalled (on_stall: stop), 4 replicas differ (at the end, or diverged live with on_divergence: stop).
replay: 0 the record was read whole, 1 it is incomplete or partly malformed (one line on stderr says what;
what is there is replayed), 2 RUN_DIR is not a run record.
Each run leaves a record in RUNS_DIR/<time>-<profile>/ (summary.json, rank<N>.log, events.jsonl, stacks/).
Headless: SIGUSR1 to ddptui (or `ddptui dump RUN_DIR`) collects stacks of every rank; SIGINT/SIGTERM stop the run
(TERM to every rank, SIGKILL after 5 s; a third SIGINT SIGKILLs at once); ddptui exits at most 30 s after a stop."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ddptui", usage=USAGE, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("profile", nargs="?", help="profile name (profiles/NAME.yaml) or path")
    p.add_argument("--no-ui", action="store_true", help="run headless")
    p.add_argument("--dry-run", action="store_true", help="print the launch plan and exit")
    p.add_argument("--detach", action="store_true",
                   help="run the engine in the background (its own session): print the record and its pid, return")
    p.add_argument("--engine-ready-fd", type=int, default=None, help=argparse.SUPPRESS)  # tui/detach.py's
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a profile field (dotted keys reach into mappings), repeatable")
    p.add_argument("--runs-dir", default=os.environ.get("DDPTUI_RUNS", "runs"), help="where run records go")
    p.add_argument("--record", metavar="RUN_DIR", help="write the run's record into RUN_DIR (the engine a ddptui batch"
                   " job starts: a requeue's next attempt appends to it)")
    p.add_argument("--summary", metavar="FILE", help="also write the machine-readable summary here")
    p.add_argument("--py-spy", dest="pyspy", metavar="PATH", help="py-spy executable to use for stacks")
    p.add_argument("--stacks", choices=("auto", "py-spy", "debug-server", "faulthandler"), default="auto",
                   help="how to collect stacks (auto: py-spy, falling back to torch's debug server in the rank, "
                        "then faulthandler)")
    return p


_VALUED = ("--runs-dir", "--record", "--set", "--summary", "--py-spy", "--stacks", "--engine-ready-fd")


def _first_positional(argv: list[str]) -> int | None:
    i = 0
    while i < len(argv):
        if argv[i] in _VALUED:
            i += 2
        elif argv[i].startswith("-"):
            i += 1
        else:
            return i
    return None


def _fail(msg: str) -> int:
    print(f"ddptui: {msg}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    try:
        rc = _main(list(sys.argv[1:] if argv is None else argv))
        sys.stdout.flush()  # here, not at the interpreter's exit, where a closed pipe would be a traceback
        return rc
    except KeyboardInterrupt:  # Ctrl-C before a run installed its handlers (or in the dashboard's own code)
        print("ddptui: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `ddptui profiles | head`: the reader went; say nothing more (Python's documented way)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # as a shell reports a process ended by SIGPIPE


def _main(argv: list[str]) -> int:
    command: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, command = argv[:i], argv[i + 1:]
        if not command:
            return _fail("nothing after '--': give the launch command to wrap")
    sub = _first_positional(argv)
    if sub is not None and argv[sub] in ("replay", "dump", "profiles"):
        return _subcommand(argv[sub], argv[sub + 1:])
    if sub is not None and argv[sub] == "runs" and not command:  # (`ddptui --runs-dir D runs ...` as well)
        from .runs_cli import main as runs_main
        return runs_main(argv[sub + 1:] + argv[:sub])
    if sub is not None and argv[sub] in ("compare", "export"):
        from . import compare_cli
        return (compare_cli.compare_main if argv[sub] == "compare" else compare_cli.export_main)(argv[sub + 1:])
    if sub is not None and argv[sub] == "attach":  # (`ddptui --runs-dir D attach ...` as well)
        from .attach_cli import main as attach_main
        return attach_main(argv[:sub] + argv[sub + 1:])
    if sub is not None and argv[sub] == "serve":
        from .serve import main as serve_main
        return serve_main(argv[sub + 1:] + argv[:sub])  # (`ddptui --runs-dir D serve` as well)
    args = _parser().parse_args(argv)
    if args.profile and command:
        return _fail("give either a PROFILE or a command after '--', not both")
    from ..runners.launch.profile.errors import ProfileError
    from ..runners.launch.profile.find import find_profile
    from ..runners.launch.profile.load import adhoc_profile, load_profile
    from ..runners.launch.profile.model import Profile
    profile: Profile | None
    path: Path | None
    try:
        if command:
            profile = adhoc_profile(command, args.overrides)
            path = None
        elif args.profile:
            path = find_profile(args.profile)
            profile = load_profile(path, args.overrides)
        else:
            profile = path = None
    except ProfileError as e:
        print(str(e), file=sys.stderr)
        return 2
    if args.dry_run:
        if profile is None:
            return _fail("--dry-run needs a PROFILE or a command after '--'")
        return _dry_run(profile, args.runs_dir)
    from .slurm_submit import is_batch, submit
    if profile is not None and is_batch(profile) and not args.record:
        # the engine runs in the job; this follows its record (or, --detach, returns at once)
        return submit(profile, args.runs_dir, ui=not args.no_ui, detach=args.detach)
    if args.detach and args.engine_ready_fd is None:
        if profile is None:
            return _fail("--detach needs a PROFILE or a command after '--'")
        from .detach import run_detached
        return run_detached(argv, command)
    if args.no_ui:
        if profile is None:
            return _fail("--no-ui needs a PROFILE or a command after '--'")
        return run_headless(profile, args.runs_dir, args.summary, args.pyspy, args.stacks, args.record,
                            args.engine_ready_fd)
    if args.record:
        return _fail("--record is for the headless engine (--no-ui)")
    from .app import run_app
    # the engine a process of its own (tui/held.py), started with this very command line: D leaves it running
    return run_app(path if path is not None else profile, args.overrides, args.runs_dir, (argv, command)) or 0


def _dry_run(profile, runs_dir: str) -> int:
    from ..runners.session import make_plan, rendezvous_port
    run_dir = Path(runs_dir).resolve() / f"<time>-{profile.name}"
    port = rendezvous_port(profile)
    plan = make_plan(profile, run_dir, port, os.getpid())
    print(f"profile: {profile.name} ({profile.source})")
    print(plan.describe())
    return 0


def run_headless(profile, runs_dir: str, summary_path: str | None = None, pyspy: str | None = None,
                 stacks: str = "auto", record_dir: str | None = None, ready_fd: int | None = None) -> int:
    """record_dir: the record's folder, fixed by whoever asked for the run (the engine inside a Slurm batch job);
    ready_fd: a detached engine's (tui/detach.py): its output goes to the record, the record's path to that fd."""
    from ..runners.launch.slurm import in_job_engine
    from ..runners.session import Session
    from . import pidfile
    from .console import Console
    from .stopper import HeadlessStopper
    console = Console()
    ended_by_slurm = None
    if in_job_engine(os.environ):  # scancel from outside SIGTERMs this engine too: the job's end, not a stop
        from ..runners.edge.slurm_job import ended_by_slurm as ended
        job_id = os.environ["SLURM_JOB_ID"]
        ended_by_slurm = lambda: ended(job_id)  # noqa: E731
    stopper = HeadlessStopper(ended_by_scheduler=ended_by_slurm)
    stopper.install()  # before the session exists: a stop that comes early is kept and delivered
    old_usr1 = signal.getsignal(signal.SIGUSR1)
    try:
        session = Session(profile, runs_dir, emit=console.handle, pyspy=pyspy, stack_method=stacks,
                          record_dir=record_dir)
        signal.signal(signal.SIGUSR1, lambda s, f: session.request_dump())
        stopper.attach(session, timeout=profile.timeout)
        pidfile.write(session.run_dir)
        if ready_fd is not None:
            from .detach import engine_ready
            engine_ready(ready_fd, session.run_dir)
        try:
            code = session.run()
        finally:
            stopper.finished()
            pidfile.remove(session.run_dir)
        if summary_path:
            import shutil
            shutil.copyfile(session.run_dir / "summary.json", summary_path)
        return code
    finally:
        stopper.restore()
        signal.signal(signal.SIGUSR1, old_usr1)


def _subcommand(name: str, rest: list[str]) -> int:
    if name == "profiles":
        from ..runners.launch.profile.errors import ProfileError
        from ..runners.launch.profile.find import list_profiles
        from ..runners.launch.profile.load import load_profile
        for path in list_profiles():
            try:
                p = load_profile(path)
                print(f"{p.name:<22} {p.runner:<9} {p.world_size:>3} ranks  {p.description}")
            except ProfileError as e:
                print(f"{path.stem:<22} (invalid) {e}")
        return 0
    parser = argparse.ArgumentParser(prog=f"ddptui {name}")
    parser.add_argument("run_dir")
    if name == "replay":
        parser.add_argument("--no-ui", action="store_true")
    args = parser.parse_args(rest)
    run_dir = Path(args.run_dir)
    if not (run_dir / "events.jsonl").exists():
        return _fail(f"{run_dir}: not a ddptui run record (no events.jsonl)")
    if name == "dump":
        from ..runners.edge import control
        state = control.state_of(run_dir)
        if state.state in ("foreign", "two-engines", "copy"):
            return _fail(state.line)
        if state.state == "live":
            control.ask(run_dir, "dump")
            print(f"asked its engine (pid {state.pid}) to collect stacks; they land in {run_dir / 'stacks'}")
            return 0
        from .pidfile import live_ddptui
        pid, why = live_ddptui(run_dir)  # a stale pid file can name a reused pid: signal only that run's ddptui
        if pid is None:
            return _fail(f"{run_dir}: {why}")
        try:
            os.kill(pid, signal.SIGUSR1)
        except OSError as e:
            return _fail(f"{run_dir}: cannot signal ddptui (pid {pid}): {e.strerror or e}")
        print(f"asked ddptui (pid {pid}) to collect stacks; they land in {run_dir / 'stacks'}")
        return 0
    if args.no_ui:
        return _replay_headless(run_dir)
    from .app import run_replay
    return run_replay(run_dir) or 0


def _replay_headless(run_dir: Path) -> int:
    """Replay what the record holds; 1 (and one line on stderr saying what) when it is incomplete or malformed."""
    from .console import Console
    from .replay import Replay
    console = Console()
    replay = Replay(run_dir, chunk=1)
    for batch in replay.batches():
        try:
            console.handle(batch)
        except Exception as exc:  # noqa: BLE001 - a value the record's check let through: say it, replay on
            replay.problems.append(f"a {batch[0].kind} event could not be shown ({type(exc).__name__}: {exc})")
    if replay.problems:
        print(f"ddptui: replay of {run_dir}: " + "; ".join(replay.problems) + "; replayed what is there",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
