"""A profile built from its tree: every field read in a fixed order (the first problem found is the one said), the
runners' own blocks read by the runner that declares them, then the cross-field rules."""
from __future__ import annotations

from pathlib import Path

from ..registry import NAMES, RUNNERS, SECTIONS
from . import rules
from .errors import _Loc
from .model import (
    BACKENDS,
    DEVICES,
    FAULT_KEYS,
    FAULT_KINDS,
    FAULT_SECONDS,
    ON_DIVERGENCE,
    ON_STALL,
    RDZV_BACKENDS,
    TOP_KEYS,
    Fault,
    Profile,
)
from .names import _default_name, _name
from .readers import _bool, _endpoint, _enum, _env_map, _Fields, _int, _num, _rdzv_id, _str
from .tree import _Node
from .workload import _workload
from .world import WORLD_CEILING, _check_world, _child, default_max_world_size


def _fault(node: _Node | None, where: _Loc, world: int, nproc: int, nnodes: int) -> Fault | None:
    if node is None or (node.kind == "scalar" and node.value is None):
        return None
    f = _Fields(node, "fault", FAULT_KEYS, where, Fault)
    kind_node = f.node("kind")
    if kind_node is None:
        raise f.loc.error("fault.kind", f"missing, expected one of {', '.join(FAULT_KINDS)}")
    kind = _enum(FAULT_KINDS)(kind_node, "fault.kind")
    rank = f.typed("rank", _int(0))
    if rank >= world:
        rnode = f.node("rank")
        assert rnode is not None  # the default 0 is always < world
        raise rnode.loc.error("fault.rank", f"expected an integer in 0..{world - 1} (world size"
                                            f" {nproc}*{nnodes}), got {rank}")
    return Fault(kind=kind, rank=rank, step=f.typed("step", _int(0)),
                 seconds=f.get("seconds", FAULT_SECONDS[kind], _num(0, strict=False)))


def _build(root: _Node, source: str, base: Path, default_name: str) -> Profile:
    f = _Fields(root, "", TOP_KEYS, root.loc, Profile)
    nproc = f.typed("nproc", _int(1))
    nnodes = f.typed("nnodes", _int(1))
    max_world = f.typed("max_world_size", _int(1, WORLD_CEILING, nullable=True))
    limit = default_max_world_size() if max_world is None else max_world
    explicit = max_world is not None
    nproc_node, nnodes_node = f.node("nproc"), f.node("nnodes")
    runner_node = f.node("runner")
    named = RUNNERS.get(runner_node.value) if runner_node is not None and runner_node.kind == "scalar" else None
    elsewhere = named is not None and named.ranks_elsewhere
    if elsewhere:
        # Slurm's nodes are other machines: this one's cores bound the ranks of one node, never the whole job
        _check_world([("nproc", nproc_node, nproc)], root.loc, limit, explicit)
        _check_world([("nproc", nproc_node, nproc), ("nnodes", nnodes_node, nnodes)], root.loc,
                     max_world or WORLD_CEILING, True)
    else:
        _check_world([("nproc", nproc_node, nproc), ("nnodes", nnodes_node, nnodes)], root.loc, limit, explicit)
    mirage = SECTIONS["mirage"].read_section(f.node("mirage"), root.loc, base, nproc, nnodes)
    xla = SECTIONS["xla"].read_section(f.node("xla"), root.loc, base, nproc, nnodes)
    m_nodes = ("mirage.num_nodes", _child(f.node("mirage"), "num_nodes"), mirage.num_nodes)
    if not elsewhere:  # mirage's and xla's counts default to nproc/nnodes; a Slurm job runs neither
        _check_world([("mirage.gpus_per_node", _child(f.node("mirage"), "gpus_per_node"), mirage.gpus_per_node),
                      m_nodes], root.loc, limit, explicit)
        _check_world([("nproc", nproc_node, nproc), m_nodes], root.loc, limit, explicit)  # mirage's world
        _check_world([("xla.num_devices", _child(f.node("xla"), "num_devices"), xla.num_devices)], root.loc, limit,
                     explicit)
    profile = Profile(
        name=f.get("name", None, _name) if f.node("name") is not None else _default_name(default_name, root.loc),
        description=f.typed("description", _str()),
        runner=f.typed("runner", _enum(NAMES)),
        nproc=nproc,
        nnodes=nnodes,
        workload=_workload(f.node("workload"), root.loc, base),
        env=f.typed("env", _env_map),
        backend=f.typed("backend", _enum(BACKENDS)),
        device=f.typed("device", _enum(DEVICES)),
        steps=f.typed("steps", _int(1, nullable=True)),
        seed=f.typed("seed", _int(0)),
        stall_after=f.typed("stall_after", _num(0, strict=True, auto=True)),
        startup_grace=f.typed("startup_grace", _num(0, strict=True)),
        agent_exit_grace=f.typed("agent_exit_grace", _num(0, strict=True)),
        on_stall=f.typed("on_stall", _enum(ON_STALL)),
        timeout=f.typed("timeout", _num(0, strict=False)),
        master_addr=f.typed("master_addr", _str()),
        master_port=f.typed("master_port", _int(1, 65535, auto=True)),
        replica_check=f.typed("replica_check", _bool),
        replica_check_every=f.typed("replica_check_every", _int(0)),
        on_divergence=f.typed("on_divergence", _enum(ON_DIVERGENCE)),
        fault=_fault(f.node("fault"), root.loc, nproc * nnodes, nproc, nnodes),
        mirage=mirage,
        xla=xla,
        max_world_size=max_world,
        source=source,
        rdzv_backend=f.typed("rdzv_backend", _enum(RDZV_BACKENDS)),
        rdzv_endpoint=f.get("rdzv_endpoint", None, _endpoint),
        rdzv_id=f.get("rdzv_id", None, _rdzv_id),
        local_addr=f.typed("local_addr", _str(nullable=True)),
        slurm=SECTIONS["slurm"].read_section(f.node("slurm"), root.loc, base, nproc, nnodes),
        flight_recorder=f.typed("flight_recorder", _bool),
        max_restarts=f.typed("max_restarts", _int(0)),
    )
    return rules.check(f, profile)
