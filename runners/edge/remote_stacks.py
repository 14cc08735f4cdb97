"""Stacks of ranks on other nodes: py-spy (or faulthandler) run on the rank's node by `srun --overlap` in the job."""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

from ..evidence import stack_types
from ..evidence.words import ranks_text
from . import stacks
from .srun_exec import REMOTE_TIMEOUT, Outcome, is_local, outcome, run_all, srun_argv, srun_env

NO_PROCESS, NO_HANDLER = 3, 4  # exit codes of the faulthandler script run on the node
STOPPED = 5  # exit code of the py-spy wrapper on the node: the rank is stopped (state T or t), py-spy not run
STATE_MARK = "ddptui-state: "
# On the node, before py-spy: the rank's State; a stopped rank gets no py-spy (it cannot be suspended again) but says
# its state, and no fallback is tried on it (its debug server and SIGUSR1 wait until it is continued)
_STATE_THEN = ('p=$1; shift; s=$(sed -n "s/^State:[[:space:]]*//p" /proc/$p/status 2>/dev/null); '
               f'case "$s" in T*|t*) echo "{STATE_MARK}$s"; exit {STOPPED};; esac; exec "$@"')
# On the node: SIGUSR1 to the rank only if it registered a handler for it (SigCgt bit 10; otherwise the signal kills
# it), the same check runners/stacks.catches_sigusr1 does here. Only the last 4 hex digits are read: the shell's
# arithmetic is signed 64-bit and SIGUSR1's bit is 0x200.
_SIGNAL_SCRIPT = (
    'p=$1; s=$(sed -n "s/^SigCgt:[[:space:]]*//p" /proc/$p/status 2>/dev/null) || s=""; '
    f'[ -n "$s" ] || exit {NO_PROCESS}; '
    'low=${s#"${s%????}"}; '
    f'[ $(( 0x$low & 0x200 )) -ne 0 ] || exit {NO_HANDLER}; '
    'exec kill -USR1 "$p"')


@dataclass(frozen=True)
class RemoteTarget:
    rank: int
    pid: int  # the rank's pid on its node (its hello's)
    node: str  # the node's name as Slurm knows it (srun -w)
    stderr_path: str | None = None  # the rank's stderr file in the run record, on the shared filesystem
    debug_sock: str | None = None  # torch's debug server socket in the rank, on its node


def split(targets: list[stacks.Target], hosts: dict[int, tuple[str, str]], here: str
          ) -> tuple[list[stacks.Target], list[RemoteTarget]]:
    """(local targets, remote targets); hosts: rank -> (host from its hello, its node name, "" if none said)."""
    local, remote = [], []
    for t in targets:
        host, node = hosts.get(t.rank, ("", ""))
        if is_local(host, here):
            local.append(t)
        else:
            remote.append(RemoteTarget(t.rank, t.pid, node or host, t.stderr_path, t.debug_sock))
    return local, remote


def pyspy_argv(pyspy: str, pid: int) -> list[str]:
    """py-spy on the node, unless the rank there is stopped (then its state, exit STOPPED)."""
    return ["/bin/sh", "-c", _STATE_THEN, "sh", str(pid), pyspy, "dump", "--pid", str(pid), "--json"]


def said_state(out: str) -> str:
    """The state the py-spy wrapper printed for a stopped rank ("T (stopped)"), "" if none."""
    return next((ln.strip()[len(STATE_MARK):] for ln in out.splitlines() if ln.strip().startswith(STATE_MARK)), "")


def signal_argv(pid: int) -> list[str]:
    return ["/bin/sh", "-c", _SIGNAL_SCRIPT, "sh", str(pid)]


def collect(targets: list[RemoteTarget], job_id: str | None, method: str = "auto", pyspy: str | None = None,
            timeout: float = REMOTE_TIMEOUT, srun: str = "srun") -> dict[int, stack_types.StackResult]:
    """Stacks of ranks on other nodes, by rank, each taken on its node inside job `job_id`. method as
    stacks.collect: "auto" (py-spy, then torch's debug server, then faulthandler), "py-spy", "debug-server" or
    "faulthandler".

    py-spy runs by the absolute path it has here (the venv is on the filesystem the nodes share); the faulthandler
    fallback signals through srun in the job and reads the rank's stderr file, also on the shared filesystem.
    Every srun runs at the same time; a rank whose node could not be reached is marked `unreachable`."""
    res: dict[int, stack_types.StackResult] = {}
    if not targets:
        return res
    if not job_id:
        for t in targets:
            res[t.rank] = _gone(t, f"unavailable: rank {t.rank} runs on {t.node}, not here, and there is no Slurm job "
                                   "to reach it through")
        return res
    exe = shutil.which(srun)
    if exe is None:
        for t in targets:
            res[t.rank] = _gone(t, f"unavailable: {srun} not found here, needed to reach {t.node}")
        return res
    env = srun_env(dict(os.environ))
    errors: dict[int, str] = {}
    unreachable: set[int] = set()
    by_rank = {t.rank: t for t in targets}
    if method in ("auto", "py-spy", "no-signal"):
        spy = stacks.find_pyspy(pyspy)
        if spy is None:
            errors = {t.rank: "py-spy not found" for t in targets}
        else:
            ran = run_all({t.rank: srun_argv(exe, job_id, t.node, pyspy_argv(spy, t.pid)) for t in targets},
                           env, timeout)
            for rank, (rc, out, err) in ran.items():
                t = by_rank[rank]
                o = outcome(t.node, rc, out, err, timeout, "py-spy")
                if o.task_rc == STOPPED and said_state(o.out):
                    res[rank] = stack_types.stopped_result(rank, t.pid, said_state(o.out), t.node)
                    continue
                if o.error is None:
                    try:
                        threads = stack_types.ordered(stacks.parse_pyspy_json(o.out))
                        res[rank] = stack_types.StackResult(rank, t.pid, "py-spy", threads, None, o.out, node=t.node)
                        continue
                    except (ValueError, TypeError, AttributeError) as e:
                        o = Outcome(o.out, f"py-spy output from {t.node} unreadable: {e}")
                assert o.error is not None  # the try above ends every read without one
                errors[rank] = o.error
                if o.unreachable:
                    unreachable.add(rank)
    todo = [t for t in targets if t.rank not in res and t.rank not in unreachable]
    if method in ("auto", "debug-server", "no-signal") and todo:
        res.update(_debug_server(todo, job_id, timeout, errors))
        todo = [t for t in todo if t.rank not in res]
    if method in ("auto", "faulthandler") and todo:
        res.update(_faulthandler(todo, job_id, exe, env, timeout, errors, unreachable))
    for t in targets:
        if t.rank not in res:
            why = errors.get(t.rank, "not collected")
            res[t.rank] = stack_types.StackResult(t.rank, t.pid, f"unavailable: {why}", error=why, node=t.node,
                                             unreachable=t.rank in unreachable)
    return res


def _gone(t: RemoteTarget, method: str) -> stack_types.StackResult:
    why = method.removeprefix("unavailable: ")
    return stack_types.StackResult(t.rank, t.pid, method, error=why, node=t.node)


def _debug_server(todo: list[RemoteTarget], job_id: str, timeout: float, errors: dict[int, str]
                  ) -> dict[int, stack_types.StackResult]:
    """dump_traceback from torch's debug server of every rank that has one, asked on its node by the relay
    (runners/edge/fr_client.py) through srun in the job."""
    from . import fr_client
    socks = {t.rank: t.debug_sock for t in todo if t.debug_sock}
    if not socks:
        return {}
    by_rank = {t.rank: t for t in todo}
    got = fr_client.ask_remote({t.node: {r: socks[r] for r in socks if by_rank[r].node == t.node} for t in todo
                                if t.rank in socks}, job_id, "dump_traceback", min(timeout, fr_client.DUMP_TIMEOUT))
    res: dict[int, stack_types.StackResult] = {}
    for rank, body in got.items():
        t = by_rank[rank]
        threads = [] if isinstance(body, str) else stack_types.ordered(stacks.parse_debug_traceback(body.decode("utf-8", "replace")))
        if threads:
            assert isinstance(body, bytes)  # threads are read from an answer, not from an error
            res[rank] = stack_types.StackResult(rank, t.pid, stack_types.DEBUG_SERVER, threads, errors.get(rank),
                                           body.decode("utf-8", "replace"), node=t.node)
        else:
            said = body if isinstance(body, str) else "no thread in its answer"
            errors[rank] = "; ".join(x for x in (errors.get(rank), f"{stack_types.DEBUG_SERVER}: {said}") if x)
    return res


def _faulthandler(todo: list[RemoteTarget], job_id: str, exe: str, env: dict[str, str], timeout: float,
                  errors: dict[int, str], unreachable: set[int]) -> dict[int, stack_types.StackResult]:
    """SIGUSR1 (on its node, through srun in the job) every rank that registered faulthandler for it, then read the
    dumps from their stderr files on the shared filesystem."""
    res: dict[int, stack_types.StackResult] = {}
    offsets: dict[int, tuple[stacks.Target, str, int]] = {}
    for t in todo:
        why = errors.get(t.rank)
        if not t.stderr_path or not os.path.isfile(t.stderr_path):
            res[t.rank] = stack_types.StackResult(t.rank, t.pid, "unavailable: py-spy failed and no stderr file of the rank "
                                             "on the shared filesystem", error=why, node=t.node)
        else:
            offsets[t.rank] = (stacks.Target(t.rank, t.pid, t.stderr_path), t.stderr_path,
                               os.path.getsize(t.stderr_path))
    by_rank = {t.rank: t for t in todo}
    ran = run_all({r: srun_argv(exe, job_id, by_rank[r].node, signal_argv(by_rank[r].pid)) for r in offsets},
                   env, timeout)
    pending = {}
    for rank, (rc, out, err) in ran.items():
        t = by_rank[rank]
        o = outcome(t.node, rc, out, err, timeout, "kill -USR1")
        why = errors.get(rank)
        if o.error is None:
            pending[rank] = offsets[rank]
        elif o.task_rc == NO_PROCESS:
            res[rank] = stack_types.StackResult(rank, t.pid, f"unavailable: no process {t.pid} on {t.node}", error=why,
                                           node=t.node)
        elif o.task_rc == NO_HANDLER:
            res[rank] = stack_types.StackResult(rank, t.pid, "unavailable: py-spy failed and no faulthandler on SIGUSR1",
                                           error=why, node=t.node)
        else:
            res[rank] = stack_types.StackResult(rank, t.pid, f"unavailable: {o.error}", error=why or o.error, node=t.node,
                                           unreachable=o.unreachable)
            if o.unreachable:
                unreachable.add(rank)
    for rank, r in stacks.await_dumps(pending, {r: errors.get(r) for r in pending}).items():
        r.threads = stack_types.ordered(r.threads)
        r.node = by_rank[rank].node
        res[rank] = r
    return res


def unreachable_nodes(results: dict[int, stack_types.StackResult]) -> dict[str, tuple[tuple[int, ...], str]]:
    """node -> (its ranks, why) for every node that could not be reached to take stacks: a node lost."""
    out: dict[str, tuple[tuple[int, ...], str]] = {}
    for rank, r in sorted(results.items()):
        if r.unreachable:
            ranks, why = out.get(r.node, ((), r.error or r.method.removeprefix("unavailable: ")))
            out[r.node] = (ranks + (rank,), why)
    return {node: (ranks, f"{why} (taking stacks of {ranks_text(ranks, sort=False)})") for node, (ranks, why) in out.items()}


def collect_everywhere(targets: list[stacks.Target], hosts: dict[int, tuple[str, str]], here: str,
                       job_id: str | None, method: str = "auto", pyspy: str | None = None
                       ) -> dict[int, stack_types.StackResult]:
    """Stacks of every target by rank: ranks on this machine as stacks.collect takes them, the others on their
    nodes (`collect`), both at the same time. hosts: rank -> (host, node) from the ranks' hellos."""
    local, remote = split(targets, hosts, here)
    if not remote:
        return stacks.collect(local, method=method, pyspy=pyspy)
    if not local:
        return collect(remote, job_id, method=method, pyspy=pyspy)
    import concurrent.futures
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        far = pool.submit(collect, remote, job_id, method, pyspy)
        out = stacks.collect(local, method=method, pyspy=pyspy)
        out.update(far.result())
    return out
