"""Flight Recorder diagnosis end to end (issue 14): plain PyTorch programs that hang or fail in a collective, run by the
real CLI on real gloo ranks; the verdict in the console, summary.json and the record names the collective, its
sequence number, the op(s) and sizes, the culprit rank and its own line, and the record keeps one dump per rank."""
from __future__ import annotations

import ast
import json
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ddptui.runners.session import EXIT_FAILED, EXIT_STALLED

pytestmark = pytest.mark.main_suite(
    "long end-to-end rank runs (the engine and dashboard under them are in the any_python set)")

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def _line(script: str, marker: str) -> int:
    return next(i for i, ln in enumerate((FIXTURES / script).read_text().splitlines(), 1) if marker in ln)


def _profile(tmp_path: Path, script: str, nproc: int = 2) -> Path:
    body = {"name": Path(script).stem.replace("_", "-"), "runner": "torchrun", "nproc": nproc, "backend": "gloo",
            "stall_after": 3, "on_stall": "stop", "timeout": 150}
    text = "\n".join(f"{k}: {v}" for k, v in body.items()) + f"\nworkload:\n  script: {FIXTURES / script}\n"
    path = tmp_path / f"{body['name']}.yaml"
    path.write_text(text)
    return path


def _run(tmp_path: Path, runs_dir: Path, script: str, nproc: int = 2, expect: int = EXIT_STALLED):
    """The script under `ddptui PROFILE --no-ui`: (stdout lines, the run record, summary.json, the hang_verdict event)."""
    p = subprocess.run([sys.executable, "-m", "ddptui.tui.cli", "--runs-dir", str(runs_dir),
                        str(_profile(tmp_path, script, nproc)), "--no-ui"],
                       cwd=ROOT, capture_output=True, text=True, timeout=170)
    assert p.returncode == expect, p.stdout[-4000:] + p.stderr[-2000:]
    (run,) = runs_dir.iterdir()
    summary = json.loads((run / "summary.json").read_text())
    events = [json.loads(ln) for ln in (run / "events.jsonl").read_text().splitlines() if ln.strip()]
    verdicts = [e for e in events if e["kind"] == "hang_verdict"]
    return p.stdout.splitlines(), run, summary, (verdicts[0] if verdicts else None)


def _dumps(run: Path, world: int) -> dict[int, dict]:
    """The Flight Recorder dump of every rank as the record keeps it: stacks/01-stall/fr/rank_<R>, a pickle in the
    format PyTorch's own analyzer (torchfrtrace --prefix rank_) reads."""
    folder = run / "stacks" / "01-stall" / "fr"
    assert sorted(p.name for p in folder.iterdir()) == [f"rank_{r}" for r in range(world)], list(folder.iterdir())
    out = {}
    for r in range(world):
        with open(folder / f"rank_{r}", "rb") as f:
            dump = pickle.load(f)
        assert {"version", "pg_config", "entries"} <= set(dump), sorted(dump)
        out[r] = dump
    return out


def _op(entry: dict) -> str:
    return entry["profiling_name"].split(":", 1)[-1]


def _pg_of(dump: dict, ranks: list[int]) -> str:
    """The name of the process group of exactly these ranks in a dump's pg_config."""
    for name, cfg in dump["pg_config"].items():
        got = cfg["ranks"] if isinstance(cfg["ranks"], list) else ast.literal_eval(cfg["ranks"])
        if sorted(int(x) for x in got) == ranks:
            return name
    raise AssertionError(f"no group of ranks {ranks} in {dump['pg_config']}")


def _last(dump: dict, pg: str | None = None) -> dict:
    """A rank's newest entry (in group pg when given)."""
    entries = [e for e in dump["entries"] if pg is None or e["process_group"][0] == pg]
    return max(entries, key=lambda e: e["collective_seq_id"])


def _verdict_lines(out: list[str], text: str) -> list[str]:
    return [ln for ln in out if "[stall]" in ln and text in ln]


@pytest.mark.timeout(180)
def test_rank_conditional_barrier_is_named_as_the_collective_the_ranks_disagree_on(tmp_path, runs_dir):
    script = "rank_conditional_barrier.py"
    barrier = _line(script, "# RANK0_BARRIER")
    out, run, summary, hv = _run(tmp_path, runs_dir, script)
    fr = _dumps(run, 2)
    # what Flight Recorder saw: the same sequence number holds rank 0's barrier and rank 1's next DDP all_reduce
    last0, last1 = _last(fr[0]), _last(fr[1])
    assert _op(last0) == "barrier" and _op(last1) == "all_reduce", (last0, last1)
    seq = last0["collective_seq_id"]
    assert last1["collective_seq_id"] == seq
    assert hv is not None, out[-40:]
    coll = hv["collective"]
    assert coll["kind"] == "op mismatch" and int(coll["seq"]) == seq, coll
    text = hv["text"]
    assert f"#{seq}" in text and "barrier" in text and "all_reduce" in text, text
    # two ranks, two different calls: no majority says which one is wrong, so the verdict names both, each with the
    # line of the program that made the call (the rank-conditional barrier is the bug here)
    backward = _line(script, "loss.backward()")
    assert set(hv["culprits"]) | set(hv["waiting"]) == {0, 1}, hv
    assert "rank 0" in text and "rank 1" in text, text
    assert f"{script}:{barrier}" in text and f"{script}:{backward}" in text, text
    assert summary["status"] == "stalled" and summary["hang"]["text"] == text
    assert summary["hang"]["collective"] == coll
    assert _verdict_lines(out, text), out[-40:]
    assert (run / "stacks" / "01-stall" / "verdict.txt").read_text().strip().startswith(text)
    # issue 23 item 9: the fix line, from the same evidence, wherever the verdict is said
    fix = hv["fix"]
    assert fix.startswith(f"every rank must call the same collectives in the same order; the barrier at {script}:"
                          f"{barrier} runs on rank 0 only (collective #{seq} in the default group), while rank 1 is in "
                          f"all_reduce inside backward (DDP bucket all-reduce) at {script}:{backward}"), fix
    assert summary["hang"]["fix"] == fix and f"    fix: {fix}" in out and f"  fix: {fix}" in out
    assert f"fix: {fix}" in (run / "stacks" / "01-stall" / "verdict.txt").read_text()
    # item 10: after the stall, one sentence for the replicas
    assert summary["replica"]["text"] == ("replicas not compared: the ranks were stopped before they reported their "
                                          "weights (a rank reports them when it exits on its own)")
    # the dashboard of the record: the Collectives tab says the banner's mismatch and marks both sides
    import asyncio
    from tests.support.replay import replayed_views
    views = asyncio.run(replayed_views(run))
    assert f"fix: {fix[:60]}" in views["banner"], views["banner"]
    assert views["collectives"].startswith(f"OP MISMATCH: ranks disagree at collective #{seq}"), views["collectives"]
    assert "no laggard" not in views["collectives"] and f"fix: {fix}" in views["collectives"]
    assert {k[0]: state for k, (text, state) in views["coll_rows"].items()} == {0: "mismatch", 1: "mismatch"}
    assert not views["replica_heading"] and "replicas not compared" in views["verdict"]


@pytest.mark.timeout(180)
def test_a_rank_that_skipped_one_all_reduce_is_one_ahead_at_the_final_barrier(tmp_path, runs_dir):
    """gloo lets rank 1's all_reduces pair with rank 0's older ones (same size: no error, wrong sums); only the final
    barrier meets rank 0's last all_reduce, and there both wait for ever."""
    script = "skip_one_allreduce.py"
    final, allreduce = _line(script, "# FINAL_BARRIER"), _line(script, "# ALLREDUCE_HERE")
    out, run, summary, hv = _run(tmp_path, runs_dir, script)
    fr = _dumps(run, 2)
    last0, last1 = _last(fr[0]), _last(fr[1])
    assert (_op(last0), _op(last1)) == ("all_reduce", "barrier"), (last0, last1)
    seq = last0["collective_seq_id"]
    assert last1["collective_seq_id"] == seq
    assert last0["input_sizes"] == [[33]], last0  # Linear(32, 1): 32 weights and a bias, flattened
    all_reduces = {r: sum(_op(e) == "all_reduce" for e in fr[r]["entries"]) for r in (0, 1)}
    assert all_reduces[0] == all_reduces[1] + 1, all_reduces
    assert hv is not None, out[-40:]
    coll = hv["collective"]
    assert coll["kind"] == "op mismatch" and int(coll["seq"]) == seq, coll
    text = hv["text"]
    assert f"#{seq}" in text and "barrier" in text and "all_reduce" in text and "33" in text, text
    assert 1 in hv["culprits"], hv
    assert "rank 1" in text and f"{script}:{final}" in text, text
    assert hv["where"]["0"]["line"] == allreduce, hv["where"]
    assert summary["hang"]["text"] == text and summary["hang"]["collective"] == coll
    assert _verdict_lines(out, text), out[-40:]


@pytest.mark.timeout(200)
def test_a_hang_inside_a_subgroup_names_the_group_and_the_rank_missing_from_it(tmp_path, runs_dir):
    """World 4, pair groups [0, 1] and [2, 3]: rank 1 skips its pair's all_reduce at step 5, so rank 0 waits in group
    [0, 1] while ranks 1, 2 and 3 wait in the default group for rank 0: the missing rank is 1, in group [0, 1]."""
    script = "subgroup_hang.py"
    world_line, pair_line = _line(script, "# WORLD_ALLREDUCE"), _line(script, "# PAIR_ALLREDUCE")
    out, run, summary, hv = _run(tmp_path, runs_dir, script, nproc=4)
    fr = _dumps(run, 4)
    pair = _pg_of(fr[0], [0, 1])
    stuck = _last(fr[0], pair)
    seq = stuck["collective_seq_id"]
    assert _op(stuck) == "all_reduce" and stuck["input_sizes"] == [[64]], stuck
    assert _last(fr[1], pair)["collective_seq_id"] == seq - 1  # rank 1 never entered it
    assert hv is not None, out[-40:]
    coll = hv["collective"]
    assert coll["kind"] == "missing" and int(coll["seq"]) == seq, coll
    text = hv["text"]
    assert f"#{seq}" in text and "all_reduce" in text and "64" in text, text
    assert str(coll["pg"]) == pair, coll
    assert re.search(r"\[0, 1\]|ranks 0, 1\b|ranks 0 and 1|group " + re.escape(pair) + r"\b", text), text
    assert hv["culprits"] == [1], hv
    assert "rank 1" in text and f"{script}:{world_line}" in text, text
    assert hv["where"]["0"]["line"] == pair_line, hv["where"]
    assert summary["hang"]["text"] == text and summary["hang"]["collective"] == coll
    assert _verdict_lines(out, text), out[-40:]


@pytest.mark.timeout(150)
def test_all_reduce_of_different_sizes_aborts_in_gloo_and_the_crash_says_so(tmp_path, runs_dir):
    """gloo does not hang on a size mismatch: the rank that receives more than its own tensor holds (rank 1: 1000
    elements, its peer sends 1024) dies in gloo's enforce (SIGABRT, `1024 vs 1000. Received data size doesn't match
    expected size`), the other one then reads `Connection reset by peer`. The crash verdict carries gloo's words."""
    script = "allreduce_size_differs.py"
    out, run, summary, hv = _run(tmp_path, runs_dir, script, expect=EXIT_FAILED)
    assert hv is None
    crash = summary["crash"]
    assert crash["root_rank"] == 1, crash
    text = crash["text"]
    assert "1024 vs 1000" in text and "Received data size doesn't match expected size" in text, text
    assert f"{script}:{_line(script, '# ALLREDUCE_HERE')}" in text, text
    assert any("[crash]" in ln and "1024 vs 1000" in ln for ln in out), out[-40:]
