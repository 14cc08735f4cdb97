"""A real c10d run of two torchrun agents: each rank's lines (stdout and stderr) are attributed to the rank its own hello
names, not to the plan's guess (c10d gives node ranks in the order the agents arrive)."""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from ddptui.runners import session as session_mod
from tests.support.engine import run_profile

pytestmark = pytest.mark.main_suite("its c10d torchrun agents run on the test's own interpreter")

FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.mark.timeout(150)
def test_every_line_goes_to_the_rank_that_printed_it(tmp_path, runs_dir, monkeypatch):
    planned = session_mod.make_plan

    def every_guess_zero(*a, **kw):
        # The plan guesses node*nproc+local rank; that guess is right whenever the agents happen to arrive in order.
        # Guessing rank 0 for every folder makes a run that trusted the guess fail every time, not half of the time.
        plan = planned(*a, **kw)
        learned = [s for s in plan.sources if s.learn_rank]
        assert learned, "the c10d plan asks for ranks to be learned"
        return dataclasses.replace(plan, sources=tuple(dataclasses.replace(s, rank=0) if s.learn_rank else s
                                                       for s in plan.sources))
    monkeypatch.setattr(session_mod, "make_plan", every_guess_zero)
    prof = tmp_path / "c10d.yaml"
    prof.write_text("name: c10d\nrunner: torchrun\nnnodes: 2\nnproc: 1\nrdzv_backend: c10d\nreplica_check: false\n"
                    f"workload:\n  script: {FIXTURES / 'ddp_says_its_rank.py'}\n")
    code, rec, session = run_profile(prof, runs_dir)
    assert code == 0, "\n".join(rec.lines(None)[-20:])
    for rank in (0, 1):
        said = [ln for ln in rec.lines(rank) if re.match(r"rank \d+ ", ln)]
        assert said, f"rank {rank} shows no line of its own"
        assert all(ln.startswith(f"rank {rank} ") for ln in said), (rank, said)
        assert {f"rank {rank} says line 2", f"rank {rank} warns line 2", f"rank {rank} sum 2"} <= set(said)
