"""Profile fields of multi-node runs: torchrun's rendezvous (rdzv_*, local_addr) and runner slurm's block, each error
one line at its file:line:column; the ad-hoc srun command picks the slurm runner."""
from __future__ import annotations

import textwrap

import pytest

from ddptui.runners.launch.profile import find as pfind
from ddptui.runners.launch.profile import model as pmodel
from ddptui.runners.launch.profile.errors import ProfileError
from ddptui.runners.launch.profile.load import adhoc_profile, load_profile
from tests.support.profiles import BASE, error, write

pytestmark = [pytest.mark.any_python, pytest.mark.timeout(30)]

def test_multinode_defaults(tmp_path):
    p = load_profile(write(tmp_path, BASE))
    assert (p.rdzv_backend, p.rdzv_endpoint, p.rdzv_id, p.local_addr) == ("static", None, None, None)
    assert p.slurm == pmodel.SlurmOptions() and p.slurm.launch == "srun" and p.slurm.submit == "auto"
    assert p.rendezvous == ("127.0.0.1", "auto")


def test_c10d_fields(tmp_path):
    p = load_profile(write(tmp_path, BASE + "nnodes: 2\nrdzv_backend: c10d\nrdzv_endpoint: localhost:29411\n"
                                        "rdzv_id: job7\nlocal_addr: 127.0.0.1\n"))
    assert (p.rdzv_backend, p.rdzv_id, p.local_addr, p.rendezvous) == ("c10d", "job7", "127.0.0.1",
                                                                        ("localhost", 29411))
    assert load_profile(write(tmp_path, BASE + "rdzv_backend: c10d\nrdzv_endpoint: 127.0.0.1\n")).rendezvous == (
        "127.0.0.1", "auto")


def test_slurm_block(tmp_path):
    p = load_profile(write(tmp_path, BASE + textwrap.dedent("""\
        runner: slurm
        nnodes: 2
        nproc: 2
        slurm:
          launch: torchrun
          submit: sbatch
          partition: debug
          time: 10:00
          account: lab
          port: 29444
          sbatch_args: [--exclusive, --mem=1G]
          srun_args: --cpu-bind=none
        """)))
    assert p.slurm == pmodel.SlurmOptions("torchrun", "sbatch", "debug", "10:00", "lab", 29444,
                                        ("--exclusive", "--mem=1G"), ("--cpu-bind=none",))
    assert p.world_size == 4


@pytest.mark.parametrize("text,where,msg", [
    ("rdzv_backend: etcd\n", "3:15", "field 'rdzv_backend': expected one of static, c10d, got 'etcd'"),
    ("rdzv_endpoint: h:1\n", "3:16", "field 'rdzv_endpoint': rdzv_endpoint is for rdzv_backend: c10d; the static "
                                     "rendezvous meets at master_addr:master_port"),
    ("rdzv_backend: c10d\nrdzv_endpoint: 'h:99999'\n", "4:16",
     "field 'rdzv_endpoint': port '99999' is not in 1..65535 or auto, got 'h:99999'"),
    ("rdzv_backend: c10d\nrdzv_endpoint: ':5'\n", "4:16",
     "field 'rdzv_endpoint': expected host:port, host:auto or host, got ':5'"),
    ("rdzv_backend: c10d\nrdzv_endpoint: 127.0.0.1:5000\nmaster_port: 5000\n", "4:16",
     "field 'rdzv_endpoint': give the c10d endpoint either here or as master_addr/master_port, not both"),
    ("rdzv_backend: c10d\nrdzv_endpoint: 192.0.2.77:5000\n", "4:16",
     "field 'rdzv_endpoint': cannot listen on '192.0.2.77' on this machine, where every rank runs: "
     "Cannot assign requested address"),
    ("rdzv_backend: c10d\nrdzv_id: 'a b'\n", "4:10", "field 'rdzv_id': expected a non-empty id without spaces, "
                                                      "got 'a b'"),
    ("rdzv_id: x\n", "3:10", "field 'rdzv_id': rdzv_id is for rdzv_backend: c10d; the static rendezvous meets at "
                             "master_addr:master_port"),
    ("runner: env\nrdzv_backend: c10d\n", "4:15", "field 'rdzv_backend': rdzv_backend is torchrun's; the env "
                                                  "runner starts no torchrun agents"),
    ("local_addr: 192.0.2.77\n", "3:13", "field 'local_addr': cannot listen on '192.0.2.77' on this machine, where "
                                         "every rank runs: Cannot assign requested address"),
    ("runner: slurm\nrdzv_backend: c10d\n", "4:15",
     "field 'rdzv_backend': the slurm runner's torchrun agents meet by c10d at the job's first node with the job id "
     "as rendezvous id (slurm.port sets the port); remove rdzv_backend"),
    ("runner: slurm\nmaster_port: 29500\n", "4:14",
     "field 'master_port': the slurm runner's ranks meet at the first node of the job (its Slurm NodeAddr); "
     "slurm.port sets the port; remove master_port"),
    ("slurm: {partition: debug}\n", "3:8", "field 'slurm': the slurm block is for runner: slurm (this profile's "
                                           "runner is torchrun)"),
    ("runner: slurm\nslurm: {nodes: 2}\n", "4:9", "field 'slurm.nodes': the counts are the top-level fields "
     "(nnodes: nodes, nproc: ranks per node), as for every runner: write nnodes instead"),
    ("runner: slurm\nslurm: {ntasks_per_node: 2}\n", "4:9", "field 'slurm.ntasks_per_node': the counts are the "
     "top-level fields (nnodes: nodes, nproc: ranks per node), as for every runner: write nproc instead"),
    ("runner: slurm\nslurm: {launch: mpirun}\n", "4:17", "field 'slurm.launch': expected one of srun, torchrun, "
                                                         "got 'mpirun'"),
    ("runner: slurm\nslurm: {submit: salloc}\n", "4:17", "field 'slurm.submit': expected one of auto, sbatch, "
                                                         "step, got 'salloc'"),
    ("runner: slurm\nslurm: {time: 'soon'}\n", "4:15", "field 'slurm.time': expected a Slurm time limit (minutes, "
     "MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS or UNLIMITED), got 'soon'"),
    ("runner: slurm\nslurm: {port: 0}\n", "4:15", "field 'slurm.port': expected an integer in 1..65535 or 'auto', "
                                                  "got 0"),
    ("runner: slurm\nslurm: {sbatch_args: [--exclusive, -N2]}\n", "4:22",
     "field 'slurm.sbatch_args': '-N2': ddptui sets -N/--nodes itself (from nnodes)"),
    ("runner: slurm\nslurm: {sbatch_args: ['--time=5']}\n", "4:22",
     "field 'slurm.sbatch_args': '--time=5': ddptui sets -t/--time itself (from slurm.time)"),
    ("runner: slurm\nslurm: {srun_args: [--label]}\n", "4:20",
     "field 'slurm.srun_args': '--label': ddptui sets -l/--label itself (from ddptui (lines are read from per-rank "
     "files))"),
    ("runner: slurm\nslurm: {srun_args: [--output, x]}\n", "4:20",
     "field 'slurm.srun_args': '--output': ddptui sets -o/--output itself (from the run record (slurm/rank%t.out))"),
    ("runner: slurm\nslurm: {prtition: a}\n", "4:9", "unknown field 'slurm.prtition' (did you mean "
                                                     "'slurm.partition'?)"),
    ("runner: slurm\nslurm: {submit: sbatch, sbatch_args: [--exclusive]}\n", "4:35", None),  # valid
])
def test_field_errors(tmp_path, text, where, msg):
    path = write(tmp_path, BASE + text)
    if msg is None:
        load_profile(path)
        return
    assert str(error(path)) == f"{path}:{where}: {msg}"


def test_step_needs_an_allocation(tmp_path, monkeypatch):
    path = write(tmp_path, BASE + "runner: slurm\nslurm:\n  submit: step\n")
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert str(error(path)) == (f"{path}:5:11: field 'slurm.submit': step needs an allocation and SLURM_JOB_ID is "
                                "not set: run ddptui inside salloc/sbatch, or use submit: auto or sbatch")
    monkeypatch.setenv("SLURM_JOB_ID", "12")
    assert load_profile(path).slurm.submit == "step"
    path = write(tmp_path, BASE + "runner: slurm\nslurm:\n  submit: step\n  sbatch_args: [--exclusive]\n")
    assert str(error(path)).endswith("field 'slurm.sbatch_args': submit: step runs srun inside the allocation, "
                                     "no sbatch")


def test_workload_commands_under_slurm(tmp_path):
    base = "runner: slurm\nworkload:\n  command: "
    assert str(error(write(tmp_path, base + "[torchrun, --nproc-per-node=2, t.py]\n"))).endswith(
        "field 'workload.command': a torchrun command under the slurm runner: give the program as "
        "workload.script/module and set slurm.launch: torchrun (one agent per node)")
    assert str(error(write(tmp_path, base + "[python, t.py]\nslurm: {launch: torchrun}\n"))).endswith(
        "field 'slurm.launch': launch: torchrun starts workload.script/module under one agent per node; a "
        "workload.command runs as each rank with launch: srun")
    assert str(error(write(tmp_path, base + "[srun, -N2, python, t.py]\nslurm: {partition: x}\n"))).endswith(
        "field 'slurm.partition': workload.command is an srun command line, which chooses its own options; only "
        "slurm.port applies to it")
    assert load_profile(write(tmp_path, base + "[python, t.py]\n")).workload.command == ("python", "t.py")
    with pytest.raises(ProfileError) as info:
        adhoc_profile(["srun", "-N", "2"])
    assert str(info.value) == ("<command line>: field 'workload.command': the srun command line names no program "
                               "to run")


def test_overrides_reach_the_new_fields(tmp_path):
    path = write(tmp_path, BASE + "runner: slurm\n")
    p = load_profile(path, ["slurm.launch=torchrun", "slurm.port=29600", "nnodes=3"])
    assert (p.slurm.launch, p.slurm.port, p.nnodes) == ("torchrun", 29600, 3)
    assert str(error(path, ["slurm.nodes=3"])).startswith("--set slurm.nodes=3: field 'slurm.nodes': the counts")
    p = load_profile(write(tmp_path, BASE), ["rdzv_backend=c10d", "nnodes=2"])
    assert (p.rdzv_backend, p.world_size) == ("c10d", 4)


@pytest.mark.parametrize("argv,runner,nproc,nnodes", [
    (["srun", "-N2", "--ntasks-per-node=1", "python", "t.py"], "slurm", 1, 2),
    (["srun", "--nodes", "2", "-n", "4", "python", "t.py"], "slurm", 2, 2),
    (["srun", "-n", "3", "-N", "2", "python", "t.py"], "slurm", 3, 1),  # uneven: 3 ranks, the hellos say where
    (["srun", "-N3", "python", "t.py"], "slurm", 1, 3),  # srun's default: one task per node
    (["/usr/bin/srun", "-n2", "python", "t.py"], "slurm", 2, 1),
    (["python", "srun"], "env", 1, 1),
])
def test_adhoc_srun_picks_the_slurm_runner(argv, runner, nproc, nnodes):
    p = adhoc_profile(argv)
    assert (p.runner, p.nproc, p.nnodes, p.workload.command) == (runner, nproc, nnodes, tuple(argv))


def test_shipped_multinode_profiles_load():
    for name, runner in (("multinode-torchrun", "torchrun"), ("slurm-ddp", "slurm"), ("slurm-torchrun", "slurm"),
                         ("slurm-hang", "slurm")):
        p = load_profile(pfind.find_profile(name))
        assert p.runner == runner and p.nnodes == 2, name
    assert load_profile(pfind.find_profile("multinode-torchrun")).rdzv_backend == "c10d"
    assert load_profile(pfind.find_profile("slurm-torchrun")).slurm.launch == "torchrun"
    hang = load_profile(pfind.find_profile("slurm-hang"))
    assert hang.fault is not None and hang.fault.rank == hang.nproc  # the first rank of the second node
