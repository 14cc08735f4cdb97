"""Real PyTorch/XLA runs on PJRT CPU (2 thread replicas) through the engine: attribution per ordinal, steps, replica verdicts, hang and crash diagnosis."""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from ddptui.runners import events as ev

from tests.support.engine import run_profile

ROOT = Path(__file__).resolve().parent.parent
STEPS = 6
# The shipped 8 s stall threshold is for catching hangs before XLA aborts; a finished run's worker
# takes several seconds to exit on a loaded machine, so the runs that must finish get more.
RELAXED = ("stall_after=30", f"steps={STEPS}")


def _xla_venv() -> Path | None:
    out = subprocess.run(["bash", str(ROOT / "scripts/xla-venv.sh"), "--print-path"], capture_output=True,
                         text=True, timeout=10).stdout.strip()
    return Path(out) if out and (Path(out) / ".ddptui-complete").is_file() else None


VENV = _xla_venv()
pytestmark = [
    pytest.mark.main_suite(
        "long end-to-end rank runs (the engine and dashboard under them are in the any_python set)"),
    pytest.mark.xla,
    pytest.mark.skipif(VENV is None, reason="the torch_xla venv is not built: run `make xla-venv` (scripts/xla-venv.sh)"),
]


def _venv_override():
    return f"workload.venv={VENV}"  # the hashed build itself, whatever ~/.cache/ddptui/xla-venv points at


def _run(profile, runs_dir, *extra):
    return run_profile(profile, runs_dir, [_venv_override(), *extra])


def _steps_by_rank(rec):
    out = {}
    for p in rec.of(ev.Progress):
        if p.step is not None:
            out[p.rank] = max(out.get(p.rank, 0), p.step)
    return out


def _assert_finished_identical(code, rec, session):
    assert code == 0, [e.to_json() for e in rec.events if not isinstance(e, (ev.LogLines, ev.Progress))][-6:]
    assert {h.rank for h in rec.of(ev.RankHello)} == {0, 1}
    assert len({h.pid for h in rec.of(ev.RankHello)}) == 1  # one worker process, two thread replicas
    assert _steps_by_rank(rec) == {0: STEPS, 1: STEPS}
    for r in (0, 1):
        lines = rec.lines(r)
        assert [ln for ln in lines if ln.startswith(f"[rank {r}] step ")] == [
            ln for ln in lines if re.fullmatch(rf"\[rank {r}\] step \d+ loss \d+\.\d{{4}}", ln)]
        assert len([ln for ln in lines if ln.startswith(f"[rank {r}] step ")]) == STEPS
        assert not any(ln.startswith(f"[rank {1 - r}]") for ln in lines)
    assert "Step 0, Loss: " in " ".join(rec.lines(0)) and "Step 0, Loss: " not in " ".join(rec.lines(1))
    rv = rec.one(ev.ReplicaVerdict)
    assert rv.status == "identical" and len(rv.params) == 4 and set(rv.table) == {0, 1}


@pytest.mark.timeout(150)
def test_pattern1_tags_every_replica_line_and_replicas_stay_identical(runs_dir):
    code, rec, session = _run("xla-cpu", runs_dir, *RELAXED)
    _assert_finished_identical(code, rec, session)
    # The raw file the worker wrote: every replica line tagged with its own ordinal, nothing torn.
    raw = (session.run_dir / "raw" / "xla.out").read_text().splitlines()
    for ln in raw:
        m = re.match(r"\[rank (\d)\]", ln)
        assert m is None, f"untagged replica line: {ln!r}"
        m = re.match(r"@ddptui:(\d) \[rank (\d)\] ", ln)
        if m:
            assert m.group(1) == m.group(2), ln
    assert sum(1 for ln in raw if re.match(r"@ddptui:1 \[rank 1\] step \d+ loss", ln)) == STEPS
    digests = [json.loads(ln.split(" ", 1)[1]) for ln in raw if ln.startswith('@ddptui {"k":"digest"')]
    assert sorted(d["r"] for d in digests) == [0, 1] and all(d["source"] == "xla" for d in digests)
    assert digests[0]["params"] == digests[1]["params"]
    # and before each replica's first optimizer step, named by the model it moved to the device
    first = [json.loads(ln.split(" ", 1)[1]) for ln in raw if ln.startswith('@ddptui {"k":"first_digest"')]
    assert sorted(d["r"] for d in first) == [0, 1] and all(d["source"] == "xla" for d in first)
    assert first[0]["params"] == first[1]["params"] != digests[0]["params"]
    assert [p[0] for p in first[0]["params"]] == [p[0] for p in digests[0]["params"]]
    # each replica went through its worker's import of torch (said by the process, before the replica threads
    # exist), then said it waits for its first step (XLA's first compile) as soon as it began, before any step
    for r in (0, 1):
        said = [i for i, e in enumerate(rec.events) if isinstance(e, ev.RankPhase) and e.rank == r]
        stepped = [i for i, e in enumerate(rec.events) if isinstance(e, ev.Progress) and e.rank == r]
        phases = [rec.events[i].phase for i in said]
        assert phases[0] == "importing torch" and "setting up" in phases, (r, phases)
        assert phases[-1] == "waiting for first step" and "rendezvous" not in phases, (r, phases)
        assert said[-1] < stepped[0], r
        # its samples per step: the 32 rows each step's forward took, counted by a hook on the model moved to XLA
        assert {rec.events[i].samples for i in stepped} == {32}, r


@pytest.mark.timeout(150)
def test_pattern2_ddp_over_the_xla_process_group(runs_dir):
    _assert_finished_identical(*_run("xla-ddp-backend", runs_dir, *RELAXED))


@pytest.mark.timeout(150)
def test_pattern3_mp_device_loader(runs_dir):
    _assert_finished_identical(*_run("xla-loader", runs_dir, *RELAXED))


@pytest.mark.timeout(150)
def test_diverge_fault_makes_the_replicas_differ(runs_dir):
    code, rec, _ = _run("xla-cpu", runs_dir, *RELAXED, "fault.kind=diverge", "fault.rank=1")
    rv = rec.one(ev.ReplicaVerdict)
    assert rv.status == "differ" and rv.param == "net.0.weight"
    assert rv.table[0][0] != rv.table[1][0] and rv.table[0][1:] == rv.table[1][1:]
    # the workload seeds its model: identical at the first optimizer step, so they drifted (here: after the last)
    assert "replicas drifted apart between step 1 and the end (identical at the first optimizer step)" in rv.text
    assert [h.code for h in rec.of(ev.HintRaised) if h.code.startswith("replicas-")] == ["replicas-drifted"]
    assert code != 0


@pytest.mark.timeout(150)
def test_hang_in_one_replica_stacks_name_the_sleeping_thread(runs_dir):
    # The stall must be seen before XLA aborts the worker (~10-20 s after rank 0 enters the all-reduce).
    code, rec, _ = _run("xla-cpu", runs_dir, "stall_after=5", "steps=20", "fault.kind=hang", "fault.rank=1",
                        "fault.step=3", "fault.seconds=120")
    assert rec.of(ev.StallDetected)
    stacks = rec.of(ev.StacksCollected)[0]
    threads = {t["thread"]: t for t in stacks.threads[1]}
    assert "xla-rank-1" in threads and "xla-rank-0" in threads
    assert any(f[1].endswith("_faults.py") for f in threads["xla-rank-1"]["frames"])
    assert not any(f[1].endswith("_faults.py") for f in threads["xla-rank-0"]["frames"])
    hv = rec.of(ev.HangVerdict)[0]
    assert hv.culprits == (1,) and 0 in hv.waiting and "rank 1" in hv.text
    assert "(PyTorch/XLA has no Flight Recorder: read from the stacks" in hv.text and hv.collective == {}, hv.text
    assert _steps_by_rank(rec) == {0: 3, 1: 3}
    assert code == 3


@pytest.mark.timeout(150)
def test_crash_in_one_replica_is_the_root_cause_not_the_xla_abort(runs_dir):
    code, rec, _ = _run("xla-cpu", runs_dir, "stall_after=40", "steps=20", "fault.kind=crash", "fault.rank=1",
                        "fault.step=3")
    cv = rec.one(ev.CrashVerdict)
    assert cv.root_rank == 1 and "injected crash on rank 1 at step 3" in cv.text
    assert any("RuntimeError: injected crash" in ln for ln in cv.excerpt)
    assert any("RuntimeError: injected crash" in ln for ln in rec.lines(1))  # printed before the abort, tagged
    # rank 0 waited for it in the all-reduce until XLA's termination timeout: the abort follows the root cause
    assert "; then XLA aborted after its rendezvous termination timeout in all reduce" in cv.text
    assert not rec.of(ev.StallDetected)  # a replica that raised is a crash, not a stall of the others
    assert code == 1


# ---- the reference's patterns copied unmodified, wrapped ad hoc (`ddptui --set runner=xla --set nproc=2 -- PY SCRIPT`)

FIXTURES = ROOT / "tests" / "fixtures"


def _adhoc(script, runs_dir, *overrides):
    from ddptui.runners.launch.profile.load import adhoc_profile
    from ddptui.runners.session import Session

    from tests.support.engine import Recorder

    profile = adhoc_profile([str(VENV / "bin" / "python"), str(FIXTURES / script)],
                            ["runner=xla", "nproc=2", *overrides])
    rec = Recorder()
    session = Session(profile, runs_dir, emit=rec)
    return session.run(), rec, session


def _ddp_init_deadlock(runs_dir, *overrides):
    """Run the reference pattern 2 (DDP over the xla backend on PJRT CPU thread replicas) until it deadlocks.

    Now and then torch_xla's CPU runtime segfaults in DDP's parameter-shape all_gather instead of deadlocking in it
    (both replicas enter it at once; seen once in about ten runs here): then the deadlock these tests are about
    did not happen, so the run is made once more, and the test is skipped, saying why, if it segfaults again."""
    for attempt in (1, 2):
        code, rec, session = _adhoc("xla_reference_pattern2.py", runs_dir / f"try{attempt}", *overrides)
        segv = _xla_line(rec, "Fatal Python error: Segmentation fault")
        if not (segv is not None and not rec.of(ev.StallDetected)):
            return code, rec, session
    pytest.skip("torch_xla segfaulted in DDP's parameter-shape all_gather twice instead of deadlocking in it "
                "(a race in its CPU runtime): the XLA stall path was not exercised")


def _index(rec, pred) -> int | None:
    return next((i for i, e in enumerate(rec.events) if pred(e)), None)


def _xla_line(rec, text) -> int | None:
    return _index(rec, lambda e: isinstance(e, ev.LogLines) and e.rank is None and any(text in ln for ln in e.lines))


def _assert_ddp_init_stall_called_from_xla_evidence(rec):
    stall = rec.one(ev.StallDetected)
    assert stall.stalled == (0, 1) and "XLA warns that all gather" in stall.reason
    hv = rec.of(ev.HangVerdict)[0]
    assert hv.text.startswith("XLA collective stall in all gather"), hv.text
    assert "each waits on its own rendezvous key" in hv.text and "lost peer" not in hv.text
    for r in (0, 1):  # where each replica waits: DDP's constructor, in the user's line 25
        assert (f"rank {r} in parameter shape check across ranks (DDP init) (_verify_param_shape_across_processes) "
                "at xla_reference_pattern2.py:25") in hv.text
    assert hv.waiting == (0, 1) and hv.culprits == ()
    # the stacks were taken before XLA aborted the worker (the warning came 10 s before the abort)
    stacks = _index(rec, lambda e: isinstance(e, ev.StacksCollected))
    abort = _xla_line(rec, "Termination timeout")
    assert stacks is not None and (abort is None or stacks < abort)
    names = {t["thread"] for t in rec.of(ev.StacksCollected)[0].threads[0]}
    assert {"xla-rank-0", "xla-rank-1"} <= names
    hint = [h for h in rec.of(ev.HintRaised) if h.code == "xla-ddp-thread-collectives"]
    assert len(hint) == 1 and "init_sync=False" in hint[0].fix and "xla-ddp-backend" in hint[0].fix
    assert not [h for h in rec.of(ev.HintRaised) if h.code == "xla-rendezvous-deadlock"]  # that recipe is applied


# Under load the worker takes up to ~50 s to reach DDP's constructor: a startup grace above that lets XLA's own
# evidence call the stall (the case the issue reports), not the generic "no step for 60 s" rule.
@pytest.mark.timeout(500)
def test_reference_pattern2_ddp_init_deadlock_is_an_xla_stall_in_all_gather(runs_dir):
    code, rec, _ = _ddp_init_deadlock(runs_dir, "startup_grace=300")
    _assert_ddp_init_stall_called_from_xla_evidence(rec)
    assert code == 3  # on_stall: stop, before XLA's abort
    assert not rec.of(ev.CrashVerdict)
    # both thread replicas ran (each said hello; they share the worker's pid) and ddptui's own SIGTERM ended them
    assert {h.rank for h in rec.of(ev.RankHello)} == {0, 1}
    summary = rec.one(ev.RunFinished).summary
    for r in (0, 1):
        info = summary["ranks"].get(r) or summary["ranks"][str(r)]
        assert (info["status"], info["outcome"]) == ("killed", "stopped by ddptui after the stall"), summary["ranks"]


@pytest.mark.timeout(500)
def test_reference_pattern2_xla_abort_is_named_not_stopped_by_the_launcher(runs_dir):
    code, rec, session = _ddp_init_deadlock(runs_dir, "startup_grace=300", "on_stall=dump")
    _assert_ddp_init_stall_called_from_xla_evidence(rec)
    cv = rec.one(ev.CrashVerdict)
    assert cv.text.startswith("XLA aborted after its rendezvous termination timeout in all gather"), cv.text
    assert cv.exit == "SIGABRT" and any("Termination timeout" in ln for ln in cv.excerpt)
    assert _index(rec, lambda e: isinstance(e, ev.HangVerdict)) < _index(rec, lambda e: isinstance(e, ev.CrashVerdict))
    summary = rec.one(ev.RunFinished).summary
    for r in ("0", "1"):
        info = summary["ranks"].get(r) or summary["ranks"][int(r)]
        assert info["status"] == "failed" and info["signal"] == "SIGABRT"
        assert info["outcome"] == "XLA aborted after its rendezvous termination timeout"
    assert code == 1


@pytest.mark.timeout(400)
def test_reference_pattern1_unseeded_replicas_differed_from_the_first_step(runs_dir):
    code, rec, _ = _adhoc("xla_reference_pattern1.py", runs_dir, "startup_grace=300")
    rv = rec.one(ev.ReplicaVerdict)
    assert rv.status == "differ" and rv.param == "net.0.weight"
    assert ("replicas differed from the first step (initial weights differ: no seed / no broadcast; 'net.0.weight' "
            "already differed at the first optimizer step") in rv.text
    assert "fix: xm.broadcast_master_param(model) after building it, or torch.manual_seed(S) before" in rv.text
    assert [h.code for h in rec.of(ev.HintRaised) if h.code.startswith("replicas-")] == ["replicas-differ-from-start-xla"]
    assert code == 4


# ---- one digest spelling: replica verdicts compare parameter names, whichever path reported them

def _raw_reports(path: Path, kind: str) -> dict[int, dict]:
    lines = [ln.split(" ", 1)[1] for ln in path.read_text().splitlines() if ln.startswith(f'@ddptui {{"k":"{kind}"')]
    return {d["r"]: d for d in map(json.loads, lines)}


@pytest.mark.timeout(400)
def test_xla_and_ddp_paths_digest_the_same_model_alike(runs_dir):
    import sys

    from ddptui.runners.launch.profile.load import adhoc_profile
    from ddptui.runners.session import Session

    from tests.support.engine import Recorder

    code, rec, xla = _adhoc("xla_seeded_model_one_step.py", runs_dir, "startup_grace=300")
    assert code == 0, [e.to_json() for e in rec.events if not isinstance(e, (ev.LogLines, ev.Progress))][-6:]
    ddp_rec = Recorder()
    ddp = Session(adhoc_profile([sys.executable, str(FIXTURES / "ddp_seeded_model_one_step.py")],
                                ["runner=env", "nproc=2"]), runs_dir, emit=ddp_rec)
    assert ddp.run() == 0
    x_first, x_end = (_raw_reports(xla.run_dir / "raw" / "xla.out", k) for k in ("first_digest", "digest"))
    d_first = {**_raw_reports(ddp.run_dir / "raw" / "rank0.out", "first_digest"),
               **_raw_reports(ddp.run_dir / "raw" / "rank1.out", "first_digest")}
    d_end = {**_raw_reports(ddp.run_dir / "raw" / "rank0.out", "digest"),
             **_raw_reports(ddp.run_dir / "raw" / "rank1.out", "digest")}
    assert set(x_first) == set(x_end) == set(d_first) == set(d_end) == {0, 1}
    assert {d["source"] for d in x_end.values()} == {"xla"} and {d["source"] for d in d_end.values()} == {"ddp"}
    for r in (0, 1):
        # the same seeded weights before the first update: same names, bytes, shapes and dtype spelling
        assert x_first[r]["params"] == d_first[r]["params"], (x_first[r], d_first[r])
        # after the update (XLA and eager CPU may round differently): same names, shapes and dtypes
        assert [p[:1] + p[2:] for p in x_end[r]["params"]] == [p[:1] + p[2:] for p in d_end[r]["params"]]
    assert [p[0] for p in d_end[0]["params"]] == ["0.weight", "0.bias", "2.weight", "2.bias"]  # DDP's `module.` stripped
    assert d_end[0]["params"][0][2:] == [[16, 8], "torch.float32"]
    for r in (rec, ddp_rec):
        rv = r.one(ev.ReplicaVerdict)
        assert rv.status == "identical" and rv.params == ("0.weight", "0.bias", "2.weight", "2.bias")
