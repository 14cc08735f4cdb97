"""The xla runner: one process (the script calls torch_xla.launch itself), PJRT environment, replicas tagged by ordinal."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from ..judge.runner_traits import RunnerTraits
from .plan import LaunchPlan, ProcSpec
from .profile.errors import _Loc
from .profile.model import PJRT_DEVICES, XLA_KEYS, Profile, XlaOptions
from .profile.readers import _bool, _enum, _Fields, _int, _path_value, _str
from .profile.tree import _Node
from .rankenv import base_env, workload_argv
from .runner import Runner

# XLA's collectives abort the whole worker (SIGABRT) when a replica stays away: a warning after
# 10 s, the abort 10 s later. A stall threshold above this sees the crash, never the hang.
XLA_ABORT_AFTER = 20.0
_SHARED_CACHE_VARS = ("XLA_PERSISTENT_CACHE_PATH",)


def xla_env(profile: Profile, run_dir: Path) -> dict[str, str]:
    """The PJRT variables for a profile (the profile's own env still wins over them)."""
    x = profile.xla
    n = x.num_devices
    env = {
        "PJRT_DEVICE": x.pjrt_device,
        "DDPTUI_XLA": "1",
        "DDPTUI_XLA_CACHE": x.cache_dir or str(run_dir / "xla-cache"),
    }
    if x.pjrt_device == "CPU":
        env["CPU_NUM_DEVICES"] = str(n)
        if not x.async_client:
            env["PJRT_CPU_ASYNC_CLIENT"] = "0"
        if n > 1:
            env["DDPTUI_XLA_TURNSTILE"] = "1"
    elif x.pjrt_device == "CUDA":
        env["GPU_NUM_DEVICES"] = str(n)
    pool = x.thread_pool_size
    if pool is None and x.pjrt_device == "CPU" and n > (os.cpu_count() or 1):
        pool = max(8, 2 * n)
    if pool is not None:
        env["XLA_THREAD_POOL_SIZE"] = str(pool)
    return env


def _notes(profile: Profile, env: dict[str, str]) -> list[str]:
    x, n = profile.xla, profile.xla.num_devices
    notes = []
    if x.pjrt_device == "CPU":
        notes.append(f"PJRT CPU: torch_xla.launch starts ONE worker process; its {n} replicas are threads "
                     f"(xla:0..{n - 1}) with in-process collectives, not separate processes; the injected code "
                     "tags each replica's lines @ddptui:N and names its thread xla-rank-N")
        if n > 1:
            notes.append("step markers run in ordinal order (DDPTUI_XLA_TURNSTILE=1)"
                         + ("" if x.async_client else " with PJRT_CPU_ASYNC_CLIENT=0")
                         + ": without both, thread replicas compile twin executables and deadlock in the "
                         "first all-reduce (docs/xla.md)")
        if x.async_client:
            notes.append("xla.async_client is true: PJRT_CPU_ASYNC_CLIENT is left to torch_xla's default; "
                         "thread replicas may deadlock in their first all-reduce")
        if x.thread_pool_size is None and "XLA_THREAD_POOL_SIZE" in env:
            notes.append(f"{n} devices on {os.cpu_count()} cores: XLA_THREAD_POOL_SIZE={env['XLA_THREAD_POOL_SIZE']} "
                         "(a smaller pool deadlocked)")
        stall = profile.stall_after
        if n > 1 and (stall == "auto" or float(stall) >= XLA_ABORT_AFTER):
            notes.append(f"stall_after is {stall}: XLA aborts the worker ~{XLA_ABORT_AFTER:.0f} s after one replica "
                         "stops joining a collective; ddptui calls that stall at XLA's rendezvous warning (5 s into "
                         "the wait) and takes the stacks before the abort; stall_after applies to everything else")
    else:
        notes.append(f"PJRT {x.pjrt_device}: torch_xla.launch picks the world size itself (one process per "
                     f"chip); the dashboard expects {n} replicas (xla.num_devices)")
    for var in _SHARED_CACHE_VARS:
        if var in profile.env:
            notes.append(f"warning: env sets {var}={profile.env[var]}: one compile cache shared by every "
                         "process (the reference's key point 6: unique paths per process); use xla.cache_dir, "
                         "which the workloads suffix per process")
    if profile.workload.python == sys.executable:
        notes.append("the workload runs on the dashboard's interpreter, which has no torch_xla: "
                     "use workload.venv ~/.cache/ddptui/xla-venv (make xla-venv)")
    return notes


def plan(profile: Profile, run_dir: Path, port: int, dashboard_pid: int | None = None) -> LaunchPlan:
    run_dir = Path(run_dir)
    xenv = xla_env(profile, run_dir)
    env = base_env(profile, dashboard_pid, runner_env=xenv, run_dir=run_dir)
    n = profile.xla.num_devices
    raw = run_dir / "raw"
    proc = ProcSpec("xla", tuple(workload_argv(profile)), env, os.getcwd(), tuple(range(n)),
                    str(raw / "xla.out"), str(raw / "xla.err"), stdout_rank=None)
    return LaunchPlan("xla", n, (proc,), (), tuple(_notes(profile, env)))


def _xla(node: _Node | None, where: _Loc, base: Path, nproc: int) -> XlaOptions:
    f = _Fields(node, "xla", XLA_KEYS, where, XlaOptions)
    cache = f.node("cache_dir")
    cache_dir = None
    if cache is not None and _str(nullable=True)(cache, "xla.cache_dir") is not None:
        cache_dir = str(_path_value(cache, "xla.cache_dir", base))
    return XlaOptions(
        pjrt_device=f.typed("pjrt_device", _enum(PJRT_DEVICES)),
        num_devices=f.get("num_devices", nproc, _int(1)),
        async_client=f.typed("async_client", _bool),
        thread_pool_size=f.typed("thread_pool_size", _int(1, nullable=True)),
        cache_dir=cache_dir,
    )


class XlaRunner(Runner):
    name = "xla"
    section = "xla"

    def read_section(self, node: _Node | None, where: _Loc, base: Path, nproc: int, nnodes: int) -> XlaOptions:
        return _xla(node, where, base, nproc)

    def rendezvous_problem(self, field: str, wrapped_command: bool) -> str | None:
        return f"the xla runner uses no rendezvous (torch_xla.launch sets up its replicas); remove {field}"

    def traits(self, profile: Profile) -> RunnerTraits:
        # the turnstile and PJRT_CPU_ASYNC_CLIENT=0 (xla_env) are the deadlock hint's recipe, applied unless async_client
        quiet = frozenset() if profile.xla.async_client else frozenset({"xla-rendezvous-deadlock"})
        return RunnerTraits(xla_replicas=True, quiet_hints=quiet)

    def plan(self, profile: Profile, run_dir: Path, port: int, dashboard_pid: int | None = None) -> LaunchPlan:
        return plan(profile, run_dir, port, dashboard_pid)
