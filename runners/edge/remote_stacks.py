"""Stacks of ranks on other nodes: py-spy (or faulthandler) run on the rank's node by `srun --overlap` in the job."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass

from ddptui.runners.edge import stacks

REMOTE_TIMEOUT = 10.0  # seconds for every srun to come back (a step starts in well under 1 s on a live node)
STOP_WAIT = 3.0  # seconds our own srun gets to cancel its step after SIGTERM, before SIGKILL
# srun's own words when the node (its slurmd) could not be reached or is down, as opposed to a task that ran and
# failed, a job that is gone, or a controller that did not answer (the same socket errors, not naming a node)
_UNREACHABLE = re.compile(r"Task launch for \S+ failed on node|Required node not available|Node not responding|"
                          r"on node \S+: (Communication connection failure|Socket timed out|Zero Bytes were transmitted)")
_TASK_EXIT = re.compile(r"^srun: error: \S+: tasks? [\d,-]+: (Exited with exit code (\d+)|.*)$")
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


def short_host(host: str) -> str:
    return host.strip().lower().split(".", 1)[0]


def is_local(host: str, here: str) -> bool:
    """A rank runs on this machine when the host its hello gave is this machine's host name (short names compared:
    one side may say node1.cluster, the other node1). No host yet (no hello): local, as every rank was before
    multi-node runs. In a one-host Slurm cluster (several slurmd on one machine) every rank's host is this host, so
    its pid is local and py-spy and psutil reach it directly."""
    return not host or short_host(host) == short_host(here)


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


def srun_argv(srun: str, job_id: str, node: str, command: list[str]) -> list[str]:
    """One task on `node` inside job `job_id`, sharing the job's resources with the running ranks (--overlap: a
    step of its own would otherwise wait for CPUs the ranks hold)."""
    # -v: srun says when the step is launched and when its task started, which tells a node that does not answer
    # from a controller that does not, or a task that hangs
    return [srun, "--overlap", "--jobid", str(job_id), "-w", node, "-N1", "-n1", "-v",
            "--job-name", "ddptui-stacks", *command]


def pyspy_argv(pyspy: str, pid: int) -> list[str]:
    """py-spy on the node, unless the rank there is stopped (then its state, exit STOPPED)."""
    return ["/bin/sh", "-c", _STATE_THEN, "sh", str(pid), pyspy, "dump", "--pid", str(pid), "--json"]


def said_state(out: str) -> str:
    """The state the py-spy wrapper printed for a stopped rank ("T (stopped)"), "" if none."""
    return next((ln.strip()[len(STATE_MARK):] for ln in out.splitlines() if ln.strip().startswith(STATE_MARK)), "")


def signal_argv(pid: int) -> list[str]:
    return ["/bin/sh", "-c", _SIGNAL_SCRIPT, "sh", str(pid)]


def srun_env(environ: dict[str, str]) -> dict[str, str]:
    """Our environment for srun without the SLURM_* variables of an allocation ddptui may run in (SLURM_NTASKS,
    SLURM_NTASKS_PER_NODE... are srun's input too and would contradict -N1 -n1); SLURM_CONF finds the cluster."""
    env = {k: v for k, v in environ.items() if not k.startswith("SLURM_") or k == "SLURM_CONF"}
    env["RUST_BACKTRACE"] = "0"
    return env


@dataclass(frozen=True)
class Outcome:
    """What one srun came back with: stdout, and the failure in words (None: the task ran and exited 0)."""

    out: str
    error: str | None = None
    unreachable: bool = False  # the node could not be reached (srun timed out, or said it could not talk to it)
    task_rc: int | None = None  # the task's own exit code when it ran and failed


def outcome(node: str, rc: int | None, out: str, err: str, timeout: float, what: str) -> Outcome:
    """Reads one srun's end (run with -v: its stderr says whether the step was launched and the task started);
    `rc` None means it did not finish within `timeout` seconds. `what`: the task's program, for the words."""
    srun_errors, task_lines, task_rc, ran = [], [], None, False
    for ln in err.splitlines():
        ln = ln.strip()
        m = _TASK_EXIT.match(ln)
        if m:
            ran = True
            task_rc = int(m.group(2)) if m.group(2) else task_rc
            if not m.group(2):
                task_lines.append(m.group(1))  # "Killed", "Segmentation fault"...
        elif ln.startswith("srun: error: "):
            srun_errors.append(ln.removeprefix("srun: error: "))
        elif ln and not ln.startswith("srun: "):  # the task's own stderr (and slurmstepd's words about it)
            task_lines.append(ln)
    if rc is None:
        if "tasks started" in err:  # it runs there: the node answers, the task is what hangs
            return Outcome(out, f"{what} on {node} did not finish within {timeout:g} s")
        if "launching StepId=" in err:  # the step exists, its task never started on the node
            return Outcome(out, f"srun could not reach {node}: no task started there within {timeout:g} s", True)
        return Outcome(out, f"srun got no job step on {node} within {timeout:g} s (slurmctld did not answer)")
    if rc == 0:
        return Outcome(out)
    if ran or (task_lines and not srun_errors):  # the task ran on the node and failed there
        said = stacks._pyspy_error("\n".join(task_lines), task_rc)
        return Outcome(out, f"{what} on {node}: {said}", False, task_rc if task_rc is not None else rc)
    words = "; ".join(dict.fromkeys(srun_errors)) or f"srun exited {rc}"
    if _UNREACHABLE.search(err):
        return Outcome(out, f"srun could not reach {node}: {words}", True)
    return Outcome(out, f"srun on {node} failed: {words}")


def run_all(argvs: dict, env: dict[str, str], timeout: float) -> dict:
    """key -> (rc or None if timed out, stdout, stderr), every argv run at the same time, all within `timeout`."""
    procs, done = {}, {}
    for key, argv in argvs.items():
        try:
            procs[key] = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          stdin=subprocess.DEVNULL, env=env)
        except OSError as e:
            done[key] = (127, "", f"srun: error: cannot run {argv[0]}: {e.strerror or e}")
    deadline = time.monotonic() + timeout
    late = []
    for key, p in procs.items():
        try:
            out, err = p.communicate(timeout=max(0.0, deadline - time.monotonic()))
            done[key] = (p.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))
        except subprocess.TimeoutExpired:
            p.terminate()  # our own srun: on SIGTERM it cancels the step it started
            late.append(key)
    stop = time.monotonic() + STOP_WAIT
    for key in late:
        p = procs[key]
        try:
            out, err = p.communicate(timeout=max(0.0, stop - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
        done[key] = (None, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))
    return done


def collect(targets: list[RemoteTarget], job_id: str | None, method: str = "auto", pyspy: str | None = None,
            timeout: float = REMOTE_TIMEOUT, srun: str = "srun") -> dict[int, stacks.StackResult]:
    """Stacks of ranks on other nodes, by rank, each taken on its node inside job `job_id`. method as
    stacks.collect: "auto" (py-spy, then torch's debug server, then faulthandler), "py-spy", "debug-server" or
    "faulthandler".

    py-spy runs by the absolute path it has here (the venv is on the filesystem the nodes share); the faulthandler
    fallback signals through srun in the job and reads the rank's stderr file, also on the shared filesystem.
    Every srun runs at the same time; a rank whose node could not be reached is marked `unreachable`."""
    res: dict[int, stacks.StackResult] = {}
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
                    res[rank] = stacks.stopped_result(rank, t.pid, said_state(o.out), t.node)
                    continue
                if o.error is None:
                    try:
                        threads = stacks.ordered(stacks.parse_pyspy_json(o.out))
                        res[rank] = stacks.StackResult(rank, t.pid, "py-spy", threads, None, o.out, node=t.node)
                        continue
                    except (ValueError, TypeError, AttributeError) as e:
                        o = Outcome(o.out, f"py-spy output from {t.node} unreadable: {e}")
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
            res[t.rank] = stacks.StackResult(t.rank, t.pid, f"unavailable: {why}", error=why, node=t.node,
                                             unreachable=t.rank in unreachable)
    return res


def _gone(t: RemoteTarget, method: str) -> stacks.StackResult:
    why = method.removeprefix("unavailable: ")
    return stacks.StackResult(t.rank, t.pid, method, error=why, node=t.node)


def _debug_server(todo: list[RemoteTarget], job_id: str, timeout: float, errors: dict[int, str]
                  ) -> dict[int, stacks.StackResult]:
    """dump_traceback from torch's debug server of every rank that has one, asked on its node by the relay
    (runners/edge/fr_client.py) through srun in the job."""
    from ddptui.runners.edge import fr_client
    socks = {t.rank: t.debug_sock for t in todo if t.debug_sock}
    if not socks:
        return {}
    by_rank = {t.rank: t for t in todo}
    got = fr_client.ask_remote({t.node: {r: socks[r] for r in socks if by_rank[r].node == t.node} for t in todo
                                if t.rank in socks}, job_id, "dump_traceback", min(timeout, fr_client.DUMP_TIMEOUT))
    res: dict[int, stacks.StackResult] = {}
    for rank, body in got.items():
        t = by_rank[rank]
        threads = [] if isinstance(body, str) else stacks.ordered(stacks.parse_debug_traceback(body.decode("utf-8", "replace")))
        if threads:
            res[rank] = stacks.StackResult(rank, t.pid, stacks.DEBUG_SERVER, threads, errors.get(rank),
                                           body.decode("utf-8", "replace"), node=t.node)
        else:
            said = body if isinstance(body, str) else "no thread in its answer"
            errors[rank] = "; ".join(x for x in (errors.get(rank), f"{stacks.DEBUG_SERVER}: {said}") if x)
    return res


def _faulthandler(todo: list[RemoteTarget], job_id: str, exe: str, env: dict[str, str], timeout: float,
                  errors: dict[int, str], unreachable: set[int]) -> dict[int, stacks.StackResult]:
    """SIGUSR1 (on its node, through srun in the job) every rank that registered faulthandler for it, then read the
    dumps from their stderr files on the shared filesystem."""
    res: dict[int, stacks.StackResult] = {}
    offsets: dict[int, tuple[stacks.Target, str, int]] = {}
    for t in todo:
        why = errors.get(t.rank)
        if not t.stderr_path or not os.path.isfile(t.stderr_path):
            res[t.rank] = stacks.StackResult(t.rank, t.pid, "unavailable: py-spy failed and no stderr file of the rank "
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
            res[rank] = stacks.StackResult(rank, t.pid, f"unavailable: no process {t.pid} on {t.node}", error=why,
                                           node=t.node)
        elif o.task_rc == NO_HANDLER:
            res[rank] = stacks.StackResult(rank, t.pid, "unavailable: py-spy failed and no faulthandler on SIGUSR1",
                                           error=why, node=t.node)
        else:
            res[rank] = stacks.StackResult(rank, t.pid, f"unavailable: {o.error}", error=why or o.error, node=t.node,
                                           unreachable=o.unreachable)
            if o.unreachable:
                unreachable.add(rank)
    for rank, r in stacks.await_dumps(pending, {r: errors.get(r) for r in pending}).items():
        r.threads = stacks.ordered(r.threads)
        r.node = by_rank[rank].node
        res[rank] = r
    return res


def unreachable_nodes(results: dict[int, stacks.StackResult]) -> dict[str, tuple[tuple[int, ...], str]]:
    """node -> (its ranks, why) for every node that could not be reached to take stacks: a node lost."""
    out: dict[str, tuple[tuple[int, ...], str]] = {}
    for rank, r in sorted(results.items()):
        if r.unreachable:
            ranks, why = out.get(r.node, ((), r.error or r.method.removeprefix("unavailable: ")))
            out[r.node] = (ranks + (rank,), why)
    return {node: (ranks, f"{why} (taking stacks of rank{'s' if len(ranks) > 1 else ''} "
                          f"{', '.join(map(str, ranks))})") for node, (ranks, why) in out.items()}


def collect_everywhere(targets: list[stacks.Target], hosts: dict[int, tuple[str, str]], here: str,
                       job_id: str | None, method: str = "auto", pyspy: str | None = None
                       ) -> dict[int, stacks.StackResult]:
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
