"""The slurm runner: the ranks run on Slurm's nodes, as an srun step or in a job ddptui submits with sbatch; its
`slurm:` block and the sbatch/srun flags ddptui sets itself."""
from __future__ import annotations

import os
import re
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from . import srun_argv, torchrun_argv
from .plan import LaunchPlan, LogSource, ProcSpec, SlurmJob
from .profile.errors import _Loc
from .profile.model import SLURM_KEYS, SLURM_LAUNCH, SLURM_SUBMIT, Profile, SlurmOptions
from .profile.readers import _argv, _enum, _fail, _Fields, _int, _scalar_text, _str
from .profile.tree import _Node
from .rankenv import base_env, workload_argv, workload_target
from .runner import Runner
from .torchrun import launcher_prefix, rank_sources

PORT_WAIT_S = 60  # how long the other tasks wait for task 0's port file (the shared filesystem's delay included)

# The job's first node and its address. In a cluster whose node names do not resolve (several slurmd on one host)
# only Slurm's NodeAddr reaches the node; where NodeAddr is the name (the usual case) it is the name.
_FIRST_NODE = ('first=$(scontrol show hostnames "${SLURM_STEP_NODELIST:-$SLURM_JOB_NODELIST}" | head -n 1)\n'
               'addr=$(scontrol show node "$first" -o 2>/dev/null | sed -n "s/.* NodeAddr=\\([^ ]*\\).*/\\1/p")\n')
_OWN_NODE = ('own=$(scontrol show node "$SLURMD_NODENAME" -o 2>/dev/null'
             ' | sed -n "s/.* NodeAddr=\\([^ ]*\\).*/\\1/p")\n')
_RANK_VARS = ('RANK="$SLURM_PROCID" WORLD_SIZE="$SLURM_NTASKS" LOCAL_RANK="$SLURM_LOCALID" '
              'NODE_RANK="$SLURM_NODEID" GROUP_RANK="$SLURM_NODEID"')


# In the batch script ddptui submits: the job id whose engine this is. The engine started there runs the ranks as a
# step of its own job, whatever the profile's slurm.submit says (that was the submitter's choice).
ENGINE_ENV = "DDPTUI_SLURM_ENGINE"


def in_job_engine(environ: Mapping[str, str]) -> bool:
    """This ddptui is the engine the batch script of a ddptui-submitted job started."""
    job = environ.get("SLURM_JOB_ID")
    return bool(job) and environ.get(ENGINE_ENV) == job


def attempt_of(environ: Mapping[str, str]) -> int:
    """Which attempt of a requeued batch job this is: SLURM_RESTART_COUNT (unset or not a count: 0)."""
    count = environ.get("SLURM_RESTART_COUNT", "").strip()
    return int(count) if count.isdigit() else 0


def submit_mode(submit: str, environ: Mapping[str, str]) -> tuple[str, str | None]:
    """('step', job id) inside an allocation (SLURM_JOB_ID set) unless sbatch is forced, else ('sbatch', None); the
    engine of a ddptui-submitted job always runs a step of that job."""
    job = environ.get("SLURM_JOB_ID") or None
    if submit == "step" or (submit == "auto" and job is not None) or in_job_engine(environ):
        return "step", job
    return "sbatch", None


def attempt_dir(run_dir: Path, attempt: int) -> Path:
    """Where Slurm writes an attempt's rank files (and task 0 its port file): RUN/slurm, then RUN/slurm/attemptK for
    a requeued job's attempt K, so a requeue never truncates the earlier attempt's files (nor reads its port)."""
    return run_dir / "slurm" if attempt == 0 else run_dir / "slurm" / f"attempt{attempt}"


def job_name(run_dir: Path) -> str:
    return f"ddptui-{run_dir.name}"


def port_lines(profile: Profile, out: Path, unless_set: str | None = None) -> str:
    """bash that sets $port: slurm.port, or with auto a port free on the first node now. Task 0 (on the first node)
    binds port 0 there and writes what it got into the run directory; the other tasks read it (no job-id formula:
    two jobs, or two clusters' job 1, on one node must not meet on one port). out: the attempt's folder (attempt_dir).
    unless_set: a variable that, when the user exported it, is the port already."""
    if profile.slurm.port != "auto":
        return f"port={profile.slurm.port}\n"
    pf = shlex.quote(str(out / "port.")) + '"$SLURM_JOB_ID.$SLURM_STEP_ID"'
    py = shlex.quote(profile.workload.python)
    pick = "import socket; s = socket.socket(); s.listen(); print(s.getsockname()[1])"  # listen binds a free port
    # -S: no site, so not the injected sitecustomize either (a python in an srun step would say its hello into $pf)
    body = (f'pf={pf}\n'
            f'if [ "$SLURM_PROCID" = 0 ]; then {py} -S -c "{pick}" > "$pf.tmp" && mv "$pf.tmp" "$pf"\n'
            f'else for i in $(seq {PORT_WAIT_S * 10}); do [ -s "$pf" ] && break; sleep 0.1; done; fi\n'
            'port=$(cat "$pf")\n')
    if unless_set is None:
        return body
    return f'port="${{{unless_set}:-}}"\nif [ -z "$port" ]; then\n{body}fi\n'


def rank_wrapper(profile: Profile, out: Path, keep_user_master: bool = False) -> str:
    """`bash -c` text every srun task runs before the rank program: the env:// variables from Slurm's.
    keep_user_master: an ad-hoc command keeps MASTER_ADDR/MASTER_PORT its user exported."""
    if keep_user_master:
        master = 'MASTER_ADDR="${MASTER_ADDR:-${addr:-$first}}" MASTER_PORT="$port"'
        ports = port_lines(profile, out, unless_set="MASTER_PORT")
    else:
        master = 'MASTER_ADDR="${addr:-$first}" MASTER_PORT="$port"'
        ports = port_lines(profile, out)
    local = f" LOCAL_WORLD_SIZE={profile.nproc}" if not keep_user_master else ""
    return _FIRST_NODE + ports + f"export {master} {_RANK_VARS}{local}\n" + 'exec "$@"'


def torchrun_dir(run_dir: Path, attempt: int) -> Path:
    """The torchrun agents' log folders of an attempt: RUN/torchrun/nodeN, then RUN/torchrun/attemptK/nodeN."""
    return run_dir / "torchrun" if attempt == 0 else run_dir / "torchrun" / f"attempt{attempt}"


def agent_wrapper(profile: Profile, run_dir: Path, attempt: int = 0) -> str:
    """`bash -c` text of the one task per node that becomes its torchrun agent (the program follows as "$@")."""
    torchrun = " ".join(shlex.quote(w) for w in launcher_prefix(profile.workload.python))
    log_dir = shlex.quote(str(torchrun_dir(run_dir, attempt) / "node"))
    return (_FIRST_NODE + _OWN_NODE + port_lines(profile, attempt_dir(run_dir, attempt))
            + f"exec {torchrun} --nnodes={profile.nnodes} --nproc-per-node={profile.nproc} --rdzv-backend=c10d"
            f' --rdzv-endpoint="${{addr:-$first}}:$port" --rdzv-id="$SLURM_JOB_ID"'
            f' --local-addr="${{own:-$SLURMD_NODENAME}}" --log-dir={log_dir}"$SLURM_NODEID" --redirects=3 "$@"')


# What ddptui sets itself on the sbatch line (sbatch_line) and the srun line (srun_line, _adhoc_plan), and from which
# field: slurm.sbatch_args / slurm.srun_args may not set them again.
SBATCH_OWN = {("-N", "--nodes"): "nnodes", ("-n", "--ntasks"): "nproc x nnodes",
              ("--ntasks-per-node",): "nproc", ("-o", "--output"): "the run record (slurm/batch.out)",
              ("-e", "--error"): "the run record (slurm/batch.out)", ("-J", "--job-name"): "ddptui-<run dir name>",
              ("-W", "--wait"): "ddptui, to follow the job", ("--parsable",): "ddptui, to read the job id",
              ("-p", "--partition"): "slurm.partition", ("-t", "--time"): "slurm.time",
              ("-A", "--account"): "slurm.account"}
SRUN_OWN = {("-N", "--nodes"): "nnodes", ("-n", "--ntasks"): "nproc x nnodes", ("--ntasks-per-node",): "nproc",
            ("-o", "--output"): "the run record (slurm/rank%t.out)", ("-e", "--error"): "the run record",
            ("-l", "--label"): "ddptui (lines are read from per-rank files)", ("-J", "--job-name"): "ddptui"}


def srun_line(profile: Profile, run_dir: Path, step_name: str | None, attempt: int = 0) -> list[str]:
    """The srun that starts the ranks (launch srun) or one torchrun agent per node (launch torchrun).

    No --kill-on-bad-exit: ddptui reads the first failure and ends the step itself (scancel), after taking what it
    needs; srun killing the step first raced it."""
    s, out = profile.slurm, attempt_dir(run_dir, attempt)
    argv = ["srun"] + ([f"--job-name={step_name}"] if step_name else [])
    if s.launch == "torchrun":
        argv += [f"--nodes={profile.nnodes}", f"--ntasks={profile.nnodes}", "--ntasks-per-node=1",
                 f"--cpus-per-task={profile.nproc}",
                 f"--output={out}/agent%n.out", f"--error={out}/agent%n.err", *s.srun_args,
                 "bash", "-c", agent_wrapper(profile, run_dir, attempt), "_", *workload_target(profile)]
    else:
        argv += [f"--nodes={profile.nnodes}", f"--ntasks={profile.world_size}",
                 f"--ntasks-per-node={profile.nproc}",
                 f"--output={out}/rank%t.out", f"--error={out}/rank%t.err", *s.srun_args,
                 "bash", "-c", rank_wrapper(profile, out), "_", *workload_argv(profile)]
    return argv


def engine_argv(profile: Profile, run_dir: Path, python: str | None = None) -> list[str]:
    """The ddptui the batch script starts: headless, on the same profile file and --set overrides, writing the record
    into `run_dir` (a requeue's attempt appends to it)."""
    argv = [python or sys.executable, "-m", "ddptui.tui.cli", "--no-ui", "--record", str(run_dir)]
    for item in profile.overrides:
        argv += ["--set", item]
    return argv + [os.path.abspath(profile.source)]


def batch_script(profile: Profile, run_dir: Path) -> str:
    """The batch job ddptui submits: its engine, which runs the ranks as a step of this job and judges them there,
    whoever watches (or nobody)."""
    lines = ["#!/bin/bash",
             f"# ddptui run {run_dir.name}, profile {profile.name}: launch {profile.slurm.launch},"
             f" {profile.nnodes} node(s) x {profile.nproc} rank(s)",
             "# The engine runs in the job: it starts the ranks with srun, follows and judges them (stacks, Flight",
             "# Recorder, the profile's on_stall) and writes the record; `ddptui attach` follows it from anywhere.",
             "# A requeue (SLURM_RESTART_COUNT) starts it again on the same record: the next attempt.",
             f'export {ENGINE_ENV}="$SLURM_JOB_ID"',
             "exec " + shlex.join(engine_argv(profile, run_dir))]
    return "\n".join(lines) + "\n"


def sbatch_line(profile: Profile, run_dir: Path, name: str, script: Path) -> list[str]:
    """--open-mode=append: a requeued job's engine adds to batch.out (Slurm truncates it by default)."""
    s = profile.slurm
    argv = ["sbatch", "--parsable", f"--job-name={name}", f"--output={run_dir / 'slurm' / 'batch.out'}",
            "--open-mode=append", f"--nodes={profile.nnodes}", f"--ntasks-per-node={profile.nproc}"]
    argv += [f"--{flag}={value}" for flag, value in (("partition", s.partition), ("time", s.time),
                                                    ("account", s.account)) if value is not None]
    return argv + [*s.sbatch_args, str(script)]


def rank_files(out: Path, world: int) -> list[LogSource]:
    return [LogSource(str(out / f"rank{r}.{stream}"), r, stream) for r in range(world) for stream in ("out", "err")]


def _sources(profile: Profile, run_dir: Path, attempt: int = 0) -> list[LogSource]:
    out = attempt_dir(run_dir, attempt)
    if profile.slurm.launch == "srun":
        return rank_files(out, profile.world_size)
    sources = []
    for node in range(profile.nnodes):  # c10d: a node's agent gets its group rank on arrival, the hello says which
        sources += rank_sources(torchrun_dir(run_dir, attempt) / f"node{node}", node, profile.nproc, learn_rank=True)
        sources += [LogSource(str(out / f"agent{node}.{s}"), None, s) for s in ("out", "err")]
    return sources


def plan(profile: Profile, run_dir: Path, port: int = 0, dashboard_pid: int | None = None,
         environ: Mapping[str, str] | None = None) -> LaunchPlan:
    """port: unused, the ranks' port is chosen on the job's first node (slurm.port)."""
    environ = os.environ if environ is None else environ
    if profile.workload.command and srun_argv.is_srun(profile.workload.command):
        return _adhoc_plan(profile, run_dir, dashboard_pid, environ)
    s, name = profile.slurm, job_name(run_dir)
    env = base_env(profile, dashboard_pid, run_dir=run_dir)
    mode, job_id = submit_mode(s.submit, environ)
    raw, cwd, ranks = run_dir / "raw", os.getcwd(), tuple(range(profile.world_size))
    notes = [f"{profile.nnodes} node(s) x {profile.nproc} rank(s) under Slurm, launch {s.launch}; every rank's"
             f" output goes to its own file under {run_dir / 'slurm'}"
             + (f" and {run_dir / 'torchrun'}" if s.launch == "torchrun" else "")
             + ": the run directory must be on a filesystem the nodes share",
             "the ranks meet at the first node's Slurm NodeAddr, port "
             + ("free there at start (task 0 writes it to slurm/port.JOB.STEP)" if s.port == "auto" else str(s.port))]
    if mode == "step":
        engine = in_job_engine(environ)
        attempt = attempt_of(environ) if engine else 0
        argv = srun_line(profile, run_dir, name, attempt)
        tag = f"-attempt{attempt}" if attempt else ""
        proc = ProcSpec("srun", tuple(argv), env, cwd, ranks, str(raw / f"srun{tag}.out"),
                        str(raw / f"srun{tag}.err"))
        if engine:
            notes.append(f"the engine of batch job {job_id}, inside it: the ranks are a step of the job"
                         + (f"; attempt {attempt} (Slurm requeued the job; its files under"
                            f" {attempt_dir(run_dir, attempt)})" if attempt else ""))
        else:
            notes.append(f"inside allocation {job_id}: a step of it (srun exports ddptui's environment to the tasks)")
        if (s.partition or s.account or s.time) and not engine:
            notes.append("slurm.partition/time/account are the allocation's own here: not applied to the step")
        job = SlurmJob("step", s.launch, name, job_id, attempt=attempt if engine else None)
        return LaunchPlan("slurm", profile.world_size, (proc,), tuple(_sources(profile, run_dir, attempt)),
                          tuple(notes), job)
    script = run_dir / "slurm" / "job.sbatch"
    argv = sbatch_line(profile, run_dir, name, script)
    proc = ProcSpec("sbatch", tuple(argv), {}, cwd, ranks, str(raw / "sbatch.out"), str(raw / "sbatch.err"))
    notes.append("submitted with sbatch: the batch script starts ddptui's engine inside the job (it runs the ranks"
                 " as a step and judges them there, watched or not); this ddptui prints the job id and the record,"
                 " then follows the record")
    job = SlurmJob("sbatch", s.launch, name, None, str(script), batch_script(profile, run_dir))
    return LaunchPlan("slurm", profile.world_size, (proc,), (), tuple(notes), job)


def _adhoc_plan(profile: Profile, run_dir: Path, dashboard_pid: int | None,
                environ: Mapping[str, str]) -> LaunchPlan:
    """Wrap a user's own srun command line: a job name, per-task files unless it chose its own output, and the
    env:// variables from Slurm's before its program."""
    argv = list(profile.workload.command or ())
    start = srun_argv.program_start(argv)
    head: list[str] = []
    name = srun_argv.value(argv, srun_argv.JOB_NAME_FLAGS)
    if name is None:
        name = job_name(run_dir)
        head.append(f"--job-name={name}")
    notes, sources = [], []
    if not srun_argv.has(argv, srun_argv.OUTPUT_FLAGS):
        head += [f"--output={run_dir / 'slurm' / 'rank%t.out'}", f"--error={run_dir / 'slurm' / 'rank%t.err'}"]
        sources = rank_files(run_dir / "slurm", profile.world_size)
        notes.append(f"added --output/--error {run_dir / 'slurm'}/rank%t.*: every rank's output is read from its"
                     " own file (the run directory must be on a filesystem the nodes share)")
    else:
        added = not srun_argv.has(argv, ("-l", "--label"))
        if added:
            head.append("--label")
        notes.append(f"the command chose its own output flags{' (added --label)' if added else ''}: lines srun"
                     " prints are attributed by its 'N: ' label; what its flags send to files elsewhere is not read")
    wrapped = argv[:start] + ["bash", "-c", rank_wrapper(profile, run_dir / "slurm", keep_user_master=True), "_"] + argv[start:]
    wrapped[1:1] = head
    notes.append("the program runs under a bash wrapper that exports RANK/WORLD_SIZE/LOCAL_RANK/NODE_RANK from"
                 " SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID/SLURM_NODEID, and MASTER_ADDR/MASTER_PORT (the first"
                 " node's NodeAddr) unless already set")
    job_id = environ.get("SLURM_JOB_ID") or None
    notes.append(f"a step of allocation {job_id}" if job_id else
                 f"outside an allocation srun makes its own job: found by its name {name}")
    proc = ProcSpec("srun", tuple(wrapped), base_env(profile, dashboard_pid, run_dir=run_dir), os.getcwd(),
                    tuple(range(profile.world_size)), str(run_dir / "raw" / "srun.out"),
                    str(run_dir / "raw" / "srun.err"))
    return LaunchPlan("slurm", profile.world_size, (proc,), tuple(sources), tuple(notes),
                      SlurmJob("step", "srun", name, job_id))


def prepare(plan: LaunchPlan, run_dir: Path) -> None:
    """Before the plan's processes start: the folder Slurm writes the rank files into, and the batch script."""
    if plan.job is None:
        return
    (run_dir / "slurm").mkdir(parents=True, exist_ok=True)
    if plan.job.attempt:
        attempt_dir(run_dir, plan.job.attempt).mkdir(parents=True, exist_ok=True)
    if plan.job.script is not None and plan.job.script_text is not None:
        path = Path(plan.job.script)
        path.write_text(plan.job.script_text)
        path.chmod(0o755)


# ---------------------------------------------------------------- the slurm: block

# Slurm's --time formats; a bare number is minutes
_SLURM_TIME = re.compile(r"(\d+(:\d{1,2}){0,2}|\d+-\d+(:\d{1,2}){0,2}|UNLIMITED|INFINITE)\Z")
# keys a Slurm user may reach for that are top-level fields here: one place says how many nodes and ranks
_SLURM_COUNT_KEYS = {"nodes": "nnodes", "ntasks_per_node": "nproc", "ntasks": "nproc and nnodes",
                     "nproc_per_node": "nproc", "nnodes": "nnodes", "nproc": "nproc"}


def sbatch_srun_conflict(words: Sequence[str], own: dict[tuple[str, ...], str]) -> str | None:
    """Why an extra sbatch/srun argument clashes with one ddptui sets itself, or None."""
    for word in words:
        for flags, source in own.items():
            for flag in flags:
                short_glued = len(flag) == 2 and word.startswith(flag) and len(word) > 2 and flag[1] != "-" \
                    and flag not in ("-l", "-W")
                if word == flag or word.startswith(flag + "=") or short_glued:
                    return f"{word!r}: ddptui sets {'/'.join(flags)} itself (from {source})"
    return None


def _slurm_time(node: _Node, field: str) -> str | None:
    if node.kind == "scalar" and node.value is None:
        return None
    text = _scalar_text(node, field, "a Slurm time limit")  # 10:00 is read as written, not as YAML's base 60
    if not _SLURM_TIME.match(text):
        raise _fail(node, field, "a Slurm time limit (minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS"
                                 " or UNLIMITED)")
    return text


def _slurm_args(own: dict[tuple[str, ...], str]):
    words_of = _argv(nonempty=False)

    def check(node: _Node, field: str) -> tuple[str, ...]:
        words = words_of(node, field)
        problem = sbatch_srun_conflict(words, own)
        if problem is not None:
            raise node.loc.error(field, problem)
        return words
    return check


def _slurm(node: _Node | None, where: _Loc) -> SlurmOptions:
    if node is not None and node.kind == "map":
        for key, (kloc, _) in node.value.items():
            if key in _SLURM_COUNT_KEYS:
                top = _SLURM_COUNT_KEYS[key]
                raise kloc.error(f"slurm.{key}", f"the counts are the top-level fields (nnodes: nodes, nproc: ranks"
                                                 f" per node), as for every runner: write {top} instead")
    f = _Fields(node, "slurm", SLURM_KEYS, where, SlurmOptions)
    nullable = _str(nullable=True)
    return SlurmOptions(
        launch=f.typed("launch", _enum(SLURM_LAUNCH)),
        submit=f.typed("submit", _enum(SLURM_SUBMIT)),
        partition=f.typed("partition", nullable),
        time=f.get("time", None, _slurm_time),
        account=f.typed("account", nullable),
        port=f.typed("port", _int(1, 65535, auto=True)),
        sbatch_args=f.typed("sbatch_args", _slurm_args(SBATCH_OWN)),
        srun_args=f.typed("srun_args", _slurm_args(SRUN_OWN)),
    )


class SlurmRunner(Runner):
    name = "slurm"
    section = "slurm"
    section_is_own = True
    ranks_elsewhere = True
    picks_port = False

    def read_section(self, node: _Node | None, where: _Loc, base: Path, nproc: int, nnodes: int) -> SlurmOptions:
        return _slurm(node, where)

    def wraps(self, command: Sequence[str]) -> tuple[int, int] | None:
        """srun starts the ranks on the nodes: the slurm runner wraps it."""
        return srun_argv.counts(command) if srun_argv.is_srun(command) else None

    def rendezvous_problem(self, field: str, wrapped_command: bool) -> str | None:
        return (f"the slurm runner's ranks meet at the first node of the job (its Slurm NodeAddr); slurm.port sets"
                f" the port; remove {field}")

    def rdzv_problem(self, field: str, wrapped_command: bool, backend: str) -> str | None:
        return (f"the slurm runner's torchrun agents meet by c10d at the job's first node with the job id as"
                f" rendezvous id (slurm.port sets the port); remove {field}")

    def check(self, f: _Fields, profile: Profile, environ: Any = None) -> Profile:
        """The slurm block's submit and launch must fit the workload and where ddptui runs."""
        _check(f, profile, environ)
        return profile

    def plan(self, profile: Profile, run_dir: Path, port: int, dashboard_pid: int | None = None) -> LaunchPlan:
        return plan(profile, run_dir, port, dashboard_pid)


def _check(f: _Fields, profile: Profile, environ: Any = None) -> None:
    node = f.node("slurm")
    block: dict = node.value if node is not None and node.kind == "map" else {}  # key -> (key_loc, value node)
    s, cmd = profile.slurm, profile.workload.command
    environ = os.environ if environ is None else environ

    def at(key: str) -> _Loc:
        entry = block.get(key)
        return entry[1].loc if entry else (node.loc if node is not None else f.loc)
    if cmd and srun_argv.is_srun(cmd):
        if srun_argv.program_start(cmd) >= len(cmd):
            raise f.loc.error("workload.command", "the srun command line names no program to run")
        extra = [k for k in block if k != "port"]
        if extra:
            raise at(extra[0]).error(f"slurm.{extra[0]}", "workload.command is an srun command line, which chooses"
                                                         " its own options; only slurm.port applies to it")
        return
    if cmd and torchrun_argv.launcher_end(cmd) is not None:
        raise f.loc.error("workload.command", "a torchrun command under the slurm runner: give the program as"
                                              " workload.script/module and set slurm.launch: torchrun (one agent"
                                              " per node)")
    if cmd and s.launch == "torchrun":
        raise at("launch").error("slurm.launch", "launch: torchrun starts workload.script/module under one agent"
                                                 " per node; a workload.command runs as each rank with launch: srun")
    if s.submit == "step" and not environ.get("SLURM_JOB_ID"):
        raise at("submit").error("slurm.submit", "step needs an allocation and SLURM_JOB_ID is not set: run ddptui"
                                                 " inside salloc/sbatch, or use submit: auto or sbatch")
    if s.sbatch_args and s.submit == "step" and not in_job_engine(environ):
        raise at("sbatch_args").error("slurm.sbatch_args", "submit: step runs srun inside the allocation, no sbatch")
