"""Live collective progress from real gloo ranks through the real engine: the ranks' Flight Recorder reports become
CollectiveProgress events naming the laggard, and they never keep a hung run's stall clock from running."""
from __future__ import annotations

import pytest

from ddptui.runners import events as ev
from ddptui.runners.launch.profile.load import load_profile
from ddptui.runners.session import Session

from tests.support.engine import PROFILES, Recorder

pytestmark = pytest.mark.main_suite(
    "long end-to-end rank runs (the engine and dashboard under them are in the any_python set)")


class StallSnapshot(Recorder):
    """Keeps every event, and each rank's last sign of life as the judge held it when the stall was declared."""

    session: Session | None = None
    at_stall: dict | None = None

    def __call__(self, batch) -> None:
        if self.at_stall is None and any(isinstance(e, ev.StallDetected) for e in batch):
            self.at_stall = {r: t.last_progress_wall for r, t in self.session.judge.tracks.items()}
        super().__call__(batch)


@pytest.mark.timeout(120)
def test_a_hung_run_names_the_laggard_live_and_its_ranks_collective_reports_do_not_hold_the_stall_off(tmp_path):
    """hang profile: rank 1 sleeps before its backward at step 10, rank 0 waits in DDP's all_reduce. Rank 0's
    collectives thread reports that all_reduce pending 2-4 s later (after its last line): that report names rank 1
    the laggard, and is no output: each rank's stall clock still stands at its own last line or step."""
    profile = load_profile(PROFILES / "hang.yaml", ["stall_after=10", "on_stall=stop"])
    rec = StallSnapshot()
    rec.session = session = Session(profile, tmp_path / "runs", emit=rec)
    assert session.run() == 3
    stall_i = next(i for i, e in enumerate(rec.events) if isinstance(e, ev.StallDetected))
    before = rec.events[:stall_i]
    lagged = [e for e in before if isinstance(e, ev.CollectiveProgress) and e.laggards == (1,)]
    assert lagged, "no CollectiveProgress named rank 1 before the stall"
    waits = lagged[0].by_rank[0]["0"]
    assert waits["frontier"]["op"] == "all_reduce" and waits["enqueued"] > waits["completed"]
    assert lagged[0].by_rank[0]["0"]["ranks"] == [0, 1]
    for r in (0, 1):
        last = max(e.wall for e in before if isinstance(e, (ev.LogLines, ev.Progress)) and e.rank == r)
        assert rec.at_stall[r] == last, f"rank {r}'s stall clock moved past its last output"
    assert rec.at_stall[0] < lagged[0].wall  # the report that named the laggard came after rank 0's last output
    # the record keeps them (events.jsonl): a replay folds them into the dashboard's model as the live run had them
    import json

    from ddptui.runners.evidence.eventcheck import problem
    from ddptui.tui.model import RunModel
    m = RunModel()
    for ln in (session.run_dir / "events.jsonl").read_text().splitlines():
        e = ev.from_json(json.loads(ln))
        assert problem(e) is None
        m.apply([e])
    assert m.collectives == {r: t.collectives for r, t in session.judge.tracks.items()}
    live = [e for e in rec.events if isinstance(e, ev.CollectiveProgress)]
    assert m.laggards == live[-1].laggards
    assert all(e.mismatch == {} for e in live)  # a rank that never entered the collective is no mismatch
