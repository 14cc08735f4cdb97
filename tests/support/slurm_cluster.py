"""A real Slurm cluster (slurmctld + two slurmd) for the tests: on this host, or on two namespaced "hosts"."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from tests.support.wait import WaitTimeout, wait_until
from tests.support.netns import NamespacesUnavailable, NetnsHosts, cannot_make_namespaces

DAEMONS = ("slurmctld", "slurmd", "slurmstepd")
MARK = "DDPTUI_TEST_SLURM"  # in every daemon's environment: "<cluster uid>:<owner pid>:<owner start time>"
TOKEN_VAR = "DDPTUI_TEST_TOKEN"  # tests/conftest.py's "no process left behind" mark: daemons do not carry it

_BASE = """\
ClusterName=ddptuitest
SlurmctldHost={ctld_host}({ctld_addr})
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
CommunicationParameters=NoInAddrAny
MailProg=/bin/true
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/run/slurmctld.pid
SlurmdPidFile={root}/run/slurmd-%n.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd-%n.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
InactiveLimit=0
KillWait=5
MinJobAge=300
"""


@dataclass(frozen=True)
class Layout:
    """Who is where: node names, each node's hostname and address, and the controller's."""

    nodes: tuple[str, ...]
    hostnames: tuple[str, ...]
    addrs: tuple[str, ...]
    ctld_host: str
    ctld_addr: str


def single_host_layout() -> Layout:
    # Node names do not resolve here: clients take addresses from the conf, and %N expands to this host's name.
    return Layout(("n1", "n2"), ("localhost", "localhost"), ("127.0.0.1", "127.0.0.1"), "localhost", "127.0.0.1")


def netns_layout(hosts: NetnsHosts) -> Layout:
    addrs = tuple(hosts.addr(i) for i in range(hosts.count))
    return Layout(tuple(hosts.names), tuple(hosts.names), addrs, hosts.names[0], addrs[0])


def slurm_conf(root: Path, layout: Layout, ports: list[int]) -> str:
    """The conf from the field notes, every path under root; ports: controller, slurmd default, then one per node."""
    text = _BASE.format(root=root, ctld_host=layout.ctld_host, ctld_addr=layout.ctld_addr,
                        ctld_port=ports[0], slurmd_port=ports[1])
    for name, host, addr, port in zip(layout.nodes, layout.hostnames, layout.addrs, ports[2:]):
        text += (f"NodeName={name} NodeHostname={host} NodeAddr={addr} Port={port} "
                 "CPUs=2 RealMemory=1000 State=UNKNOWN\n")
    return text + "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n"


def nodes_idle(sinfo_out: str, nodes: tuple[str, ...]) -> bool:
    """`sinfo -h -N -o '%N %t'` shows every node, and every one idle (not `idle*`, not `unk*`)."""
    states = dict(line.split()[:2] for line in sinfo_out.splitlines() if len(line.split()) >= 2)
    return set(states) == set(nodes) and all(s == "idle" for s in states.values())


def parse_squeue(out: str) -> list[tuple[str, str, str]]:
    """`squeue -h -o '%i|%T|%N'` lines as (job id, state, nodes)."""
    return [tuple(line.split("|", 2)) for line in out.splitlines() if line.count("|") >= 2]


def free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def missing_binaries() -> str | None:
    """Why this machine cannot run the cluster, or None."""
    if os.geteuid() != 0:
        return "the Slurm test cluster runs its daemons as root (SlurmUser=root): not root"
    gone = [b for b in ("slurmctld", "slurmd", "sinfo", "srun", "sbatch", "squeue", "scancel", "scontrol")
            if shutil.which(b) is None]
    if gone:
        return f"Slurm is not installed ({', '.join(gone)} missing): `make slurm-deps` installs it as root"
    return None


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _fds(pid: int) -> list[str]:
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return []
    out = []
    for n in names:
        try:
            out.append(os.readlink(f"/proc/{pid}/fd/{n}"))
        except OSError:
            continue
    return out


@dataclass
class SlurmCluster:
    """One cluster: start() once, tests use env/nodes/conf_path/run/on_node, stop() leaves nothing behind."""

    namespaced: bool = False
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="ddptui-slurm-")))
    uid: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    start_s: float = 0.0
    stop_s: float = 0.0

    def __post_init__(self) -> None:
        self.hosts = NetnsHosts(f"dt{self.uid}", self.root) if self.namespaced else None
        self.layout = netns_layout(self.hosts) if self.hosts else single_host_layout()
        self.nodes = list(self.layout.nodes)
        self.hostnames = list(self.layout.hostnames)
        self.conf_path = self.root / "slurm.conf"
        self.env = {"SLURM_CONF": str(self.conf_path)}
        self.daemons: dict[str, subprocess.Popen] = {}

    # ---- running commands as on a node -------------------------------------------------------------------
    def _argv(self, node: int, argv: list[str]) -> list[str]:
        return self.hosts.wrap(node, list(argv)) if self.hosts else list(argv)

    def node_env(self, extra: dict | None = None) -> dict:
        """Our environment for a command on a node, less any outer allocation's SLURM_* (this cluster is not it)."""
        ours = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
        return {**ours, **self.env, **(extra or {})}

    def on_node(self, node: int, argv: list[str], env: dict | None = None, **popen_kw) -> subprocess.Popen:
        """A Popen of argv on node `node` (its namespaces when namespaced) with SLURM_CONF set; env adds to ours."""
        return subprocess.Popen(self._argv(node, argv), env=self.node_env(env), **popen_kw)

    def run(self, argv: list[str], node: int = 0, timeout: float = 60, env: dict | None = None,
            check: bool = False) -> subprocess.CompletedProcess:
        """A client command (sinfo, srun, ...) on a node, by default node 0 (the login node): outputs as text."""
        return subprocess.run(self._argv(node, argv), env=self.node_env(env), capture_output=True, text=True,
                              timeout=timeout, check=check)

    def srun_outside(self, name: str, script: Path, logs: Path, **popen_kw) -> subprocess.Popen:
        """A user's own `srun -N2 --ntasks-per-node=1 python -u SCRIPT` from node0 (the login node), not ddptui's:
        task T's output in logs/rankT.out and .err, its rendezvous on node0."""
        addr = self.hostnames[0] if self.namespaced else "127.0.0.1"
        env = {"MASTER_ADDR": addr, "MASTER_PORT": str(self.free_port(0)), "OMP_NUM_THREADS": "1"}
        popen_kw.setdefault("stdout", subprocess.DEVNULL)
        popen_kw.setdefault("stderr", subprocess.PIPE)
        return self.on_node(0, ["srun", "-N2", "--ntasks-per-node=1", f"--job-name={name}",
                                f"--output={logs}/rank%t.out", f"--error={logs}/rank%t.err",
                                sys.executable, "-u", str(script)], env=env, **popen_kw)

    def wait_for_lines(self, job: subprocess.Popen, logs: Path, needle: str = "step 10 ",
                       timeout: float = 150) -> str:
        """Waits until both tasks of srun_outside's job printed `needle`; then its running job's id."""
        def text(p: Path) -> str:
            try:
                return p.read_text(errors="replace")
            except OSError:
                return ""
        wait_until(lambda: all(needle in text(logs / f"rank{r}.out") for r in (0, 1)), timeout,
                   f"both tasks to print {needle!r}", step=0.2,
                   stop_if=lambda: None if job.poll() is None else
                   f"srun exited {job.returncode}: {[text(p)[-500:] for p in logs.iterdir()]}")
        return next(j[0] for j in self.jobs() if j[1] == "RUNNING")

    def free_port(self, node: int = 0) -> int:
        """A TCP port free on that node (its own network namespace when namespaced), e.g. for MASTER_PORT."""
        code = "import socket; s = socket.socket(); s.bind(('', 0)); print(s.getsockname()[1])"
        return int(self.run([sys.executable, "-c", code], node=node, timeout=30, check=True).stdout)

    # ---- state ----------------------------------------------------------------------------------------------
    def sinfo(self) -> str:
        return self.run(["sinfo", "-h", "-N", "-o", "%N %t"], timeout=30).stdout

    def jobs(self) -> list[tuple[str, str, str]]:
        """Jobs the controller still has pending, running or completing: (id, state, nodes)."""
        r = self.run(["squeue", "-h", "-o", "%i|%T|%N"], timeout=30)
        if r.returncode != 0:
            raise RuntimeError(f"squeue failed: {r.stderr.strip()}")
        return parse_squeue(r.stdout)

    def job_state(self, job_id: str) -> str:
        """JobState from `scontrol show job ID -o` (finished jobs stay known for MinJobAge=300 s)."""
        out = self.run(["scontrol", "show", "job", str(job_id), "-o"], timeout=30).stdout
        for word in out.split():
            if word.startswith("JobState="):
                return word.split("=", 1)[1]
        return ""

    def steps_left(self) -> list[int]:
        """slurmstepd processes of this cluster still alive: ours hold one of its slurmd log files open.

        (slurmstepd rewrites its process title over its environment, so the daemons' mark cannot be read there.)
        """
        logs = f"{self.root / 'log'}/"
        return [p for p in _pids() if _comm(p) == "slurmstepd" and any(f.startswith(logs) for f in _fds(p))]

    def wait_no_jobs(self, timeout: float = 30) -> None:
        wait_until(lambda: not self.jobs() and not self.steps_left(), timeout,
                   "every job and job step of the test cluster gone")

    def settle_completing(self, timeout: float = 90) -> None:
        """After a link cut, as an admin would: the kill asked again (the first one reached the cut-off node's slurmd
        only by the controller's own retry, minutes later), then once no step of the job is alive on any node, end
        Slurm's bookkeeping of a job stuck COMPLETING there (node DOWN, then RESUME)."""
        self.cancel_all()
        wait_until(lambda: not self.steps_left(), timeout, "every slurmstepd of the test cluster gone")
        for _, state, nodes in self.jobs():
            if state == "COMPLETING" and nodes:
                for new in ("state=down reason=link-cut-by-test", "state=resume"):
                    self.run(["scontrol", "update", f"nodename={nodes}", *new.split(" ", 1)], timeout=30)
        wait_until(lambda: "down" not in self.sinfo(), timeout, "the cut-off node back up")

    def cancel_all(self) -> None:
        ids = [j[0] for j in self.jobs()]
        if ids:
            self.run(["scancel", *ids], timeout=30)

    def end_job(self, job: subprocess.Popen) -> None:
        """A test's own `sbatch --wait` (or srun) process: cancel every job, wait for it, kill it only if it stays."""
        self.cancel_all()
        try:
            job.wait(timeout=60)
        finally:
            if job.poll() is None:
                job.kill()
                job.wait()
            if job.stderr is not None:
                job.stderr.close()

    # ---- lifecycle ------------------------------------------------------------------------------------------
    def start(self, timeout: float = 60) -> "SlurmCluster":
        t0 = time.monotonic()
        for sub in ("state", "run", "log", *(f"spool/{n}" for n in self.nodes)):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        try:
            if self.hosts:
                self.hosts.create()
            self.conf_path.write_text(slurm_conf(self.root, self.layout, free_ports(2 + len(self.nodes))))
            denv = {k: v for k, v in os.environ.items() if k != TOKEN_VAR and not k.startswith("SLURM")}
            denv[MARK] = f"{self.uid}:{os.getpid()}:{_start_time(os.getpid())}"
            self._daemon("slurmctld", 0, ["slurmctld", "-D", "-f", str(self.conf_path)], denv)
            for i, name in enumerate(self.nodes):
                self._daemon(f"slurmd-{name}", i, ["slurmd", "-D", "-f", str(self.conf_path), "-N", name], denv)
            wait_until(self._ready, timeout, "both slurmd nodes idle in sinfo")
        except NamespacesUnavailable:
            self.stop()
            raise
        except Exception as e:
            tails = self.log_tails()
            self.stop()
            raise RuntimeError(f"the test Slurm cluster did not start: {e}\n{tails}") from e
        except BaseException:
            self.stop()
            raise
        self.start_s = time.monotonic() - t0
        return self

    def _daemon(self, name: str, node: int, argv: list[str], env: dict) -> None:
        """A daemon in the foreground (-D) as our own child, so stop() waits on it rather than on a pid file."""
        with open(self.root / "log" / f"{name}.out", "wb") as out:
            self.daemons[name] = subprocess.Popen(self._argv(node, argv), env=env, stdout=out,
                                                  stderr=subprocess.STDOUT, start_new_session=True)

    def log_tails(self, lines: int = 8) -> str:
        """The last lines of every daemon's log, for a failure message (the root folder is removed after)."""
        out = []
        for log in sorted((self.root / "log").glob("*")):
            tail = log.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {log.name}\n" + "\n".join(tail))
        return "\n".join(out)

    def _ready(self) -> bool:
        for name, p in self.daemons.items():
            if p.poll() is not None:
                raise RuntimeError(f"{name} exited {p.returncode} at start: see {self.root / 'log'}")
        return nodes_idle(self.sinfo(), self.layout.nodes)

    def stop(self, timeout: float = 60) -> None:
        """Cancel what is left, `scontrol shutdown`, wait for every daemon and step; kill only our own leftovers."""
        t0 = time.monotonic()
        alive = [p for p in self.daemons.values() if p.poll() is None]
        if "slurmctld" in self.daemons and self.daemons["slurmctld"].poll() is None:
            try:
                self.cancel_all()
                self.wait_no_jobs(timeout=30)
            except (WaitTimeout, RuntimeError, subprocess.TimeoutExpired):
                pass  # the fallback below ends whatever is left
            try:
                self.run(["scontrol", "shutdown"], timeout=30)
            except subprocess.TimeoutExpired:
                pass
        deadline = time.monotonic() + timeout
        for p in alive:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                if _comm(p.pid) in DAEMONS:  # still the daemon we started, not a recycled pid
                    p.kill()
                    p.wait(timeout=10)
        try:
            wait_until(lambda: not self.steps_left(), 15, "the test cluster's slurmstepd gone")
        except WaitTimeout:
            for pid in self.steps_left():  # started by our slurmd (it holds our log file): ours to end
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if self.hosts and self.hosts.made:
            self.hosts.delete()
        self.daemons.clear()
        self.stop_s = time.monotonic() - t0

    # ---- namespaced hosts only --------------------------------------------------------------------------------
    def cut_link(self) -> None:
        """Link down between node0 and node1 (namespaced mode): neither can reach the other."""
        self._need_hosts().set_link(False)

    def restore_link(self) -> None:
        self._need_hosts().set_link(True)

    def _need_hosts(self) -> NetnsHosts:
        if not self.hosts:
            raise RuntimeError("a link between nodes exists only on the namespaced cluster (slurm_hosts)")
        return self.hosts

    def node_pids(self, node: int) -> list[int]:
        """Every process of namespaced node `node`: those in its network namespace (its slurmd, slurmstepds, tasks)."""
        ns = _netns(self.daemons[f"slurmd-{self._need_hosts().names[node]}"].pid)
        return [p for p in _pids() if ns and _netns(p) == ns]

    def signal_node(self, node: int, sig: int, spare_slurmd: bool = False) -> list[int]:
        """`sig` to every process of namespaced node `node` (a machine that dies or freezes whole: SIGKILL, SIGSTOP;
        spare_slurmd: all but its slurmd, so steps can still be started there); the pids signalled."""
        slurmd = self.daemons[f"slurmd-{self._need_hosts().names[node]}"]
        pids = [p for p in self.node_pids(node) if not (spare_slurmd and p == slurmd.pid)]
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        if sig == signal.SIGKILL and not spare_slurmd:
            slurmd.wait(timeout=30)
        return pids

    def restart_node(self, node: int, timeout: float = 90) -> None:
        """After `signal_node(node, SIGKILL)`: its slurmd started again; Slurm's bookkeeping of a job left COMPLETING
        there ended as an admin would (node DOWN, then RESUME); every node idle and no job left."""
        name = self._need_hosts().names[node]
        if self.daemons[f"slurmd-{name}"].poll() is None:
            return
        denv = {k: v for k, v in os.environ.items() if k != TOKEN_VAR and not k.startswith("SLURM")}
        denv[MARK] = f"{self.uid}:{os.getpid()}:{_start_time(os.getpid())}"
        self._daemon(f"slurmd-{name}", node, ["slurmd", "-D", "-f", str(self.conf_path), "-N", name], denv)
        self.settle_completing(timeout)
        wait_until(lambda: nodes_idle(self.sinfo(), self.layout.nodes), timeout, "every node idle again")
        self.wait_no_jobs(timeout)

    def remove_root(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def _start_time(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def _mark(pid: int) -> str | None:
    for item in _environ(pid):
        if item.startswith(MARK.encode() + b"="):
            return item.split(b"=", 1)[1].decode(errors="replace")
    return None


def owner_gone(mark: str) -> bool:
    """The process that started a cluster (the mark names its pid and start time) no longer exists."""
    parts = mark.split(":")
    if len(parts) != 3 or not parts[1].isdigit() or not parts[2]:
        return False  # a mark naming no owner (an older fixture's): we cannot tell, so it is never ours to end
    return _start_time(int(parts[1])) != parts[2]


def sweep_orphans(timeout: float = 20) -> list[str]:
    """End test clusters whose pytest died without stopping them (killed by a timeout): what it ended.

    Only daemons carrying our mark whose owner is provably gone, the slurmstepds holding those clusters' log files,
    the processes whose SLURM_CONF is theirs (clients, the jobs' tasks), the namespaces named after those clusters
    and their folders; a live session's cluster, or one whose mark names no owner, is never touched.
    """
    dead: dict[str, list[int]] = {}  # cluster uid -> its daemons
    roots: set[Path] = set()
    for pid in _pids():
        if _comm(pid) not in ("slurmctld", "slurmd"):
            continue
        mark = _mark(pid)
        if mark and owner_gone(mark):
            dead.setdefault(mark.split(":")[0], []).append(pid)
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if b"-f" in cmd:
                roots.add(Path(cmd[cmd.index(b"-f") + 1].decode()).parent)
    steps = [p for p in _pids() if _comm(p) == "slurmstepd"
             and any(f.startswith(f"{r}/log/") for r in roots for f in _fds(p))]
    confs = {f"SLURM_CONF={r / 'slurm.conf'}".encode() for r in roots}
    users = [p for p in _pids() if confs & set(_environ(p))]  # its srun/sbatch clients and the job's tasks
    procs = _processes(steps + users + [p for pids in dead.values() for p in pids])
    for p in procs:  # TERM first: a daemon shuts down, a task may clean up
        _quietly(p.terminate)
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    for p in alive:
        _quietly(p.kill)  # psutil checks it is still the same process (pid and start time)
    psutil.wait_procs(alive, timeout=10)
    ended = [f"cluster {uid} (pids {pids})" for uid, pids in dead.items()]
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30).stdout \
        if shutil.which("ip") else ""
    for line in listed.splitlines():
        name = line.split()[0] if line.split() else ""
        if name.rpartition("-")[0][2:] in dead and name.startswith("dt"):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)
            ended.append(f"namespace {name}")
    for root in roots:
        if root.name.startswith("ddptui-slurm-"):
            shutil.rmtree(root, ignore_errors=True)
    return ended


def _netns(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return ""


def _environ(pid: int) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return []


def _processes(pids: list[int]) -> list[psutil.Process]:
    out = []
    for pid in dict.fromkeys(pids):
        try:
            out.append(psutil.Process(pid))
        except psutil.Error:
            continue
    return out


def _quietly(call) -> None:
    try:
        call()
    except psutil.Error:
        pass


def _pids() -> list[int]:
    return [int(d) for d in os.listdir("/proc") if d.isdigit()]


def cannot_run(namespaced: bool) -> str | None:
    return missing_binaries() or (cannot_make_namespaces() if namespaced else None)
