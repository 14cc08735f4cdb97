"""Find the ranks of a PyTorch job ddptui did not launch, from any of its processes or a Slurm job id."""
from __future__ import annotations

import json
import os
import socket
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field

import psutil

from . import probe as attach_probe
from .output import RankOutput


@dataclass(frozen=True)
class AttachedRank:
    rank: int
    local_rank: int | None
    world_size: int | None
    pid: int
    host: str
    node: str
    stdout: RankOutput
    stderr: RankOutput


@dataclass(frozen=True)
class Unreadable:
    pid: int
    reason: str  # a process of the job ddptui cannot read, and why


@dataclass(frozen=True)
class AttachedJob:
    asked: str  # the pid or Slurm job id the user gave
    kind: str  # "torchrun" | "spawn" | "env" | "slurm"
    launcher_pid: int | None  # torchrun's agent: SIGTERM to it stops the job
    launcher_argv: tuple[str, ...]
    ranks: dict[int, AttachedRank] = field(default_factory=dict)
    unreadable: tuple[Unreadable, ...] = ()
    slurm_job: str | None = None
    world_size: int | None = None
    notes: tuple[str, ...] = ()  # what is uncertain about the ranks found, in words (e.g. spawn ranks by start order)


class NotAJob(Exception):
    """str(e) is the one line the CLI prints (exit 2)."""


# ---- the snapshot and the decisions over it (pure) ---------------------------------------------------------------

@dataclass(frozen=True)
class Proc:
    """One process as read: environ None when it could not be read, `error` then says why."""

    pid: int
    ppid: int
    cmdline: tuple[str, ...]
    environ: Mapping[str, str] | None
    create_time: float
    error: str = ""
    torch: bool = False  # libtorch is mapped (read only for multiprocessing spawn children)


JOB_KEYS = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID")
_SHELLS = {"sh", "bash", "dash", "zsh", "ksh", "fish", "env", "nohup", "setsid", "stdbuf", "timeout", "numactl",
           "taskset", "srun"}


def name_of(p: Proc) -> str:
    return os.path.basename(p.cmdline[0]) if p.cmdline else "?"


def is_torchrun(cmdline: tuple[str, ...]) -> bool:
    """torchrun's agent: `torchrun ...`, `python .../torchrun ...`, `python -m torch.distributed.run|launch ...`."""
    head = cmdline[:4]
    for i, a in enumerate(head):
        if a == "-m" and i + 1 < len(cmdline) and cmdline[i + 1] in ("torch.distributed.run",
                                                                     "torch.distributed.launch"):
            return True
    return any(os.path.basename(a) == "torchrun" for a in cmdline[:2])


def is_spawn_child(cmdline: tuple[str, ...]) -> bool:
    """A multiprocessing 'spawn' child (`python -c 'from multiprocessing.spawn import spawn_main; ...'
    --multiprocessing-fork`); a forked DataLoader worker of one keeps the same command line."""
    return "--multiprocessing-fork" in cmdline and any("spawn_main" in a for a in cmdline)


def _int(env: Mapping[str, str] | None, key: str) -> int | None:
    try:
        return int((env or {}).get(key, ""))
    except ValueError:
        return None


def has_rank(p: Proc) -> bool:
    return p.environ is not None and _int(p.environ, "RANK") is not None


def _children(snap: Mapping[int, Proc]) -> dict[int, list[Proc]]:
    kids: dict[int, list[Proc]] = {}
    for p in snap.values():
        if p.ppid != p.pid:
            kids.setdefault(p.ppid, []).append(p)
    for v in kids.values():
        v.sort(key=lambda p: (p.create_time, p.pid))
    return kids


def _chain(snap: Mapping[int, Proc], pid: int) -> list[Proc]:
    out, seen = [], set()
    while pid in snap and pid not in seen:
        seen.add(pid)
        out.append(snap[pid])
        pid = snap[pid].ppid
    return out


def _subtree(kids: Mapping[int, list[Proc]], pid: int) -> list[Proc]:
    """Descendants of `pid`, breadth first (nearest first)."""
    out, todo = [], list(kids.get(pid, []))
    while todo:
        p = todo.pop(0)
        out.append(p)
        todo += kids.get(p.pid, [])
    return out


def spawn_ranks(kids: Mapping[int, list[Proc]], p: Proc) -> list[Proc]:
    """The children of `p` that torch.multiprocessing.spawn started: spawn children with torch loaded (its
    resource_tracker child is no spawn child), in the order they were started."""
    return [c for c in kids.get(p.pid, []) if is_spawn_child(c.cmdline) and c.torch]


def _spawn_parent(snap: Mapping[int, Proc], kids: Mapping[int, list[Proc]], p: Proc) -> bool:
    # a rank that starts spawn DataLoader workers is no spawn parent: it has RANK itself (torchrun, srun)
    return not is_spawn_child(p.cmdline) and not has_rank(p) and bool(spawn_ranks(kids, p))


@dataclass(frozen=True)
class Located:
    """What the snapshot says about the job around a pid: its kind, its root (the launcher), the rank processes
    (pid -> (rank, local rank, world size)) and what could not be read."""

    kind: str
    root: int
    ranks: dict[int, tuple[int, int | None, int | None]]
    unreadable: tuple[Unreadable, ...]


def locate(snap: Mapping[int, Proc], pid: int) -> Located:
    """The job `pid` belongs to, from a snapshot of every process; NotAJob when there is none, or when it has no rank
    running (a launcher whose ranks have ended, or not started yet): there is nothing to watch."""
    found = _locate(snap, pid)
    if not found.ranks and not found.unreadable:
        root = snap.get(found.root)
        who = f"{found.kind} job of pid {found.root} ({name_of(root)})" if root is not None else f"{found.kind} job"
        raise NotAJob(f"the {who} has no rank running: its ranks have ended, or have not started yet")
    return found


def _locate(snap: Mapping[int, Proc], pid: int) -> Located:
    if pid not in snap:
        raise NotAJob(f"no process {pid}")
    kids = _children(snap)
    chain = _chain(snap, pid)
    for p in chain:
        if is_torchrun(p.cmdline):
            return _env_job(snap, kids, "torchrun", p.pid, chain[0])
    top = None
    for p in chain:  # the topmost of the consecutive RANK holders from pid up (a DataLoader worker's rank, ...)
        if has_rank(p):
            top = p
        elif top is not None:
            break
    if top is not None:
        parent = snap.get(top.ppid)
        if is_spawn_child(top.cmdline) and parent is not None and spawn_ranks(kids, parent):
            return _spawn_job(kids, parent)  # a spawn parent that put RANK in its os.environ before spawn
        return _env_job(snap, kids, "env", top.ppid, top)
    up = chain[0]
    for p in chain:  # a spawn child (or its worker): up to the first process that is no spawn child
        up = p
        if not is_spawn_child(p.cmdline):
            break
    if _spawn_parent(snap, kids, up):
        return _spawn_job(kids, up)
    below = jobs_below(snap, kids, pid)  # pid is above the job: a shell, tmux, the user's launcher
    if len(below) == 1:
        kind, q = below[0]
        if kind == "torchrun":
            return _env_job(snap, kids, "torchrun", q.pid, None)
        if kind == "spawn":
            return _spawn_job(kids, q)
        return _env_job(snap, kids, "env", q.ppid, q)
    me = snap[pid]
    if below:
        raise NotAJob(f"pid {pid} ({name_of(me)}) is above {len(below)} PyTorch jobs, not one; attach to one of "
                      "them by its pid:\n" + "\n".join(f"  {describe(snap, kids, k, q)}" for k, q in below))
    if me.environ is None and me.error.startswith("a zombie"):
        raise NotAJob(f"pid {pid} has exited ({me.error})")
    if me.environ is None:
        raise NotAJob(f"pid {pid} ({name_of(me)}) cannot be read: {me.error}")
    raise NotAJob(f"pid {pid} ({name_of(me)}) is not part of a PyTorch job: no process in its tree has "
                  "RANK/WORLD_SIZE in its environment")


def jobs_below(snap: Mapping[int, Proc], kids: Mapping[int, list[Proc]], pid: int) -> list[tuple[str, Proc]]:
    """Every job below `pid`, nearest first, as (kind, the process it was seen by): a torchrun agent, a spawn parent,
    or the first rank of a group of env:// ranks (one group per MASTER_ADDR/PORT, WORLD_SIZE, run id); nothing below
    a job's own process is looked at again (its ranks, their workers and helpers)."""
    found: list[tuple[str, Proc]] = []
    keys: set[tuple] = set()
    todo = list(kids.get(pid, []))
    while todo:
        q = todo.pop(0)
        if is_torchrun(q.cmdline):
            found.append(("torchrun", q))
        elif _spawn_parent(snap, kids, q):
            found.append(("spawn", q))
        elif has_rank(q):
            if _job_key(q) not in keys:
                keys.add(_job_key(q))
                found.append(("env", q))
        else:
            todo += kids.get(q.pid, [])
    return found


def describe(snap: Mapping[int, Proc], kids: Mapping[int, list[Proc]], kind: str, q: Proc) -> str:
    """One job in a line: its launcher's pid and command (the ranks' for env:// ranks, which have none)."""
    def cmd(p: Proc) -> str:  # the interpreter and launcher by their names: the options are what tell jobs apart
        args = [os.path.basename(a) if i < 2 and a.startswith("/") else a for i, a in enumerate(p.cmdline)]
        text = " ".join(args) or name_of(p)
        return text if len(text) <= 200 else text[:197] + "..."
    if kind == "env":
        pids = sorted(pr for pr in _env_job(snap, kids, "env", q.ppid, q).ranks)
        env = q.environ or {}
        at = f"{env.get('MASTER_ADDR', '?')}:{env.get('MASTER_PORT', '?')}"
        return f"env:// ranks (pids {', '.join(map(str, pids))}, rendezvous {at}): {cmd(q)}"
    n = len(_spawn_job(kids, q).ranks) if kind == "spawn" else len(_env_job(snap, kids, "torchrun", q.pid, None).ranks)
    what = "torchrun agent" if kind == "torchrun" else "torch.multiprocessing.spawn parent"
    return f"{what} pid {q.pid} ({n} rank{'s' if n != 1 else ''} found): {cmd(q)}"


def _job_key(p: Proc) -> tuple:
    return tuple((p.environ or {}).get(k) for k in JOB_KEYS)


def _is_wrapper(p: Proc) -> bool:
    return name_of(p) in _SHELLS


def _env_job(snap: Mapping[int, Proc], kids: Mapping[int, list[Proc]], kind: str, root: int,
             seen_rank: Proc | None) -> Located:
    """Ranks below `root` by their RANK variable. A RANK holder whose parent holds the same RANK is a DataLoader
    worker or a helper of that rank, not a rank (but a shell wrapper hands the rank on to its one child that holds
    it). Under an env launcher, only the ranks of the job the seen rank is in (its MASTER_ADDR/PORT, WORLD_SIZE...):
    orphaned ranks have pid 1 as parent, with everything else."""
    below = _subtree(kids, root) if root in snap or kids.get(root) else []
    key = _job_key(seen_rank) if kind == "env" and seen_rank is not None else None
    ranks: dict[int, tuple[int, int | None, int | None]] = {}
    unread: list[Unreadable] = []
    by_rank: dict[int, int] = {}
    for p in below:
        if p.environ is None:
            if kind == "torchrun" or snap.get(p.ppid) is not None and p.ppid == root and root != 1:
                unread.append(Unreadable(p.pid, p.error))
            continue
        r = _int(p.environ, "RANK")
        if r is None or (key is not None and _job_key(p) != key):
            continue
        parent = snap.get(p.ppid)
        if parent is not None and has_rank(parent) and _int(parent.environ, "RANK") == r:
            if by_rank.get(r) == parent.pid and _is_wrapper(parent):
                del ranks[parent.pid]  # the wrapper's child is the rank's program
            else:
                continue
        if r in by_rank and by_rank[r] in ranks and by_rank[r] != p.ppid:
            continue  # the same rank twice (a restart's leftover): the first started keeps it
        by_rank[r] = p.pid
        ranks[p.pid] = (r, _int(p.environ, "LOCAL_RANK"), _int(p.environ, "WORLD_SIZE"))
    return Located(kind, root, ranks, tuple(unread))


def _spawn_job(kids: Mapping[int, list[Proc]], parent: Proc) -> Located:
    """torch.multiprocessing.spawn passes each child its rank as an argument, not in the environment: the rank here
    is the start order (spawn starts them one by one, rank 0 first); `spawn_index` later reads the real one."""
    ranks = spawn_ranks(kids, parent)
    unread = tuple(Unreadable(c.pid, c.error) for c in kids.get(parent.pid, []) if c.environ is None)
    n = len(ranks)
    return Located("spawn", parent.pid, {c.pid: (i, i, n) for i, c in enumerate(ranks)}, unread)


# ---- torch.multiprocessing.spawn's own numbers, from the processes' stacks (pure) --------------------------------

SPAWN_FILE = "torch/multiprocessing/spawn.py"


def _frames_locals(dump: list) -> list[tuple[str, str, dict]]:
    out = []
    for thread in dump or []:
        for f in thread.get("frames") or []:
            out.append((f.get("name", ""), f.get("filename", ""),
                        {v.get("name"): v.get("repr") for v in f.get("locals") or [] if isinstance(v, dict)}))
    return out


def spawn_index(dump: list) -> int | None:
    """The rank torch's `_wrap(fn, i, args, error_file)` got, from `py-spy dump --locals --json` of a spawn child."""
    for name, file, loc in _frames_locals(dump):
        if name == "_wrap" and file.endswith(SPAWN_FILE):
            try:
                return int(loc.get("i", ""))
            except (TypeError, ValueError):
                return None
    return None


def spawn_nprocs(dump: list) -> int | None:
    """`nprocs` of torch's spawn/start_processes, from `py-spy dump --locals --json` of the spawn parent."""
    for name, file, loc in _frames_locals(dump):
        if name in ("start_processes", "spawn") and file.endswith(SPAWN_FILE):
            try:
                return int(loc.get("nprocs", ""))
            except (TypeError, ValueError):
                continue
    return None


def spawn_numbers(located: Located, indices: Mapping[int, int | None], nprocs: int | None
                  ) -> tuple[dict[int, tuple[int, int | None, int | None]], tuple[str, ...]]:
    """The spawn ranks renumbered by what their stacks said (`indices`: pid -> i), the start order where they said
    nothing; the notes say which ranks rest on the start order."""
    guessed = [pid for pid in located.ranks if indices.get(pid) is None]
    ranks: dict[int, tuple[int, int | None, int | None]] = {}
    for pid, (r, _lr, n) in located.ranks.items():
        i = indices.get(pid)
        world = nprocs if nprocs is not None else n
        ranks[pid] = (i, i, world) if i is not None else (r, r, world)
    notes: tuple[str, ...] = ()
    if guessed:
        notes = (f"spawn children {', '.join(map(str, guessed))} are numbered by start order (torch.multiprocessing."
                 "spawn starts rank 0 first): py-spy could not read their rank from their stacks",)
    return ranks, notes


# ---- I/O: the snapshot here, py-spy for spawn ranks, the outputs --------------------------------------------------

def _read(p: psutil.Process) -> Proc | None:
    try:
        ppid, ctime = p.ppid(), p.create_time()
    except psutil.ZombieProcess:
        return None  # not even its parent is known any more
    except psutil.NoSuchProcess:
        return None
    except psutil.Error as e:
        return Proc(p.pid, 0, (), None, 0.0, _why(e))
    try:
        cmd = tuple(p.cmdline())
    except psutil.NoSuchProcess as e:  # a zombie has no command line; an ended process is no record
        if not isinstance(e, psutil.ZombieProcess):
            return None
        cmd = ()
    except psutil.Error:
        cmd = ()
    try:
        env: Mapping[str, str] | None = p.environ()
        err = ""
    except psutil.Error as e:
        if isinstance(e, psutil.NoSuchProcess) and not isinstance(e, psutil.ZombieProcess):
            return None
        env, err = None, _why(e)
    return Proc(p.pid, ppid, cmd, env, ctime, err, is_spawn_child(cmd) and attach_probe.maps_torch(p.pid))


def _why(e: psutil.Error) -> str:
    if isinstance(e, psutil.ZombieProcess):
        return "a zombie: it has exited and its parent has not reaped it"
    if isinstance(e, psutil.AccessDenied):
        return ("access denied: another user's process (run ddptui as that user or as root to read its "
                "environment)")
    return str(e) or type(e).__name__


def snapshot() -> dict[int, Proc]:
    snap = {}
    for p in psutil.process_iter():
        rec = _read(p)
        if rec is not None:
            snap[rec.pid] = rec
    return snap


def _pyspy_locals(pid: int, timeout: float = 10.0) -> list:
    from ..edge import stacks
    exe = stacks.find_pyspy()
    if exe is None:
        return []
    try:
        r = subprocess.run([exe, "dump", "--pid", str(pid), "--locals", "--json"], capture_output=True, text=True,
                           timeout=timeout)
        return json.loads(r.stdout) if r.returncode == 0 else []
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return []


def find_job(pid: int) -> AttachedJob:
    """The job process `pid` belongs to (torchrun's agent, a rank, the script that called torch.multiprocessing.spawn,
    a rank's DataLoader worker), its ranks and where their output goes."""
    from ..inject.ddptui_node import node_name
    from . import output as attach_output

    if not psutil.pid_exists(pid):
        raise NotAJob(f"no process {pid}")
    snap = snapshot()
    found = locate(snap, pid)
    notes: tuple[str, ...]
    ranks, notes = found.ranks, ()
    if found.kind == "spawn":
        import concurrent.futures
        pids = [*ranks, found.root]
        with concurrent.futures.ThreadPoolExecutor(min(8, len(pids))) as pool:
            dumps = dict(zip(pids, pool.map(_pyspy_locals, pids), strict=True))
        indices = {p: spawn_index(dumps[p]) for p in ranks}
        ranks, notes = spawn_numbers(found, indices, spawn_nprocs(dumps[found.root]))
    host = socket.gethostname()
    job_pids = set(ranks) | {found.root}
    out: dict[int, AttachedRank] = {}
    worlds = []
    for rpid, (rank, local, world) in sorted(ranks.items(), key=lambda kv: kv[1][0]):
        env = snap[rpid].environ or {}
        out[rank] = AttachedRank(rank, local, world, rpid, host, node_name(env, host),
                                 attach_output.rank_output(rpid, 1, job_pids),
                                 attach_output.rank_output(rpid, 2, job_pids))
        worlds.append(world)
    root = snap.get(found.root)
    slurm = next(((snap[p].environ or {}).get("SLURM_JOB_ID") for p in ranks
                  if (snap[p].environ or {}).get("SLURM_JOB_ID")), None)
    # an env launcher is whatever started the ranks (a shell, slurmstepd, init for orphans): SIGTERM to it is no
    # way to stop them; torchrun's agent forwards it, torch's spawn children die with their parent (PDEATHSIG)
    launcher = found.root if found.kind in ("torchrun", "spawn") and root is not None else None
    return AttachedJob(str(pid), found.kind, launcher, root.cmdline if root is not None else (), out,
                       found.unreadable, slurm, max((w for w in worlds if w is not None), default=None), notes)


# ---- a Slurm job: its nodes asked through srun --overlap -------------------------------------------------------

SLURM_TIMEOUT = 30.0  # seconds for scontrol, and for every node's probe (all at the same time)
_PROBE_ARGV = ("python3", "-S", "-c")  # the node's own python3, as the debug server relay (runners/edge/fr_client.py)


def probe_records(lines: list[dict]) -> tuple[str, dict[int, Proc], dict[int, dict]]:
    """One node's probe output (runners/attach/probe.py, parsed JSON lines): its host name, its processes as
    snapshot records, and pid -> {"fd1": [link, mode, error], "fd2": ...}; pure."""
    host, procs, fds = "", {}, {}
    for d in lines:
        if "host" in d:
            host = str(d["host"])
            continue
        try:
            pid = int(d["pid"])
            procs[pid] = Proc(pid, int(d["ppid"]), tuple(d.get("cmdline") or ()), dict(d.get("env") or {}),
                              float(d.get("start") or 0.0), torch=bool(d.get("torch")))
            fds[pid] = {k: d.get(k) for k in ("fd1", "fd2")}
        except (KeyError, TypeError, ValueError):
            continue
    return host, procs, fds


def slurm_ranks(procs: Mapping[int, Proc]) -> dict[int, tuple[int, int | None, int | None]]:
    """The ranks among one node's processes of a Slurm job; pure. By RANK (a torchrun agent per node, or a batch
    script that exports RANK=$SLURM_PROCID), its DataLoader workers and helpers left out; where no process has RANK,
    the srun tasks by SLURM_PROCID (a program that reads Slurm's variables itself), a shell wrapper's one child."""
    snap = {pid: p if p.ppid in procs else Proc(p.pid, 0, p.cmdline, p.environ, p.create_time, p.error, p.torch)
            for pid, p in procs.items()}  # the job's top processes hang under one root: slurmstepd, not listed
    snap[0] = Proc(0, -1, ("slurmstepd",), {}, 0.0)
    kids = _children(snap)
    found = _env_job(snap, kids, "env", 0, None)
    if found.ranks:
        return {pid: (r, lr, w if w is not None else _int(procs[pid].environ, "SLURM_NTASKS"))
                for pid, (r, lr, w) in found.ranks.items()}
    out = {}
    for p in kids.get(0, []):
        env = p.environ or {}
        if not env.get("SLURM_STEP_ID", "").isdigit():  # the batch script and the extern step are no task of srun
            continue
        r = _int(env, "SLURM_PROCID")
        if r is None:
            continue
        q = p
        while _is_wrapper(q) and len(kids.get(q.pid, [])) == 1:
            q = kids[q.pid][0]
        out[q.pid] = (r, _int(env, "SLURM_LOCALID"), _int(env, "SLURM_NTASKS"))
    return out


def _slurm_output(fd: list | None, pid: int, fdn: int, node: str, local: bool) -> RankOutput:
    from . import output as attach_output
    link, mode, err = (list(fd or []) + ["", 0, "closed"])[:3]
    got = attach_output.classify(attach_output.FdLink(pid, fdn, str(link), int(mode or 0), str(err)))
    # (ignore: classify() gives every "file" its path)
    if got.kind == "file" and not (local if got.path.startswith("/proc/") else os.path.isfile(got.path)):  # type: ignore[union-attr, arg-type]
        return RankOutput("none", None, f"the rank writes to {link} on {node}: not visible on this machine")
    return got


def _scontrol(job_id: str) -> tuple[dict[str, str], str]:
    from ..evidence import slurm_state
    try:
        r = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True,
                           timeout=SLURM_TIMEOUT)
    except FileNotFoundError as e:
        raise NotAJob(f"Slurm job {job_id}: scontrol not found here (is this a Slurm login node?)") from e
    except subprocess.TimeoutExpired as e:
        raise NotAJob(f"Slurm job {job_id}: scontrol did not answer within {SLURM_TIMEOUT:g} s") from e
    fields = next((slurm_state.fields(ln) for ln in r.stdout.splitlines() if f"JobId={job_id} " in ln
                   or ln.startswith(f"JobId={job_id}")), None)
    if r.returncode != 0 or not fields:
        said = (r.stderr.strip().splitlines() or [""])[-1]
        raise NotAJob(f"no Slurm job {job_id}" + (f" ({said.removeprefix('slurm_load_jobs error: ')})"
                                                  if said else ""))
    return fields, r.stdout


def find_slurm_job(job_id: str) -> AttachedJob:
    """A Slurm job's ranks on all its nodes: `scontrol show job` for its nodes, then on each node, through
    `srun --overlap --jobid JOB -w NODE`, the probe (runners/attach/probe.py) that lists the job's processes there."""
    import shutil

    from ..edge import srun_exec
    from ..evidence import slurm_state
    from ..inject.ddptui_node import node_name

    job_id = str(job_id).strip()
    if not job_id.isdigit():
        raise NotAJob(f"not a Slurm job id: {job_id!r}")
    fields, text = _scontrol(job_id)
    info = slurm_state.parse_scontrol(text, job_id)
    state = info.state if info else fields.get("JobState", "")
    if state not in slurm_state.RUNNING:
        raise NotAJob(f"Slurm job {job_id} is {state or 'in no known state'}: it has no process to attach to")
    nodes = _hostnames(info.nodelist if info else fields.get("NodeList", ""))
    exe = shutil.which("srun")
    if exe is None:
        raise NotAJob(f"Slurm job {job_id}: srun not found here, needed to reach its nodes")
    with open(attach_probe.__file__, encoding="utf-8") as f:
        program = f.read()
    argvs = {n: srun_exec.srun_argv(exe, job_id, n, [*_PROBE_ARGV, program, job_id]) for n in nodes}
    ran = srun_exec.run_all(argvs, srun_exec.srun_env(dict(os.environ)), SLURM_TIMEOUT)
    here = socket.gethostname()
    ranks: dict[int, AttachedRank] = {}
    unread: list[Unreadable] = []
    for n in nodes:
        rc, out, err = ran[n]
        o = srun_exec.outcome(n, rc, out, err, SLURM_TIMEOUT, "the attach probe")
        if o.error is not None:
            unread.append(Unreadable(0, f"node {n}: {o.error}"))
            continue
        lines = []
        for ln in o.out.splitlines():
            try:
                lines.append(json.loads(ln))
            except ValueError:
                continue
        host, procs, fds = probe_records(lines)
        local = srun_exec.is_local(host, here)
        for pid, (r, lr, w) in slurm_ranks(procs).items():
            env = procs[pid].environ or {}
            ranks[r] = AttachedRank(r, lr, w, pid, host, node_name(env, host) or n,
                                    _slurm_output(fds[pid].get("fd1"), pid, 1, n, local),
                                    _slurm_output(fds[pid].get("fd2"), pid, 2, n, local))
    world = max((a.world_size for a in ranks.values() if a.world_size is not None), default=None)
    command = fields.get("Command", "")
    return AttachedJob(job_id, "slurm", None, (command,) if command and command != "(null)" else (),
                       dict(sorted(ranks.items())), tuple(unread), job_id, world)


def _hostnames(nodelist: str) -> list[str]:
    if not nodelist or nodelist == "(null)":
        return []
    try:
        r = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True,
                           timeout=SLURM_TIMEOUT)
        got = [x.strip() for x in r.stdout.splitlines() if x.strip()]
        return got or [nodelist]
    except (OSError, subprocess.TimeoutExpired):
        return [nodelist]
