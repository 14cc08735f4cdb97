"""Many ranks under Linux's usual open-file limit: the engine and a viewer raise their soft limit to what their ranks
take, and an engine whose hard limit is too low refuses the run in one line before any rank starts."""
from __future__ import annotations

import json
import resource
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ddptui.runners.edge import open_files
from ddptui.runners.edge.record import RunRecord

pytestmark = pytest.mark.any_python

ROOT = Path(__file__).resolve().parents[1]
INF = resource.RLIM_INFINITY

PRINTER = """
import os, time
rank = int(os.environ["RANK"])
for i in range(3):
    print(f"rank {rank} says {i}", flush=True)
    time.sleep(0.1)
"""


@pytest.mark.parametrize("soft, hard, want, got", [
    (1024, 524288, 4352, 4352),  # raised to what is wanted
    (1024, 2048, 4352, 2048),  # as far as the hard limit lets it
    (8192, 524288, 4352, None),  # never lowered
    (INF, INF, 4352, None),
    (1024, INF, 4352, 4352),
    (2048, 2048, 4352, None),  # nothing to gain
])
def test_the_soft_limit_is_raised_toward_the_need_never_lowered_never_past_the_hard_one(soft, hard, want, got):
    assert open_files.raised_soft(soft, hard, want) == got


def test_the_need_and_the_line_that_says_it_is_not_met():
    assert open_files.needed(1024) == 1024 * open_files.ENGINE_FILES_PER_RANK + open_files.SPARE
    assert open_files.too_few(16, open_files.needed(16)) is None and open_files.too_few(16, INF) is None
    why = open_files.too_few(1024, 1024)
    assert why is not None and "1024 ranks here need about 4352 open files" in why and "1024" in why and "\n" not in why


def _ddptui_under(limit: str, tmp_path: Path, ranks: int) -> subprocess.CompletedProcess:
    script = tmp_path / "printer.py"
    script.write_text(PRINTER)
    argv = [sys.executable, "-m", "ddptui.tui.cli", "--runs-dir", str(tmp_path / "runs"), "--no-ui",
            "--set", f"nproc={ranks}", "--set", f"max_world_size={ranks}", "--", sys.executable, str(script)]
    shell = f"{limit} && exec " + " ".join(f"'{a}'" for a in argv)
    return subprocess.run(["bash", "-c", shell], cwd=ROOT, capture_output=True, text=True, timeout=150,
                          start_new_session=True)


@pytest.mark.timeout(180)
def test_a_run_of_more_ranks_than_the_soft_limit_holds_runs_to_the_end(tmp_path):
    """24 ranks spawned env:// style take ~96 files in the engine (their two output files, record log and pidfd
    each): under a soft limit of 64 the engine failed part way with EMFILE (`cannot start rank17`; under torchrun,
    a traceback from psutil with 80 ranks under 200); it now raises its soft limit first."""
    p = _ddptui_under("ulimit -Sn 64", tmp_path, 24)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    for r in range(24):
        assert f"[rank {r}] rank {r} says 2" in p.stdout, p.stdout[-3000:]
    assert "Too many open files" not in p.stdout + p.stderr


@pytest.mark.timeout(120)
def test_a_hard_limit_too_low_for_the_ranks_is_one_line_before_any_rank_starts(tmp_path):
    p = _ddptui_under("ulimit -n 64", tmp_path, 24)
    assert p.returncode == 2, p.stdout[-3000:] + p.stderr[-3000:]
    lines = [x for x in p.stdout.splitlines() if "preflight error" in x]
    assert len(lines) == 1 and "24 ranks here need about 352 open files" in lines[0], p.stdout[-3000:]
    assert "ulimit -Hn" in lines[0] and "Traceback" not in p.stdout + p.stderr
    assert "says 0" not in p.stdout  # no rank ran


VIEWER = """
import json, resource, sys
from ddptui.tui.follow import RecordReader
_, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))
reader = RecordReader(sys.argv[1])
ranks = sorted({e.rank for e in reader.read() if e.kind == "log_lines"})
print(json.dumps({"ranks": len(ranks), "kept_open": sum(t.fd is not None for t in reader.logs.values()),
                  "soft": resource.getrlimit(resource.RLIMIT_NOFILE)[0]}))
"""


@pytest.mark.timeout(60)
def test_a_viewer_of_more_rank_logs_than_its_soft_limit_holds_keeps_them_all_open(tmp_path):
    """A viewer reads every rank log each turn: one call a log kept open, three for a log opened anew."""
    record = RunRecord(tmp_path)
    for r in range(100):
        record.lines(r, "out", time.time(), [f"rank {r} line"])
    record.close()
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(VIEWER), str(tmp_path)], capture_output=True, text=True,
                       timeout=50)
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    assert got["ranks"] == 100 and got["kept_open"] == 100 and got["soft"] > 64, got
