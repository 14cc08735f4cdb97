"""Shared fixtures: the repo on sys.path, a run folder per test, the check that no process outlives a test, and the
session's real Slurm clusters (tests/support/slurm_cluster.py)."""
from __future__ import annotations

import os
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from tests.support.wait import WaitTimeout, wait_until

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# Every process started under this pytest run inherits the token, so leftovers are found even when orphaned.
TOKEN = os.environ.setdefault("DDPTUI_TEST_TOKEN", uuid.uuid4().hex)


@pytest.fixture(autouse=True)
def own_interpreter_default(request, monkeypatch):
    """Tests of what a profile naming no interpreter gets (ddptui's own; marker own_interpreter) run without the
    caller's DDPTUI_PYTHON."""
    if request.node.get_closest_marker("own_interpreter") is not None:
        monkeypatch.delenv("DDPTUI_PYTHON", raising=False)


# The session's Slurm clusters that are up: their daemons carry no token (they are the fixtures', stopped at session
# end), but a job step one of them still runs after a test is that test's leftover, like a rank.
CLUSTERS: list = []


def leftover_processes() -> list[psutil.Process]:
    me = os.getpid()
    out = []
    for cluster in CLUSTERS:
        for pid in cluster.steps_left():
            try:
                out.append(psutil.Process(pid))
            except psutil.Error:
                continue
    for p in psutil.process_iter(["pid"]):
        if p.pid == me:
            continue
        try:
            if p.environ().get("DDPTUI_TEST_TOKEN") == TOKEN and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.Error:
            continue
    return out


@pytest.fixture(autouse=True)
def no_process_left_behind():
    yield
    try:
        wait_until(lambda: not leftover_processes(), 5.0, "the test's processes to end")
        left = []
    except WaitTimeout:
        left = leftover_processes()
    if left:
        desc = [f"{p.pid} {' '.join(p.cmdline())[:120]}" for p in left if p.is_running()]
        for cluster in CLUSTERS:  # a leftover job ends through Slurm: its steps are the cluster's, not ours to kill
            cluster.cancel_all()
        for p in left:
            try:
                if p.name() != "slurmstepd":
                    p.kill()
            except psutil.Error:
                pass
        if desc:
            pytest.fail("processes left behind: " + "; ".join(desc))


@pytest.fixture(scope="session")
def shared_run(tmp_path_factory):
    """shared_run(profile, overrides) -> (code, recorder, session): one run of it for every test that reads it."""
    from tests.support.engine import SharedRuns

    return SharedRuns(tmp_path_factory.mktemp("shared-runs")).get


@pytest.fixture
def runs_dir(tmp_path) -> Path:
    d = tmp_path / "runs"
    d.mkdir()
    return d


STANDIN_MIRAGE = Path(__file__).resolve().parent / "support" / "standin_mirage.py"


@pytest.fixture
def mirage_on_path(tmp_path, monkeypatch):
    """The stand-in mirage on PATH as `mirage`, as a user's installed one would be."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "mirage"
    exe.write_text(f"#!/bin/sh\nexec {sys.executable} {STANDIN_MIRAGE} \"$@\"\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    return exe


@pytest.fixture
def utc():
    """The rank logs carry local wall times; replay them in the zone they were recorded in."""
    old = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    yield
    if old is None:
        os.environ.pop("TZ", None)
    else:
        os.environ["TZ"] = old
    time.tzset()


def _cluster(namespaced: bool):
    from tests.support.netns import NamespacesUnavailable
    from tests.support.slurm_cluster import SlurmCluster, cannot_run, sweep_orphans

    why = cannot_run(namespaced)
    if why:
        pytest.skip(why)
    for what in sweep_orphans():  # left by a session killed before its finalizers ran
        print(f"ended an orphaned test Slurm {what}")
    cluster = SlurmCluster(namespaced=namespaced)
    try:
        try:
            cluster.start()
        except NamespacesUnavailable as e:
            pytest.skip(str(e))
        CLUSTERS.append(cluster)
        yield cluster
    finally:
        if cluster in CLUSTERS:
            CLUSTERS.remove(cluster)
        cluster.stop()
        cluster.remove_root()


@pytest.fixture(scope="session")
def slurm_cluster():
    """A real Slurm cluster on this host for the whole session: nodes n1, n2 (NodeAddr 127.0.0.1, %N = host name)."""
    yield from _cluster(namespaced=False)


@pytest.fixture(scope="session")
def slurm_hosts():
    """A real Slurm cluster on two namespaced hosts node0 (slurmctld, the login node) and node1, for the session."""
    yield from _cluster(namespaced=True)


def _no_job_left(cluster) -> None:
    try:
        cluster.wait_no_jobs(timeout=15)
    except WaitTimeout:
        jobs, steps = cluster.jobs(), cluster.steps_left()
        cluster.cancel_all()
        cluster.wait_no_jobs(timeout=15)
        pytest.fail(f"left behind by the test: Slurm jobs {jobs}, slurmstepd pids {steps} (cancelled)")


@pytest.fixture
def slurm_clean(slurm_cluster):
    """The single-host cluster; after the test, no job left in squeue and no job step left (else the test fails)."""
    yield slurm_cluster
    _no_job_left(slurm_cluster)


@pytest.fixture
def slurm_hosts_clean(slurm_hosts):
    """The namespaced cluster; after the test, no job left in squeue and no job step left (else the test fails)."""
    yield slurm_hosts
    _no_job_left(slurm_hosts)
