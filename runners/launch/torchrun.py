"""The torchrun runner: one torch.distributed.run agent per (emulated) node, rank output redirected to files."""
from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from ..judge.runner_traits import RunnerTraits
from .plan import LaunchPlan, LogSource, ProcSpec
from .profile.model import Profile, default
from .profile.readers import _Fields
from .rankenv import base_env, workload_target
from .runner import Runner
from .torchrun_argv import launcher_end, max_nodes, max_restarts, node_rank, nproc_per_node, rdzv_backend, script_start

_OUTPUT_FLAGS = ("-r", "--redirects", "-t", "--tee", "--log-dir", "--log_dir")


def launcher_prefix(python: str) -> list[str]:
    return [python, "-m", "torch.distributed.run"]


def rank_sources(log_dir: Path, node: int, nproc: int, learn_rank: bool = False) -> list[LogSource]:
    """torchrun -r 3 writes <log-dir>/<run-id>/attempt_<n>/<local_rank>/{stdout,stderr}.log.

    learn_rank: the agent's node rank is not known before the run (c10d gives them in arrival order), so
    node * nproc + local_rank is a guess that the rank's hello corrects."""
    out = []
    for lr in range(nproc):
        for stream, fname in (("out", "stdout.log"), ("err", "stderr.log")):
            out.append(LogSource(str(log_dir / "*" / "attempt_*" / str(lr) / fname), node * nproc + lr, stream,
                                 learn_rank))
    return out


# measured with torch 2.13 (2 ranks, gloo): StaticTCPRendezvous keeps one store and one key prefix for every round, so
# a restarted rank reads its peers' addresses of the last attempt and fails (or hangs) in gloo's connectFullMesh
STATIC_RESTARTS = ("torchrun's static rendezvous keeps its store across restarts: restarted ranks read the last "
                   "attempt's addresses and fail or hang connecting (torch 2.13); use --standalone or --rdzv-backend c10d")


def restarts_note(n: int) -> str:
    return (f"--max-restarts {n}: torchrun restarts every rank after a failure, up to {n} time(s); ddptui follows each "
            "restart as an attempt of the run")


def _standalone(profile: Profile) -> bool:
    # --standalone binds a port of its own choosing on localhost: only right when the profile chose neither
    return (profile.nnodes == 1 and profile.master_port == default("master_port")
            and profile.master_addr == default("master_addr"))


def rendezvous_args(profile: Profile, node: int, port: int, run_id: str = "ddptui") -> list[str]:
    """torchrun's rendezvous flags for one agent: --standalone, a static rendezvous at master_addr:port (node rank
    fixed by ddptui), or c10d at the endpoint (node ranks in the order the agents arrive)."""
    if profile.rdzv_backend == "c10d":
        host = profile.rendezvous[0]
        endpoint = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        out = ["--nnodes", str(profile.nnodes), "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint,
               "--rdzv-id", profile.rdzv_id or run_id]
    elif _standalone(profile):
        return ["--standalone"]
    else:
        out = ["--nnodes", str(profile.nnodes), "--node-rank", str(node),
               "--master-addr", profile.master_addr, "--master-port", str(port)]
    if profile.local_addr is not None:
        out += ["--local-addr", profile.local_addr]
    return out


def _base_env(profile: Profile, dashboard_pid: int | None, run_dir: Path | None) -> dict[str, str]:
    """rankenv.base_env; a wrapped torchrun command sets its ranks' OMP_NUM_THREADS itself."""
    return base_env(profile, dashboard_pid, run_dir=run_dir, launcher_sets_threads=bool(profile.workload.command))


def plan(profile: Profile, run_dir: Path, port: int, dashboard_pid: int | None = None) -> LaunchPlan:
    if profile.workload.command:
        return _adhoc_plan(profile, run_dir, dashboard_pid)
    env = _base_env(profile, dashboard_pid, run_dir)
    python = profile.workload.python
    procs, sources, notes = [], [], []
    c10d = profile.rdzv_backend == "c10d"
    for node in range(profile.nnodes):
        log_dir = run_dir / "torchrun" / f"node{node}"
        argv = launcher_prefix(python) + rendezvous_args(profile, node, port, run_dir.name)
        argv += ["--nproc-per-node", str(profile.nproc), "--log-dir", str(log_dir), "--redirects", "3"]
        if profile.max_restarts:
            argv += ["--max-restarts", str(profile.max_restarts)]
        argv += workload_target(profile)
        ranks = tuple(range(node * profile.nproc, (node + 1) * profile.nproc))
        name = "torchrun" if profile.nnodes == 1 else f"torchrun-node{node}"
        procs.append(ProcSpec(name, tuple(argv), dict(env), os.getcwd(), ranks,
                              str(run_dir / "raw" / f"{name}.out"), str(run_dir / "raw" / f"{name}.err")))
        sources += rank_sources(log_dir, node, profile.nproc, learn_rank=c10d and profile.nnodes > 1)
    if profile.max_restarts:
        notes.append(restarts_note(profile.max_restarts))
    if c10d:
        host = profile.rendezvous[0]
        notes.append(f"{profile.nnodes} torchrun agent(s) on this machine, c10d rendezvous at {host}:{port}, id "
                     f"{profile.rdzv_id or run_dir.name}: node ranks go in the order the agents arrive, so each"
                     " rank's files are attributed by the rank its hello report names")
    elif profile.nnodes > 1:
        notes.append(f"{profile.nnodes} torchrun agents on this machine, static rendezvous at "
                     f"{profile.master_addr}:{port}; global rank = node_rank * {profile.nproc} + local_rank")
    elif not _standalone(profile) and profile.nnodes == 1:
        notes.append(f"static rendezvous at {profile.master_addr}:{port} (the profile's master_addr/master_port;"
                     " --standalone would pick its own)")
    return LaunchPlan("torchrun", profile.world_size, tuple(procs), tuple(sources), tuple(notes))


def _adhoc_plan(profile: Profile, run_dir: Path, dashboard_pid: int | None) -> LaunchPlan:
    """Wrap a user's own torchrun command line, adding per-rank log files unless it already chose its own.

    With --nnodes N > 1 the command is one node's agent of a job whose other agents run elsewhere (each node runs the
    same line, under its own ddptui): this ddptui sees its agent's ranks only, of a world of N x nproc. Their global
    numbers are the agent's node rank x nproc + local rank: known from a static --node-rank, else (c10d: node ranks in
    arrival order) learned from each rank's hello."""
    assert profile.workload.command is not None  # a wrapped torchrun is a command
    argv = list(profile.workload.command)
    head = launcher_end(argv)
    if head is None:
        raise ValueError(f"the torchrun runner wraps a torchrun command; {argv[0]!r} is not one (runner: env runs it)")
    nproc = nproc_per_node(argv) or profile.nproc
    nodes = max_nodes(argv) or 1
    node = (node_rank(argv) or 0) if rdzv_backend(argv) == "static" else 0
    if node >= nodes:
        node = 0
    here = tuple(range(node * nproc, (node + 1) * nproc))
    notes, sources = [], []
    log_dir = run_dir / "torchrun" / "node0"
    if not any(a.split("=")[0] in _OUTPUT_FLAGS for a in argv[head:]):
        argv[head:head] = ["--log-dir", str(log_dir), "--redirects", "3"]
        sources = rank_sources(log_dir, node, nproc, learn_rank=nodes > 1)
        notes.append("added --log-dir/--redirects 3 so every rank's output is read from its own file")
    else:
        notes.append("the command chose its own output flags: ranks are attributed by torchrun's "
                     "[rankN]:/[defaultN]: prefixes where present")
    if max_restarts(argv):
        notes.append(restarts_note(max_restarts(argv)))
        if rdzv_backend(argv) == "static" and "--standalone" not in argv[head:script_start(argv)]:
            notes.append(STATIC_RESTARTS)
    if nodes > 1:
        notes.append(f"--nnodes {nodes}: this is one node's agent of a {nodes * nproc}-rank job; ddptui sees its "
                     f"{nproc} rank(s) here, numbered by what each rank's hello says, and names the others unseen "
                     "(each node's ddptui watches its own)")
    env = _base_env(profile, dashboard_pid, run_dir)
    proc = ProcSpec("torchrun", tuple(argv), env, os.getcwd(), here,
                    str(run_dir / "raw" / "torchrun.out"), str(run_dir / "raw" / "torchrun.err"))
    return LaunchPlan("torchrun", nodes * nproc, (proc,), tuple(sources), tuple(notes),
                      ranks_here=here if nodes > 1 else None)


class TorchrunRunner(Runner):
    name = "torchrun"

    def base_env(self, profile: Profile, dashboard_pid: int | None = None) -> dict[str, str]:
        return _base_env(profile, dashboard_pid, None)

    def wraps(self, command: Sequence[str]) -> tuple[int, int] | None:
        if launcher_end(command) is None:
            return None
        return nproc_per_node(command) or 1, max_nodes(command) or 1

    def traits(self, profile: Profile) -> RunnerTraits:
        """Its restarts: the profile's max_restarts, or a wrapped command's own --max-restarts."""
        cmd = profile.workload.command
        return RunnerTraits(max_restarts=max_restarts(cmd) if cmd else profile.max_restarts)

    def rendezvous_problem(self, field: str, wrapped_command: bool) -> str | None:
        if wrapped_command:
            return (f"the wrapped torchrun command chooses its own rendezvous: give it --master-addr/--master-port or"
                    f" --rdzv-endpoint instead of {field}")
        return None

    def rdzv_problem(self, field: str, wrapped_command: bool, backend: str) -> str | None:
        if wrapped_command:
            return f"the wrapped torchrun command chooses its own rendezvous: give it --{field.replace('_', '-')}"
        if backend == "static" and field in ("rdzv_endpoint", "rdzv_id"):
            return f"{field} is for rdzv_backend: c10d; the static rendezvous meets at master_addr:master_port"
        return None

    def check(self, f: _Fields, profile: Profile) -> Profile:
        """A `command` workload runs as the runner that can run it: the torchrun runner only wraps a torchrun command
        line. Without a `runner:` the command says which (as for `ddptui -- CMD`); a `runner: torchrun` it cannot wrap
        is an error here, where the file and line are known, not a traceback when the run is planned."""
        cmd = profile.workload.command
        restarts = f.node("max_restarts")
        if restarts is not None and profile.max_restarts and not cmd and profile.rdzv_backend == "static" \
                and not _standalone(profile):
            raise restarts.loc.error("max_restarts", STATIC_RESTARTS.replace("--standalone or --rdzv-backend c10d",
                                                                             "rdzv_backend: c10d"))
        if cmd and launcher_end(cmd) is not None and restarts is not None and profile.max_restarts:
            raise restarts.loc.error("max_restarts", "the wrapped torchrun command chooses its own restarts: give it "
                                                     "--max-restarts instead")
        if not cmd or launcher_end(cmd) is not None:
            return profile
        node = f.node("runner")
        if node is None:
            return replace(profile, runner="env")
        raise node.loc.error("runner", f"the torchrun runner wraps a torchrun command line and workload.command starts "
                                       f"with {cmd[0]!r}; use runner: env to run the command as each rank, or "
                                       "workload.script/module for torchrun to start")

    def plan(self, profile: Profile, run_dir: Path, port: int, dashboard_pid: int | None = None) -> LaunchPlan:
        return plan(profile, run_dir, port, dashboard_pid)
