"""The profile as data: frozen dataclasses whose field defaults are the only place a default is written."""
from __future__ import annotations

import json
import os
import sys
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any

from ...workloads import _faults
from .endpoint import split_endpoint

BACKENDS = ("gloo", "nccl", "xla", "auto")
DEVICES = ("cpu", "cuda", "xla", "auto")
ON_STALL = ("wait", "dump", "stop")
ON_DIVERGENCE = ("warn", "stop")
FAULT_KINDS = _faults.KINDS  # the rank side's table: the one place the kinds and their seconds are written
FAULT_SECONDS = _faults.DEFAULT_SECONDS
PJRT_DEVICES = ("CPU", "TPU", "CUDA")
MIRAGE_INNER = ("torchrun", "env")
WORKLOAD_KINDS = ("builtin", "script", "module", "command")
RDZV_BACKENDS = ("static", "c10d")
SLURM_LAUNCH = ("srun", "torchrun")
SLURM_SUBMIT = ("auto", "sbatch", "step")

TOP_KEYS = ("name", "description", "runner", "nproc", "nnodes", "workload", "env", "backend", "device",
            "steps", "seed", "stall_after", "startup_grace", "agent_exit_grace", "on_stall", "timeout", "master_addr",
            "master_port", "replica_check", "replica_check_every", "on_divergence", "fault", "mirage", "xla",
            "max_world_size", "rdzv_backend", "rdzv_endpoint", "rdzv_id", "local_addr", "slurm", "flight_recorder",
            "max_restarts")
WORKLOAD_KEYS = WORKLOAD_KINDS + ("args", "python", "venv")
FAULT_KEYS = ("kind", "rank", "step", "seconds")
MIRAGE_KEYS = ("command", "workspace", "profile", "gpus_per_node", "num_nodes", "in_process", "env", "inner",
               "require_rocm")
XLA_KEYS = ("pjrt_device", "num_devices", "async_client", "thread_pool_size", "cache_dir")
SLURM_KEYS = ("launch", "submit", "partition", "time", "account", "port", "sbatch_args", "srun_args")
RDZV_KEYS = ("rdzv_backend", "rdzv_endpoint", "rdzv_id", "local_addr")


@dataclass(frozen=True)
class Workload:
    builtin: str | None = None
    script: str | None = None
    module: str | None = None
    command: tuple[str, ...] | None = None
    args: tuple[str, ...] = ()
    python: str = sys.executable  # absolute interpreter path
    script_path: str | None = None  # absolute path of the file to run (builtin, script)
    # who named `python`, as an error names it: "FILE:LINE:COL: field 'workload.python'" (or workload.venv),
    # "DDPTUI_PYTHON", or "" (ddptui's own interpreter)
    python_from: str = ""


@dataclass(frozen=True)
class Fault:
    kind: str
    rank: int = 0
    step: int = 0
    seconds: float = 0.0

    def spec(self) -> str:
        """The DDP_FAULT value: kind:rank:step:seconds, as the ranks' _faults.parse reads it."""
        return _faults.spec(self.kind, self.rank, self.step, self.seconds)


@dataclass(frozen=True)
class MirageOptions:
    command: tuple[str, ...] = ("mirage",)
    workspace: str = ""
    profile: str = "mi350x"
    gpus_per_node: int = 2
    num_nodes: int = 1
    in_process: bool = False
    require_rocm: bool = True  # preflight checks the venv for the ROCm SDK (stand-ins for tests set false)
    env: dict[str, str] = field(default_factory=dict)  # passed as --env K=V
    inner: str = "torchrun"  # what mirage runs: torchrun, or the rank program itself (env)

    @property
    def via_cargo(self) -> bool:
        """mirage run from its workspace build (`cargo run ... --`), not an installed binary."""
        return bool(self.command) and os.path.basename(self.command[0]) == "cargo"


@dataclass(frozen=True)
class XlaOptions:
    pjrt_device: str = "CPU"
    num_devices: int = 2
    async_client: bool = False
    thread_pool_size: int | None = None
    cache_dir: str | None = None


@dataclass(frozen=True)
class SlurmOptions:
    launch: str = "srun"  # srun: one task per rank; torchrun: one torchrun agent per node
    submit: str = "auto"  # auto: a step inside an allocation (SLURM_JOB_ID set), else a job through sbatch
    partition: str | None = None
    time: str | None = None  # Slurm's time limit as written: minutes, MM:SS, HH:MM:SS, D-HH[:MM[:SS]]
    account: str | None = None
    port: int | str = "auto"  # the ranks' rendezvous port on the first node; auto: 29500 + job id % 1000
    sbatch_args: tuple[str, ...] = ()
    srun_args: tuple[str, ...] = ()


@dataclass(frozen=True)
class Profile:
    name: str
    workload: Workload
    source: str
    description: str = ""
    runner: str = "torchrun"
    nproc: int = 2
    nnodes: int = 1
    env: dict[str, str] = field(default_factory=dict)
    backend: str = "auto"
    device: str = "cpu"
    steps: int | None = None
    seed: int = 0
    stall_after: float | str = "auto"
    startup_grace: float = 60.0
    agent_exit_grace: float = 15.0  # a node's agent still running this long after the run failed: its node is lost
    on_stall: str = "stop"
    timeout: float = 0.0
    master_addr: str = "127.0.0.1"
    master_port: int | str = "auto"
    replica_check: bool = True
    # optimizer steps between the live replica checks (runners/inject/ddptui_replica.py); 0: none. 100 costs the
    # built-in workload well under 1 % of its step time (`make bench`, section "replica")
    replica_check_every: int = 100
    on_divergence: str = "warn"  # replicas found diverged while the run goes on: say so, or also tear the run down
    fault: Fault | None = None
    mirage: MirageOptions = field(default_factory=MirageOptions)
    xla: XlaOptions = field(default_factory=XlaOptions)
    max_world_size: int | None = None  # None: default_max_world_size() of the machine that loaded it
    # torchrun's rendezvous across agents (its own flag names): static, the agents ddptui starts knowing their node
    # ranks, or c10d; endpoint None: master_addr and the run's port; id None: the run directory's name
    rdzv_backend: str = "static"
    rdzv_endpoint: str | None = None
    rdzv_id: str | None = None
    local_addr: str | None = None  # torchrun --local-addr: the address the agents give of their own node
    slurm: SlurmOptions = field(default_factory=SlurmOptions)
    # PyTorch's Flight Recorder in the ranks (not XLA) and a debug server per rank on a unix socket (runners/launch/fr_env.py)
    flight_recorder: bool = True
    # the --set KEY=VALUE it was loaded with: the engine a ddptui batch job starts loads the same file the same way
    overrides: tuple[str, ...] = ()
    # torchrun --max-restarts: how often its elastic agent restarts the worker group after a failure; each restart is an
    # attempt of the run (runners/judge/attempts.py). 0: a failure ends the run
    max_restarts: int = 0

    @property
    def world_size(self) -> int:
        return self.nproc * self.nnodes

    @property
    def rendezvous(self) -> tuple[str, int | str]:
        """Where the ranks (or torchrun's c10d agents) meet on this machine: (host, port or 'auto')."""
        if self.rdzv_endpoint is not None:
            return split_endpoint(self.rdzv_endpoint)
        return self.master_addr, self.master_port

    def to_json(self) -> dict[str, Any]:
        d = json.loads(json.dumps(asdict(self)))  # tuples → lists
        del d["overrides"]  # how it was loaded, not what it is
        d["world_size"] = self.world_size
        return d

    def rank_env(self) -> dict[str, str]:
        """What every rank gets from the profile: the built-in workloads' DDP_* knobs, then its own env (which wins).

        A user's script, module or command gets only the profile's env: it may read DDP_BACKEND & co. itself
        with its own defaults, which ours must not replace.
        """
        out = {}
        if self.workload.builtin is not None:
            out = {"DDP_BACKEND": self.backend, "DDP_DEVICE": self.device, "DDP_SEED": str(self.seed)}
            if self.steps is not None:
                out["DDP_STEPS"] = str(self.steps)
            if self.fault is not None:
                out["DDP_FAULT"] = self.fault.spec()
        out.update(self.env)
        return out


def default(name: str, of: type = Profile) -> Any:
    """The default a field of Profile (or of another of these dataclasses) declares: the one place it is written."""
    f = next(f for f in fields(of) if f.name == name)
    return f.default_factory() if f.default is MISSING else f.default  # type: ignore[operator]
