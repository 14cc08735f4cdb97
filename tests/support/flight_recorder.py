"""Flight Recorder inputs recorded from real gloo ranks (tests/data/fr), and the run state and stacks they are judged
with."""
from __future__ import annotations

import json
from pathlib import Path

from ddptui.runners.evidence.stack_types import Frame, StackResult, ThreadStack
from ddptui.runners.judge.run_state import RunState
from ddptui.runners.launch.profile.load import load_profile

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "fr"
SP = "/venv/lib/python3.11/site-packages"


def dumps(case: str) -> dict[int, dict]:
    return {int(p.stem.split("_")[1]): json.loads(p.read_text()) for p in sorted((DATA / case).glob("rank_*.json"))}


# ---- the verdict ---------------------------------------------------------------------------------------------------
def ranks_at_step_3(world: int = 2) -> RunState:
    s = RunState(load_profile(ROOT / "profiles" / "cpu-ddp.yaml", [f"nproc={world}"]), 1000.0, 1_764_682_000.0)
    s.begin(world, 1)
    for r in range(world):
        s.tracks[r].pid, s.tracks[r].ran, s.tracks[r].step = 100 + r, True, 3
    return s


def hang_stacks() -> dict[int, StackResult]:
    """Rank 0 in DDP's bucket all-reduce (backward), rank 1 asleep in its own function: as py-spy gives them."""
    r0 = [Frame("_engine_run_backward", f"{SP}/torch/autograd/graph.py", 829, ""),
          Frame("backward", f"{SP}/torch/autograd/__init__.py", 353, ""),
          Frame("Tensor.backward", f"{SP}/torch/_tensor.py", 647, ""),
          Frame("main", "/work/hang_ddp.py", 47, "loss.backward()")]
    r1 = [Frame("culprit_wait", "/work/hang_ddp.py", 30, "time.sleep(600)  # HANG_LINE"),
          Frame("main", "/work/hang_ddp.py", 45, "culprit_wait()")]
    return {0: StackResult(0, 100, "py-spy", [ThreadStack("MainThread", 1, True, r0)]),
            1: StackResult(1, 101, "py-spy", [ThreadStack("MainThread", 2, True, r1)])}
