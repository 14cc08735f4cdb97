"""`ddptui attach RUN_DIR | PID | --slurm JOB [--no-ui | --watch]`: a ddptui run's record followed (tui/follow.py), or
a job ddptui did not launch found, then watched headless or in the dashboard."""
from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

from .attach_words import attach_command

USAGE = ("ddptui attach (RUN_DIR | PID | --slurm JOB) [--no-ui | --watch] [--stall-after S] [--stack-every S] "
         "[--runs-dir DIR]")
DESCRIPTION = """\
A RUN_DIR (a ddptui run's record, live or finished): follow it as its engine writes it, with everything the
dashboard that launched it shows; d and s reach the engine through its control channel (RUN_DIR/control.sock);
leaving never stops the run. Headless (--no-ui or --watch, the same): the console's lines until the run ends or
Ctrl-C (SIGUSR1: stacks now); exit: the run's code, 1 when its engine died before the end.

Otherwise watch a PyTorch job ddptui did not launch: a torchrun agent's pid, a rank's pid or any process of the job, or a
Slurm job. Its ranks are found from the process tree, their output files followed, their CPU and RSS sampled and
their stacks read with py-spy; the same stall, hang and crash verdicts and run record (RUNS_DIR/<time>-attach-<id>/)
as a launched run. ddptui never signals the job: Ctrl-C detaches; only the dashboard's s stops it, after asking,
through its own launcher (SIGTERM to torchrun's agent, scancel)."""
EPILOG = """\
exit codes: 0 detached (every rank showed progress), undecided (neither progress nor a stall shown by the bound)
or the job ended well, 1 the job failed while attached, 2 not a job or several (one line says why) or bad usage,
3 stalled (the verdict names the culprit)."""
STALL_AFTER = 30.0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ddptui attach", usage=USAGE, description=DESCRIPTION, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("pid", nargs="?", help="a ddptui run's record (RUN_DIR), or any process of a job ddptui did not "
                                          "launch (the torchrun agent, a rank, ...)")
    p.add_argument("--slurm", metavar="JOB", help="a Slurm job id: every step and node of it")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--no-ui", action="store_true",
                      help="headless: 3 s of output, CPU and stacks, longer (bounded, said) while a rank shows no "
                           "progress; the stacks of every rank, the verdict, detach")
    mode.add_argument("--watch", action="store_true",
                      help="headless and stay: liveness, CPU, RSS, stalls and verdicts until the job ends or Ctrl-C")
    p.add_argument("--stall-after", type=float, default=STALL_AFTER, metavar="S",
                   help=f"a rank quiet this long (no output, low CPU, the same frame) is stalled (default {STALL_AFTER:g})")
    p.add_argument("--stack-every", type=float, default=None, metavar="S",
                   help="seconds between py-spy samples of every rank while watching (default 5)")
    p.add_argument("--runs-dir", default=os.environ.get("DDPTUI_RUNS", "runs"), help="where run records go")
    p.add_argument("--py-spy", dest="pyspy", metavar="PATH", help="py-spy executable to use for stacks")
    return p


def _fail(msg: str) -> int:
    print(f"ddptui: {msg}", file=sys.stderr)
    return 2


def find(args) -> object:
    """The AttachedJob asked for; raises NotAJob (its text is the one line) or ValueError (usage)."""
    from ..runners.attach.find import find_job, find_slurm_job
    if args.slurm:
        return find_slurm_job(args.slurm)
    return find_job(parse_pid(args.pid))


PID_MAX_LIMIT = 4194304  # the kernel's ceiling of /proc/sys/kernel/pid_max (2^22)


def parse_pid(text: str, pid_max: int | None = None) -> int:
    """A pid as given on the command line: decimal digits, 1 to below this kernel's pid_max (where its pids wrap);
    else ValueError (one line)."""
    if pid_max is None:
        try:
            with open("/proc/sys/kernel/pid_max") as f:
                pid_max = int(f.read())
        except (OSError, ValueError):
            pid_max = PID_MAX_LIMIT
    t = text.strip()
    if not (t.isascii() and t.isdigit()):
        raise ValueError(f"attach: {text!r} is not a pid")
    if len(t) > len(str(pid_max)) or not 0 < int(t) < pid_max:
        raise ValueError(f"attach: {text!r} is not a pid (pids here are 1 to {pid_max - 1})")
    return int(t)


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    if bool(args.pid) == bool(args.slurm):
        return _fail("attach: give a PID or --slurm JOB (one of them)")
    if args.pid and not args.slurm and not args.pid.strip().isdigit():  # a record, not a pid
        if not Path(args.pid).is_dir():
            return _fail(f"attach: {args.pid!r} is not a pid, nor a run record's folder")
        return follow(Path(args.pid), args.no_ui or args.watch)
    if args.stall_after <= 0 or (args.stack_every is not None and args.stack_every <= 0):
        return _fail("attach: --stall-after and --stack-every take seconds above 0")
    if args.slurm and args.slurm.strip().isdigit():
        from ..runners.edge.slurm_job import record_of
        record, _ = record_of(args.slurm.strip())
        if record is not None:  # ddptui submitted it: its engine in the job judges it; follow that engine
            from .slurm_follow import follow as follow_job
            print(f"ddptui: job {args.slurm.strip()} was submitted by ddptui: its engine runs in the job and writes"
                  f" {record}; following it (Ctrl-C detaches)", flush=True)
            return follow_job(args.slurm.strip(), Path(record), stops=False, ui=not (args.no_ui or args.watch))
    from ..runners.attach.find import NotAJob
    try:
        job = find(args)
    except NotAJob as e:
        return _fail(str(e))
    except ValueError as e:
        return _fail(str(e))
    from ..runners.attach.liveness import STACK_EVERY
    every = args.stack_every or STACK_EVERY
    if not (args.no_ui or args.watch):
        from .app import run_attach
        return run_attach(job, args.runs_dir, args.stall_after, every, args.pyspy) or 0
    return headless(job, args.runs_dir, args.watch, args.stall_after, every, args.pyspy)


def headless(job, runs_dir: str, watch: bool, stall_after: float, stack_every: float, pyspy: str | None) -> int:
    """Console output as a launched run's; SIGINT/SIGTERM/SIGHUP detach (never stop the job), SIGUSR1 takes stacks
    now."""
    from ..runners.attach.session import AttachSession
    from .console import Console
    console = Console()
    session = AttachSession(job, runs_dir, emit=console.handle, watch=watch, stall_after=stall_after,
                            stack_every=stack_every, pyspy=pyspy)
    from . import hangup
    terminals = hangup.terminals()
    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1)}
    signal.signal(signal.SIGINT, lambda s, f: session.request_stop())
    signal.signal(signal.SIGTERM, lambda s, f: session.request_stop())
    def closed_terminal(s, f) -> None:
        hangup.detach(terminals)
        session.request_stop()
    signal.signal(signal.SIGHUP, closed_terminal)
    signal.signal(signal.SIGUSR1, lambda s, f: session.request_dump())
    try:
        return session.run()
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def follow(run_dir: Path, headless: bool) -> int:
    """A ddptui run's record: one clear line and 2 when it is no record, another user's, or its engine died or is
    not alone (nothing asked or signalled); else followed until it ends or the viewer leaves."""
    from ..runners.edge import control
    state = control.state_of(run_dir)
    if not (state.usable or (state.state == "dead" and not headless)):
        more = {"dead": "; `ddptui replay` shows what it holds",
                "elsewhere": "; a batch job's record is followed through Slurm: `ddptui attach --slurm JOB`"}
        return _fail(f"attach: {state.line}{more.get(state.state, '')}")
    from .follow import FollowSource
    source = FollowSource(run_dir)
    if not headless:
        from .app import run_follow
        return run_follow(source)
    from . import hangup
    from .console import Console
    console = Console()
    source.prepare(console.handle)
    terminals = hangup.terminals()
    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1)}

    def leave(s, f) -> None:
        if s == signal.SIGHUP:
            hangup.detach(terminals)
        source.request_stop()
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, leave)
    signal.signal(signal.SIGUSR1, lambda s, f: source.request_dump())
    try:
        code = source.run()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    if source.left:
        print(f"ddptui: left the run; it goes on ({attach_command(run_dir)} to watch it again)", file=sys.stderr)
    elif source.died:
        print(f"ddptui: attach: {source.died}", file=sys.stderr)
    return code
