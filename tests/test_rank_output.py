"""A plain program's output under ddptui is its own: its rank logs, and the lines the panes show, hold exactly what it
printed (ddptui's `@ddptui` reports taken out, no line of ddptui's own machinery such as torch's debug server added)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ddptui.runners import events as ev
from tests.support.engine import run_profile

pytestmark = pytest.mark.main_suite(
    "a plain program's ranks under ddptui, and torch's debug server started on the test's own interpreter")

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "prints_known_lines.py"
INJECT = Path(__file__).resolve().parents[1] / "runners" / "inject"


def printed(rank: int) -> dict[str, list[str]]:
    """What prints_known_lines.py writes on each stream, as plain torchrun shows it."""
    return {"out": [f"rank {rank} step {s}" for s in range(1, 6)] + [f"rank {rank} done"],
            "err": [f"INFO train: rank {rank} ready",
                    f"{FIXTURE}:15: UserWarning: rank {rank} user warning",
                    '  warnings.warn(f"rank {rank} user warning")',
                    f"rank {rank} err line"]}


@pytest.mark.timeout(150)
def test_a_plain_programs_rank_logs_hold_exactly_what_it_printed(runs_dir, tmp_path):
    path = tmp_path / "plain.yaml"
    path.write_text(f"name: plain\nrunner: torchrun\nnproc: 2\nworkload: {{script: {FIXTURE}}}\n"
                    "timeout: 100\nstartup_grace: 90\nstall_after: 60\n")
    code, rec, session = run_profile(path, runs_dir)
    assert code == 0, rec.lines(0)[-20:]
    assert rec.of(ev.DebugServer), "the debug server must still start (it is what was kept quiet)"
    for r in (0, 1):
        want = printed(r)
        logged = {"out": [], "err": []}
        for line in (session.run_dir / f"rank{r}.log").read_text().splitlines():
            _, stream, text = line.split(" ", 2)
            logged[stream].append(text)
        assert logged == want, f"rank{r}.log"
        shown = {"out": [], "err": []}
        for e in rec.of(ev.LogLines):
            if e.rank == r:
                shown[e.stream] += list(e.lines)
        assert shown == want, f"rank {r}'s pane"


@pytest.mark.timeout(120)
def test_the_debug_servers_warning_is_kept_out_and_cpp_warnings_come_back_after_it(tmp_path):
    """c10_quiet raises c10's log level for the server's start only: after it the level is as it was (the default,
    or what the user chose: TORCH_CPP_LOG_LEVEL=INFO is 0, FATAL 3), and a C++ warning after it is printed."""
    code = f"""
import os, sys
sys.path.insert(0, {str(INJECT)!r})
import torch
from torch._C._distributed_c10d import _WorkerServer
import ddptui_fr
level = ddptui_fr._c10_log_level()
servers = []
for i, user in enumerate((None, 0, 3)):
    if user is not None:
        level.value = user
    before = level.value
    with ddptui_fr.c10_quiet():
        inside = level.value
        servers.append(_WorkerServer(os.path.join({str(tmp_path)!r}, f"quiet{{i}}.sock")))
    print(before, inside, level.value, flush=True)
level.value = 1
servers.append(_WorkerServer(os.path.join({str(tmp_path)!r}, "loud.sock")))
for s in servers:
    s.shutdown()
sys.stderr.flush()
os._exit(0)
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DDPTUI", "TORCH_CPP_LOG_LEVEL"))}
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=100)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.splitlines() == ["1 2 1", "0 2 0", "3 3 3"], p.stdout
    assert "quiet" not in p.stderr
    assert f"Server listening to UNIX {tmp_path / 'loud.sock'}" in p.stderr, p.stderr
