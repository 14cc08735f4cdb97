"""The mirage runner: `mirage run` emulates AMD GPUs (ROCm rocjitsu) around torchrun or around the rank script itself."""
from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path

from ..judge.runner_traits import RunnerTraits
from .plan import LaunchPlan, ProcSpec
from .profile.errors import _Loc
from .profile.model import MIRAGE_INNER, MIRAGE_KEYS, MirageOptions, Profile
from .profile.readers import _argv, _bool, _enum, _env_map, _Fields, _int, _path_value, _str
from .profile.tree import _Node
from .rankenv import base_env, workload_target
from .runner import Runner
from .torchrun import launcher_prefix, rank_sources


def venv_of(profile: Profile) -> str | None:
    """The document's VENV: the venv the rank interpreter lives in (workload.venv resolves to its bin/python)."""
    python = Path(profile.workload.python)
    if python.parent.name == "bin" and (python.parent.parent / "pyvenv.cfg").is_file():
        return str(python.parent.parent)
    return None


def interpreter(profile: Profile) -> str:
    """The rank interpreter, spelled `$VENV/bin/python3` as in the document when the venv has one."""
    python = profile.workload.python
    venv = venv_of(profile)
    if venv and (os.path.basename(python) == "python" or not os.path.isabs(python)):
        py3 = Path(venv) / "bin" / "python3"
        if os.access(py3, os.X_OK):
            return str(py3)
    return python


def torchrun_command(profile: Profile) -> list[str]:
    """`$VENV/bin/torchrun` as in the document, else the interpreter's sibling, else `python -m torch.distributed.run`."""
    python = profile.workload.python
    venv = venv_of(profile)
    found = python if os.sep in python else shutil.which(python)
    for folder in ([Path(venv) / "bin"] if venv else []) + ([Path(found).parent] if found else []):
        exe = folder / "torchrun"  # not resolved: a venv's python is a symlink out of the venv
        if os.access(exe, os.X_OK):
            return [str(exe)]
    return launcher_prefix(python)


def mirage_argv(opts: MirageOptions, nproc_per_node: int | None = None) -> list[str]:
    """Everything up to and including mirage's `--`, flags in the document's order."""
    argv = [*opts.command, "run", "--profile", opts.profile]
    if opts.num_nodes > 1:
        argv += ["--num-nodes", str(opts.num_nodes)]
    argv += ["--gpus-per-node", str(opts.gpus_per_node)]
    if nproc_per_node and nproc_per_node > 1:
        argv += ["--nproc-per-node", str(nproc_per_node)]
    for k, v in opts.env.items():
        argv += ["--env", f"{k}={v}"]
    if opts.in_process:
        argv.append("--in-process")
    return argv + ["--"]


def _torchrun_inner(profile: Profile, opts: MirageOptions, log_root: Path) -> tuple[list[str], list, list[str]]:
    nproc, nodes = profile.nproc, opts.num_nodes
    torchrun = torchrun_command(profile)
    target = workload_target(profile)
    if nodes == 1:
        log_dir = log_root / "node0"
        inner = [*torchrun, "--standalone", f"--nproc_per_node={nproc}", "--log-dir", str(log_dir), "-r", "3", *target]
        return inner, rank_sources(log_dir, 0, nproc), []
    # mirage execs its command without a shell, so "$MASTER_ADDR:$MASTER_PORT" (which it picks and exports per
    # node) and the node index ($RANK: one agent per node) only exist once a shell expands them.
    script = " ".join([
        "exec", shlex.join(torchrun), "--nnodes", str(nodes), '--node-rank "$RANK"',
        '--rdzv-endpoint "$MASTER_ADDR:$MASTER_PORT"', f"--nproc_per_node={nproc}",
        "--log-dir", shlex.quote(str(log_root)) + '/node"$RANK"', "-r", "3", shlex.join(target),
    ])
    sources = []
    for node in range(nodes):
        sources += rank_sources(log_root / f"node{node}", node, nproc)
    notes = [f"{nodes} torchrun agents, one per emulated node; /bin/sh expands $RANK (the node) and "
             "$MASTER_ADDR:$MASTER_PORT (mirage's head) for --node-rank and --rdzv-endpoint (static rendezvous)"]
    return ["/bin/sh", "-c", script], sources, notes


def plan(profile: Profile, run_dir: Path, port: int, dashboard_pid: int | None = None) -> LaunchPlan:
    opts = profile.mirage
    run_dir = Path(run_dir)
    nproc = profile.nproc
    world = opts.num_nodes * nproc
    notes = [f"mirage picks the rendezvous itself and exports MASTER_ADDR/MASTER_PORT (= MIRAGE_HEAD_ADDR/PORT) "
             f"on every node; ddptui's port {port} is not used",
             "profile env and DDP_* knobs reach the ranks through mirage's inherited environment; "
             "mirage.env is passed as --env"]
    sources: list = []
    stdout_rank = None
    nproc_flag = None
    if profile.workload.command:
        inner = list(profile.workload.command)
        notes.append("inner command taken verbatim from workload.command")
    elif opts.inner == "torchrun":
        inner, sources, more = _torchrun_inner(profile, opts, run_dir / "torchrun")
        notes += more
    else:
        inner = [interpreter(profile), *workload_target(profile)]
        nproc_flag = nproc
        if world == 1:
            stdout_rank = 0  # one process: mirage hands it its own stdout, unlabelled
        else:
            notes.append(f"no launcher: mirage runs the rank program {world} times and labels each line "
                         "of their output `[RANK] ` on its own stdout/stderr")
        if nproc > 1:
            notes.append(f"--nproc-per-node {nproc}: needs a mirage that has the flag (upstream ctl does)")
    if opts.num_nodes != profile.nnodes:
        notes.append(f"mirage.num_nodes={opts.num_nodes} overrides nnodes={profile.nnodes}")

    env = base_env(profile, dashboard_pid, run_dir=run_dir)
    venv = venv_of(profile)
    if venv:
        # As `source $VENV/bin/activate`: mirage finds rocjitsu through `rocm-sdk path --root` on PATH.
        bindir = str(Path(venv) / "bin")
        env["VIRTUAL_ENV"] = str(venv)
        env["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    argv = mirage_argv(opts, nproc_flag) + inner
    raw = run_dir / "raw"
    proc = ProcSpec("mirage", tuple(argv), env, opts.workspace, tuple(range(world)),
                    str(raw / "mirage.out"), str(raw / "mirage.err"), stdout_rank=stdout_rank)
    return LaunchPlan("mirage", world, (proc,), tuple(sources), tuple(notes))


def _mirage(node: _Node | None, where: _Loc, base: Path, nproc: int, nnodes: int) -> MirageOptions:
    f = _Fields(node, "mirage", MIRAGE_KEYS, where, MirageOptions)
    ws = f.node("workspace")
    workspace = str(_path_value(ws, "mirage.workspace", base)) if ws is not None else str(base)
    return MirageOptions(
        command=f.typed("command", _argv(nonempty=True)),
        workspace=workspace,
        profile=f.typed("profile", _str()),
        gpus_per_node=f.get("gpus_per_node", nproc, _int(1)),
        num_nodes=f.get("num_nodes", nnodes, _int(1)),
        in_process=f.typed("in_process", _bool),
        env=f.typed("env", _env_map),
        inner=f.typed("inner", _enum(MIRAGE_INNER)),
        require_rocm=f.typed("require_rocm", _bool),
    )


class MirageRunner(Runner):
    name = "mirage"
    section = "mirage"
    emulated = True

    def read_section(self, node: _Node | None, where: _Loc, base: Path, nproc: int, nnodes: int) -> MirageOptions:
        return _mirage(node, where, base, nproc, nnodes)

    def rendezvous_problem(self, field: str, wrapped_command: bool) -> str | None:
        return f"mirage picks the rendezvous itself (it exports MASTER_ADDR/MASTER_PORT to the ranks); remove {field}"

    def traits(self, profile: Profile) -> RunnerTraits:
        return RunnerTraits(in_process=profile.mirage.in_process,
                            stall_hint=("mirage-multigpu-hang", "stall under mirage with several GPUs"))

    def plan(self, profile: Profile, run_dir: Path, port: int, dashboard_pid: int | None = None) -> LaunchPlan:
        return plan(profile, run_dir, port, dashboard_pid)
