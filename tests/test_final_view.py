"""Issue 23 items 8-11 on the dashboard: the finished view keeps every verdict the run had (a slow-down, a node lost, a
crash, a stall now or over, replicas that differ) with the engine's fix; the Collectives tab leads with the finding the
banner says and marks the mismatching rows; words that are cut say where the rest is (banner, header, pane status,
replicas after a stall), and at 80x24 the Stacks tab shows the culprit first. Events as the engine sends them (a
replay of the real runs is in test_engine_e2e.py and test_fr_verdicts.py; item 11's rules in test_stacks_view.py)."""
from __future__ import annotations


import pytest
from textual.widgets import Static

from ddptui.runners import events as ev
from ddptui.runners.evidence import fr_analysis
from ddptui.tui.app import DdpApp
from ddptui.tui.replay import ReplaySource
from ddptui.tui.model import RunModel
from ddptui.tui.widgets.banner import Banner, banner_text
from ddptui.tui.widgets.hints_view import render_hints
from ddptui.tui.widgets.verdict_view import headline, summary_rows
from tests.support.flight_recorder import dumps
from tests.support.replay import RECORDS
from tests.support.ui import ScriptSource, aio, screen_text, settle, until

pytestmark = pytest.mark.any_python

T = 1_764_700_000.0
SLOWED = "steps take 0.50 s, 115x its first 20 steps' 4.4 ms"
SAMPLE = ("the run slowed down (rank 1's steps take 0.50 s, 115x its first 20 steps' 4.4 ms): rank 1 is in at_step() "
          "at _faults.py:85 (calls time.sleep); rank 0 waits for it in all_reduce inside backward (DDP bucket "
          "all-reduce)")
SLOW_FIX = ("rank 1 is in at_step() at _faults.py:85 (calls time.sleep) and every rank waits for it at the next "
            "collective: remove that sleep or shorten it")


def replica(status: str = "identical", params=("w", "b")) -> ev.ReplicaVerdict:
    text = {"identical": "all 2 ranks hold byte-identical weights (2 parameters)",
            "differ": "replicas differ: first differing parameter 'w': rank 1 differs from rank 0",
            "unavailable": "replicas not compared: the ranks were stopped before they reported their weights (a rank "
                           "reports them when it exits on its own)"}[status]
    table = {0: ("d1g3st0a", "d1g3st0b"), 1: ("d1g3st0a" if status != "differ" else "d1g3st1a", "d1g3st0b")} \
        if params else {}
    return ev.ReplicaVerdict(status, text, "w" if status == "differ" else None, (1,) if status == "differ" else (),
                             tuple(params), table, T + 30)


def begin(world: int = 2, profile: str = "slow") -> list[ev.Event]:
    return [ev.RunStarted("runs/x", profile, "torchrun", world, 40, T)] + [
        ev.RankState(r, "running", "", T + 1) for r in range(world)]


def slow_run() -> list[list[ev.Event]]:
    """`ddptui slow` as its record says it: rank 1 named slow, the stack sample with its fix, then both exit 0."""
    return [begin(),
            [ev.Progress(r, 22, 0.3, T + 10, "report") for r in (0, 1)]
            + [ev.RankState(1, "slow", SLOWED, T + 11),
               ev.HangVerdict(SAMPLE, (1,), (0,), {}, T + 11, "runs/x/stacks/01-slow", "slow", {}, SLOW_FIX)],
            [ev.Progress(r, 40, 0.2, T + 20, "report") for r in (0, 1)]
            + [ev.RankState(r, "exited", "exit 0", T + 21) for r in (0, 1)]
            + [replica(), ev.RunFinished("ok", 0, "runs/x/summary.json", T + 22, {"status": "ok"})]]


def folded(batches) -> RunModel:
    m = RunModel()
    for b in batches:
        m.apply(b)
    return m


# ---- 8. the finished view keeps every verdict --------------------------------------------------------------------
def test_a_slow_down_stays_in_the_banner_verdict_rank_rows_and_hints_once_the_run_is_over():
    m = folded(slow_run()[:2])
    live = banner_text(m)
    assert live == ("-info", f"SLOW: {SAMPLE}")  # live: right, as before
    m = folded(slow_run())
    cls, text = banner_text(m)
    assert cls == "-info" and text.startswith("✓ run ok (exit code 0) · SLOW: " + SAMPLE), text  # was "✓ run ok" alone
    assert text.endswith("all 2 ranks hold byte-identical weights (2 parameters)")
    head = headline(m).plain
    assert f"⚠ slow-down: {SAMPLE}\n   fix: {SLOW_FIX}\n" in head, head
    rows = {r[0]: r[1] for r in summary_rows(m)}
    assert rows == {"0": "✓ exited ok", "1": f"✓ exited ok · ⚠ was slow ({SLOWED})"}
    assert f"fix: {SLOW_FIX}" in render_hints([], T, (("slow-down", SLOW_FIX),)).plain


def test_node_lost_crash_and_differing_replicas_all_stay_said_at_the_end():
    lost = ev.NodeLost("node1", (1,), "the torchrun agent of node1 exited 1", T + 5)
    crash = ev.CrashVerdict("node node1 lost (its agent exited 1); rank 1 failed first (exit 1)", 1, (0,), "exit 1",
                            (), T + 6)
    m = folded([begin(), [lost, crash, ev.RankState(1, "slow", SLOWED, T + 4), replica("differ"),
                          ev.RunFinished("failed", 1, "runs/x/summary.json", T + 7, {})]])
    cls, text = banner_text(m)
    assert cls == "-crash" and text.startswith("NODE LOST node1 (rank 1): the torchrun agent of node1 exited 1")
    assert f"SLOW: rank 1: {SLOWED}" in text and "replicas differ: first differing parameter 'w'" in text
    head = headline(m).plain
    for said in ("✗ node lost: node1 (rank 1): the torchrun agent", "✗ crash: exit 1: node node1 lost",
                 f"⚠ slow-down: rank 1: {SLOWED}", "replicas differ: first differing parameter 'w'"):
        assert said in head, (said, head)


def test_a_stall_the_ranks_came_out_of_is_a_verdict_of_the_finished_run():
    hv = ev.HangVerdict("rank 1 is stuck in load() at data.py:8 (calls time.sleep), step 4", (1,), (0,), {}, T + 12,
                        "runs/x/stacks/01-stall", "stall", {}, "rank 1 is in load() at data.py:8: remove that sleep")
    m = folded([begin(), [ev.StallDetected((1,), (0,), T + 2, 10.0, T + 12, "no step or output for 10 s"),
                          ev.RankState(1, "stalled", "no step or output for 10 s", T + 12), hv],
                [ev.StallCleared((1,), T + 20), ev.RankState(1, "running", "progressing again", T + 20)]])
    assert banner_text(m) == ("", "")  # live: the stall banner goes once the ranks move on
    m.apply([ev.RankState(r, "exited", "exit 0", T + 30) for r in (0, 1)]
            + [ev.RunFinished("ok", 0, "runs/x/summary.json", T + 31, {})])
    cls, text = banner_text(m)
    assert cls == "-info" and text == f"✓ run ok (exit code 0) · STALLED, then the ranks moved on: {hv.text}"
    head = headline(m).plain
    assert f"⚠ stall (over: the ranks moved on): {hv.text}\n   fix: {hv.fix}" in head
    assert summary_rows(m)[1][1] == "✓ exited ok · ⚠ was stalled (no step or output for 10 s)"


def test_a_stall_banner_says_the_fix_after_the_verdicts_lead_clause():
    text = ("ranks disagree at collective #11 in the default group: rank 0 called barrier, rank 1 all_reduce [161] (a "
            "rank-conditional collective); rank 0 waits in barrier at c.py:20, step 5; no progress since 10:00:00")
    fix = "every rank must call the same collectives in the same order; the barrier at c.py:20 runs on rank 0 only"
    m = folded([begin(), [ev.StallDetected((0, 1), (), T + 2, 10.0, T + 12, "no step"),
                          ev.HangVerdict(text, (0, 1), (), {}, T + 13, "runs/x/stacks/01-stall", "stall", {}, fix)]])
    assert banner_text(m) == ("-stall", "STALL: ranks 0,1 · ranks disagree at collective #11 in the default group: "
                              "rank 0 called barrier, rank 1 all_reduce [161] (a rank-conditional collective) · fix: "
                              f"{fix} · rank 0 waits in barrier at c.py:20, step 5; no progress since 10:00:00")


@pytest.mark.timeout(60)
@aio
async def test_the_finished_dashboard_of_a_slowed_run_says_it_on_every_view():
    app = DdpApp(source=ScriptSource(slow_run()))
    async with app.run_test(size=(160, 44)) as pilot:
        await settle(pilot, app)
        screen = app.screen
        banner = str(screen.query_one(Banner).render())
        assert "SLOW: the run slowed down" in banner and screen.query_one(Banner).has_class("-info"), banner
        assert screen.query_one("#tabs").active == "verdict"
        head = str(screen.query_one("#verdict-view .verdict-head").render())
        assert "⚠ slow-down: the run slowed down" in head and f"fix: {SLOW_FIX}" in head, head
        assert f"⚠ was slow ({SLOWED})" in screen_text(app)
        await pilot.press("h")
        assert f"fix: {SLOW_FIX}" in str(screen.query_one(".hints-text", Static).render())
        await pilot.press("escape")
        await until(pilot, lambda: "⚠ was slow" in str(screen.query_one("#rank-1").border_subtitle), 5, "the badge")
        assert str(screen.query_one("#rank-1").border_subtitle) == "✓ exited ok · ⚠ was slow"


# ---- 9. the Collectives tab leads with the engine's finding ----------------------------------------------------------
def _coll(enq: int, comp: int, frontier=None) -> dict:
    return {"desc": "default_pg", "ranks": [0, 1], "enqueued": enq, "completed": comp, "frontier": frontier}


BARRIER11 = {"seq": 11, "op": "barrier", "sizes": [], "dtypes": []}
AR11 = {"seq": 11, "op": "all_reduce", "sizes": [[161]], "dtypes": ["Float"]}


def conditional_barrier(live_mismatch: bool) -> list[list[ev.Event]]:
    f = fr_analysis.analyse(dumps("rank_conditional_barrier"), 2)
    fix = "every rank must call the same collectives in the same order; the barrier at c.py:19 runs on rank 0 only"
    grid = {0: {"0": _coll(11, 10, BARRIER11)}, 1: {"0": _coll(11, 10, AR11)}}
    mm = {**f.to_dict(), "fix": fix} if live_mismatch else {}
    b = [begin(profile="adhoc"), [ev.CollectiveProgress(grid, (), T + 8, mm)]]
    if not live_mismatch:  # the verdict's finding, as the banner says it
        b.append([ev.StallDetected((0, 1), (), T + 2, 10.0, T + 12, "no step"),
                  ev.HangVerdict(f.sentence() + "; no progress since 10:00:00", f.culprits, f.waiting, {}, T + 13,
                                 "runs/x/stacks/01-stall", "stall", f.to_dict(), fix)])
    return b


@pytest.mark.timeout(60)
@pytest.mark.parametrize("live_mismatch", [False, True], ids=["stall-verdict", "live-report"])
@aio
async def test_the_collectives_tab_says_the_mismatch_the_banner_says_and_marks_both_sides(live_mismatch):
    """It led with `no laggard: no rank is behind ...` and listed #11 barrier against #11 all_reduce unmarked."""
    from ddptui.tui.widgets.collectives_view import CollectivesView, CollRow
    app = DdpApp(source=ScriptSource(conditional_barrier(live_mismatch), kind="live", hold=True))
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(pilot, app)
        await pilot.press("o")
        view = app.screen.query_one(CollectivesView)
        head = str(view.query_one(".coll-head", Static).render())
        assert head.startswith("OP MISMATCH: ranks disagree at collective #11 in the default group: rank 0 called "
                               "barrier, rank 1 all_reduce [161]"), head
        assert "fix: every rank must call the same collectives in the same order" in head and "no laggard" not in head
        rows = {w.key: w for w in view.query(CollRow)}
        for r in (0, 1):
            assert rows[(r, "0")].has_class("-mismatch") and "MISMATCH" in rows[(r, "0")].shown[0], rows[(r, "0")].shown
        if not live_mismatch:
            assert "fix: every rank must call" in str(app.screen.query_one(Banner).render())
        app.source.request_stop()


# ---- 10. words cut where it matters --------------------------------------------------------------------------------
STALL_TEXT = ("STALL: rank 1 · collective #16 (all_reduce, 1 tensor [5313] float32, default group): rank 0 entered it "
              "at ddp_mlp.py:72, rank 1 never did (its last was #15) · fix: rank 1 must reach all_reduce #16 in the "
              "default group at ddp_mlp.py:72 as the others did; rank 1 is in at_step() at _faults.py:78 (calls "
              "time.sleep): remove that sleep or shorten it below the collective's timeout · rank 1 is stuck in "
              "at_step() at _faults.py:78 (calls time.sleep), step 10; no progress since 22:52:55")


def test_fit_keeps_whole_clauses_and_says_where_the_rest_is():
    from ddptui.tui.widgets.banner import MORE, _rows, fit
    shown = fit(STALL_TEXT, 78, 3)
    assert shown.endswith(MORE) and _rows(shown, 78) <= 3
    body = shown[: -len(MORE)]
    assert STALL_TEXT.startswith(body) and STALL_TEXT[len(body):].startswith((";", " ·", ","))  # cut at a clause
    assert fit("STALL: rank 1 is stuck", 78, 3) == "STALL: rank 1 is stuck"  # what fits is left whole
    assert fit(STALL_TEXT, 0, 3) == STALL_TEXT  # not laid out yet: the whole text, fitted on the first resize


@pytest.mark.timeout(60)
@aio
async def test_at_80x24_the_hang_records_banner_ends_on_a_whole_clause_and_the_culprits_stack_is_on_screen():
    """Items 10 and 11 on one replay: the stall banner was cut mid-sentence after 3 rows; the Stacks tab listed rank 0
    and ddptui's threads first (the culprit ~40 rows down); `y` said "copied" with nowhere else to look."""
    app = DdpApp(source=ReplaySource(RECORDS / "hang"))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app, 30)
        banner = app.screen.query_one(Banner)
        text = screen_text(app)
        lines = [ln.rstrip() for ln in text.split("\n")[banner.region.y:banner.region.bottom]]
        assert len(lines) <= 3 and lines[-1].endswith("… (v: all of it)"), lines
        assert app.screen.query_one("#tabs").active == "stacks"
        assert "━━ rank 1 (culprit)" in text and "◀ Injector.at_step" in text, text
        await pilot.press("y")
        msg = [n.message for n in app._notifications if "copied rank 1's stacks" in n.message]
        assert msg and "runs/hang/stacks/01-stall/rank1.txt" in msg[-1], [n.message for n in app._notifications]
        await pilot.press("v")
        head = str(app.screen.query_one("#verdict-view .verdict-head").render())
        assert f"⚠ stall: {app.model.hang.text}" in head  # the whole verdict, where the banner points


def test_the_header_at_80_columns_says_the_pace_and_eta_before_the_runs_shape():
    from ddptui.tui.screens.run import head_text
    from tests.support.scenes import told
    m = RunModel()
    m.apply([ev.RunStarted("runs/20261204-190109-cpu-ddp", "cpu-ddp", "torchrun", 4, 1500, T),
             ev.Resources({}, {}, T, 1.2, 2)])
    for i in range(1, 4):
        m.apply([told(r, 10 * i, T + i, 64) for r in range(4)])
    first80 = head_text(m, "live").plain[:80]
    assert "ETA " in first80 and "steps/s" in first80, first80  # was cut after "… · 10.3 steps/s · 2.6k sampl"


def test_a_pane_status_line_says_the_outcome_before_the_figures():
    from ddptui.tui.widgets.rank_pane import status_line
    m = folded([begin(), [ev.Progress(0, 5, 0.07, T + 3, "report"), ev.Resources({0: 1.0}, {0: 333_000_000}, T + 3),
                          ev.RankState(0, "killed", "stopped by ddptui after the stall", T + 20),
                          ev.RankState(1, "exited", "exit 0", T + 20)]])
    assert status_line(m.rank(0), 100).startswith("stopped by ddptui after the stall  step 5/100")
    assert not status_line(m.rank(1), 100).startswith("exit 0")  # its badge says "exited ok" already


def test_an_attached_rank_whose_output_cannot_be_read_says_so_in_its_pane_and_row():
    from ddptui.tui.compact import row_cells
    from ddptui.tui.model import human_bytes
    from ddptui.tui.widgets.rank_pane import status_line
    m = folded([begin(), [ev.RankState(0, "running", "output not readable", T + 1),
                          ev.Resources({0: 0.5}, {0: 300_000_000}, T + 2)]])
    assert status_line(m.rank(0), 100).startswith("output not readable  cpu 0%"), status_line(m.rank(0), 100)
    assert row_cells(m.rank(0), 0, 100, "node0", human_bytes)[-1] == "(output not readable)"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("rep", ["unavailable", "identical"])
@aio
async def test_no_replica_digests_heading_over_an_empty_table(rep):
    params = () if rep == "unavailable" else ("w", "b")
    done = [replica(rep, params), ev.RunFinished("stalled", 3, "runs/x/summary.json", T + 31, {})]
    app = DdpApp(source=ScriptSource([begin(), done]))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app)
        await pilot.press("v")
        heading = app.screen.query_one(".replica-head", Static)
        assert heading.display is (rep == "identical")
        text = screen_text(app)
        assert ("replica digests" in text) is (rep == "identical")
        assert (text.count("d1g3st0a") == 2) is (rep == "identical"), text  # and under it, the table's rows
        if rep == "unavailable":
            assert "replicas not compared: the ranks were stopped before they reported their weights" in text


def test_the_compact_row_of_a_rank_that_was_slow_says_so_unless_its_trouble_needs_the_cell():
    from ddptui.tui import compact
    m = folded(slow_run())
    assert compact.status_words(m.rank(1), compact.OTHER) == "exited ok · was slow"
    assert compact.status_words(m.rank(0), compact.OTHER) == "exited ok"
    m.apply([ev.RankState(1, "failed", "exit 1", T + 40)])
    assert compact.status_words(m.rank(1), compact.ROOT) == "failed (exit 1) · root cause"  # the cell is narrow
