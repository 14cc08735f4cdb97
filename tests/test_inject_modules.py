"""The injected code's single homes, in process: the post-import hook, the ordinal turnstile, one digest spelling."""
from __future__ import annotations

import importlib
import sys
import threading
import uuid
from pathlib import Path

import pytest

from tests.support.engine import strict_reports as reports

pytestmark = pytest.mark.main_suite("the ranks' injected code: imports torch in the test process (skipped without it)")

INJECT = Path(__file__).resolve().parents[1] / "runners" / "inject"
sys.path.insert(0, str(INJECT))
import ddptui_postimport as post  # noqa: E402
import ddptui_report  # noqa: E402
import ddptui_xla  # noqa: E402  (inert here: DDPTUI_XLA is not set)
from ddptui_turnstile import Turnstile  # noqa: E402

JOIN_S = 30  # a bound for threads that must finish, not a guess at how long they take


# ---- ddptui_postimport

@pytest.fixture
def fresh_module(tmp_path, monkeypatch):
    """A module file nobody imported yet; returns its name. Forgotten afterwards."""
    name = f"ddptui_probe_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    yield name
    sys.modules.pop(name, None)


def _finder_in_meta_path() -> bool:
    return any(type(f).__name__ == "_PostImportFinder" for f in sys.meta_path)


def test_patches_run_after_the_import_in_order_and_the_hook_leaves(fresh_module):
    seen = []
    post.when_imported(fresh_module, lambda m: seen.append(("a", m.VALUE)))
    post.when_imported(fresh_module, lambda m: seen.append(("b", m.VALUE)))
    assert seen == [] and post.pending() == {fresh_module: 2} and _finder_in_meta_path()
    mod = importlib.import_module(fresh_module)
    assert seen == [("a", 1), ("b", 1)]  # after the module's own code ran, in registration order
    assert type(mod.__loader__).__name__ != "_Loader" and mod.__spec__.loader is mod.__loader__  # the real loader
    assert post.pending() == {} and not _finder_in_meta_path()
    importlib.reload(mod)
    assert len(seen) == 2  # once: a reload is not a first import


def test_a_module_imported_before_is_patched_at_once(fresh_module):
    mod = importlib.import_module(fresh_module)
    seen = []
    cancel = post.when_imported(fresh_module, seen.append)
    assert seen == [mod] and post.pending() == {}
    cancel()  # nothing left to cancel: harmless


def test_a_cancelled_patch_never_runs(fresh_module):
    seen = []
    cancel = post.when_imported(fresh_module, seen.append)
    cancel()
    assert post.pending() == {} and not _finder_in_meta_path()
    importlib.import_module(fresh_module)
    assert seen == []


def test_a_patch_that_raises_leaves_the_import_and_the_other_patches_alone(fresh_module):
    seen = []

    def broken(module):
        raise RuntimeError("patch bug")

    post.when_imported(fresh_module, broken)
    post.when_imported(fresh_module, seen.append)
    mod = importlib.import_module(fresh_module)
    assert mod.VALUE == 1 and seen == [mod]


def test_a_module_that_does_not_exist_stays_pending_until_cancelled():
    name = f"ddptui_missing_{uuid.uuid4().hex[:8]}"
    cancel = post.when_imported(name, lambda m: None)
    with pytest.raises(ImportError):
        importlib.import_module(name)
    assert post.pending() == {name: 1}  # a later successful import would still be patched
    cancel()
    assert post.pending() == {} and not _finder_in_meta_path()


# ---- ddptui_turnstile

def _replicas(target, ordinals):
    threads = [threading.Thread(target=target, args=(n,), daemon=True) for n in ordinals]
    for t in threads:
        t.start()
    for t in threads:
        t.join(JOIN_S)
    return [t for t in threads if t.is_alive()]


def test_turns_run_in_ordinal_order_whoever_arrives_first():
    gate, log = Turnstile(), []

    def replica(n):
        for k in range(4):
            with gate.turn(n):
                log.append((n, k))
        gate.leave(n)

    assert _replicas(replica, (3, 2, 1, 0)) == []  # started highest first
    assert sorted(log) == [(n, k) for n in range(4) for k in range(4)]
    for i, (n, k) in enumerate(log):
        assert all(log.index((j, k)) < i for j in range(n)), log  # every lower ordinal had its k-th turn first


def test_a_replica_that_left_never_blocks_the_higher_ones():
    gate, turns = Turnstile(), []
    gate.leave(0)  # replica 0 returned (or raised) before its first turn

    def replica(n):
        for _ in range(3):
            with gate.turn(n):
                turns.append(n)

    try:
        assert _replicas(replica, (1,)) == []
    finally:
        gate.leave(1)
    assert turns == [1, 1, 1]


def test_a_turn_that_raised_still_ends():
    gate = Turnstile()
    with pytest.raises(RuntimeError):
        with gate.turn(0):
            raise RuntimeError("sync failed")
    done = []

    def replica(n):
        with gate.turn(n):
            done.append(n)

    try:
        assert _replicas(replica, (1,)) == []  # replica 0's first turn counted: replica 1 may take its own
    finally:
        gate.leave(0)
    assert done == [1]


# ---- one digest spelling

def _models():
    torch = pytest.importorskip("torch")

    class Wrapper(torch.nn.Module):  # named like DDP's wrapper: its parameters come out as "module.*"
        def __init__(self, inner):
            super().__init__()
            self.module = inner

    torch.manual_seed(0)
    inner = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 1, bias=False))
    return torch, inner, Wrapper(inner)


@pytest.mark.timeout(60)
def test_xla_ddp_and_first_step_digests_spell_a_parameter_alike(capfd, monkeypatch):
    torch, inner, wrapped = _models()
    monkeypatch.setenv("RANK", "7")
    expected = ddptui_report.param_digests(inner)
    assert [e[0] for e in expected] == ["0.weight", "0.bias", "1.weight"]
    assert [e[2:] for e in expected] == [[[2, 3], "torch.float32"], [[2], "torch.float32"], [[1, 2], "torch.float32"]]
    assert ddptui_report.param_digests(wrapped) == expected  # DDP's `module.` prefix is not part of the name
    ddptui_xla.digests(wrapped)  # the XLA path
    ddptui_report.digests(wrapped, source="ddp")  # the DDP path
    ddptui_report.remember_model(wrapped, "ddp")
    ddptui_report.first_step_digests(torch.optim.SGD(wrapped.parameters(), lr=0.1))  # before the first update
    xla, ddp, first = reports(capfd.readouterr().out)
    assert (xla["k"], xla["source"], ddp["source"], first["k"], first["source"]) == (
        "digest", "xla", "ddp", "first_digest", "ddp")
    assert xla["params"] == ddp["params"] == first["params"] == expected


def test_a_bfloat16_parameter_is_digested_from_its_raw_bytes():
    torch = pytest.importorskip("torch")
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0], dtype=torch.bfloat16))
    name, hexd, shape, dtype = ddptui_report.digest_entry("module.w", p)
    assert (name, shape, dtype) == ("w", [2], "torch.bfloat16")
    assert hexd == __import__("hashlib").blake2b(p.detach().view(torch.int16).numpy().tobytes(), digest_size=16).hexdigest()


# ---- one exception report

def test_an_exception_leaving_an_xla_replica_is_reported_as_an_uncaught_one_is(capfd, monkeypatch):
    monkeypatch.setenv("RANK", "3")

    def fails():
        raise ValueError("bad shape\nsecond line")

    try:
        fails()
    except ValueError as e:
        ddptui_xla.report_exception(e)  # before XLA aborts the worker
        ddptui_xla.report_exception(e)  # once per exception
        ddptui_report.exception(type(e), e, e.__traceback__)  # what sys.excepthook reports
    out, err = capfd.readouterr()
    xla, uncaught = reports(out)
    assert xla == uncaught and xla["k"] == "exc" and xla["r"] == 3 and xla["type"] == "ValueError"
    assert xla["where"].endswith(f"test_inject_modules.py:{fails.__code__.co_firstlineno + 1}")
    assert xla["tb"][-2:] == ["ValueError: bad shape", "second line"] and not any("\n" in ln for ln in xla["tb"])
    assert err.count("ValueError: bad shape") == 1  # the traceback printed once, on the replica's stderr


def test_an_xla_replica_says_hello_as_a_rank_does_with_its_own_local_index(capfd, monkeypatch):
    monkeypatch.setenv("RANK", "4")
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("LOCAL_RANK", "0")
    ddptui_report.hello()  # a process rank: from the launcher's variables
    said = []

    def replica(n):
        ddptui_xla.bind(n)  # no torch_xla here: the world size is unknown
        said.append(threading.current_thread().name)
        ddptui_xla.unbind()

    assert _replicas(replica, (6,)) == [] and said == ["xla-rank-6"]
    rank, xla = reports(capfd.readouterr().out)
    assert set(rank) == set(xla) == {"k", "r", "world", "local", "pid", "host", "node", "attempt"}
    assert rank["attempt"] == xla["attempt"] == 0  # no TORCHELASTIC_RESTART_COUNT: the first attempt
    assert (rank["world"], rank["local"]) == (8, 0) and (xla["world"], xla["local"]) == (None, 6)
    assert rank["pid"] == xla["pid"] and rank["host"] == xla["host"] and rank["node"] == xla["node"]
