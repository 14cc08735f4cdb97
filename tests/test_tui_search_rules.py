"""The pure rules behind `/` search and replay stepping: queries and their matches (tui/search.py), where the stepping
keys land (tui/stepping.py), a record's model rebuilt at any event (tui/rewind.py)."""
from __future__ import annotations

import datetime as dt

import pytest

from ddptui.runners import events as ev
from ddptui.runners.edge.record import replay_events
from ddptui.tui import stepping
from ddptui.tui.model import RunModel
from ddptui.tui.rewind import Rewind
from ddptui.tui.search import QueryError, occurrences, parse_query, step_match
from ddptui.tui.widgets.banner import banner_text
from tests.support.replay import RECORDS

pytestmark = pytest.mark.any_python


# -- queries -------------------------------------------------------------------------------------------------------

def test_plain_text_is_literal_and_case_insensitive():
    q = parse_query("Loss 0.2")
    assert q is not None and q.ranks is None and q.streams is None
    assert q.spans("step 60 loss 0.2997 LOSS 0.25") == [(8, 16), (20, 28)]
    assert q.spans("loss 0x2") == []  # the dot is a dot, not "any character"


def test_regex_after_re_and_scopes_anywhere():
    q = parse_query("rank:1 re:step \\d+0 stream:stdout rank:3")
    assert q is not None and q.ranks == {1, 3} and q.streams == {"out"}
    assert q.spans("step 60 step 61 step 120") == [(0, 7), (16, 24)]
    assert q.allows(1, "out") and q.allows(3, "out")
    assert not q.allows(1, "err") and not q.allows(0, "out") and not q.allows(None, "out")


def test_the_ddptui_stream_is_the_lines_of_no_rank():
    q = parse_query("stream:ddptui stream:err stall")
    assert q is not None and q.streams == {"ddptui", "err"}
    assert q.allows(None, "out") and q.allows(0, "err") and not q.allows(0, "out")


def test_scopes_alone_match_whole_lines_and_nothing_is_no_query():
    q = parse_query("rank:0")
    assert q is not None and q.spans("anything") == [(0, 8)]
    assert parse_query("") is None and parse_query("   ") is None


@pytest.mark.parametrize("raw, said", [
    ("re:step (1", "bad regular expression: missing ), unterminated subpattern at position 5"),
    ("re:*x", "bad regular expression: nothing to repeat at position 0"),
    ("rank:one x", "rank:one: a rank is a number (rank:0)"),
    ("stream:logs x", "stream:logs: a stream is out, err or ddptui"),
])
def test_a_query_that_cannot_search_says_why_in_one_line(raw, said):
    with pytest.raises(QueryError) as e:
        parse_query(raw)
    assert str(e.value) == said and "\n" not in str(e.value)


def test_matches_are_numbered_by_row_and_n_wraps_around():
    q = parse_query("step")
    assert q is not None
    rows = [(0, "out", "step 1 step 2"), (None, "out", "launcher"), (1, "err", "step 3")]
    found = occurrences(rows, q, lambda r: r, first=100)
    assert found == [(100, 0, 4), (100, 7, 11), (102, 0, 4)]
    assert step_match(found, None, True) == 0 and step_match(found, None, False) == 2
    assert step_match(found, (100, 0), True) == 1 and step_match(found, (102, 0), True) == 0  # wraps to the first
    assert step_match(found, (100, 0), False) == 2 and step_match(found, (100, 7), False) == 0
    assert step_match(found, (101, 0), True) == 2  # from a row that has no match (lines came or left meanwhile)
    assert step_match([], None, True) is None
    scoped = parse_query("rank:1 step")
    assert scoped is not None and occurrences(rows, scoped, lambda r: r) == [(2, 0, 4)]


# -- stepping ------------------------------------------------------------------------------------------------------

def _events(name: str) -> list:
    return list(replay_events(RECORDS / name, []))


def test_incidents_of_committed_records():
    hang = _events("hang")
    found = stepping.incidents(hang)
    assert [x.kind for x in found] == ["stall"]
    assert isinstance(hang[found[0].index], ev.StallDetected)
    crash = stepping.incidents(_events("crash"))
    assert [x.kind for x in crash] == ["crash"]
    assert stepping.incidents(_events("cpu-ddp")) == []


def test_next_incident_wraps_and_none_without_any():
    found = [stepping.Incident(5, 1.0, "stall"), stepping.Incident(9, 2.0, "crash")]
    assert stepping.next_incident(found, 20, True).index == 5  # a replay opens at its end: x goes to the first
    assert stepping.next_incident(found, 5, True).index == 9
    assert stepping.next_incident(found, 9, False).index == 5
    assert stepping.next_incident(found, 2, False).index == 9
    assert stepping.next_incident([], 3, True) is None


def test_walls_never_go_back_and_seconds_always_move():
    es = [ev.RunStarted("r", "p", "torchrun", 1, None, 100.0), ev.RankPhase(0, "x", 100.2),
          ev.RankPhase(0, "y", 99.0), ev.RankPhase(0, "z", 103.5), ev.RankPhase(0, "w", 103.6)]
    ws = stepping.walls(es)
    assert ws == [100.0, 100.2, 100.2, 103.5, 103.6]
    assert stepping.step_seconds(ws, 0, 1.0) == 2  # the last event within the second
    assert stepping.step_seconds(ws, 2, 1.0) == 3  # none in that second: the next event
    assert stepping.step_seconds(ws, 4, 1.0) == 4  # never past the end
    assert stepping.step_seconds(ws, 4, -1.0) == 2 and stepping.step_seconds(ws, 3, -1.0) == 2
    assert stepping.step_seconds(ws, 0, -1.0) == 0
    assert stepping.step_event(5, 4, 1) == 4 and stepping.step_event(5, 0, -1) == 0 and stepping.step_event(5, 2, 1) == 3
    assert stepping.index_at(ws, 50.0) == 0 and stepping.index_at(ws, 103.55) == 3 and stepping.index_at(ws, 1e12) == 4


def test_a_typed_time_from_the_start_or_of_the_clock():
    start = dt.datetime(2026, 12, 3, 22, 52, 50, 500000, tzinfo=dt.timezone.utc).timestamp()
    utc = dt.timezone.utc
    assert stepping.parse_when("+12.5", start) == start + 12.5
    assert stepping.parse_when("+1:30", start) == start + 90 and stepping.parse_when("+1:00:02", start) == start + 3602
    assert stepping.parse_when(" 22:52:55 ", start, utc) == start + 4.5
    assert stepping.parse_when("00:10", start, utc) == start + 9.5 + 17 * 60 + 3600  # past midnight: the next day
    for bad in ("25:00:00", "later", "", "+x", "12"):
        with pytest.raises(ValueError) as e:
            stepping.parse_when(bad, start, utc)
        assert "HH:MM:SS" in str(e.value) and "\n" not in str(e.value)


# -- the model at any event ----------------------------------------------------------------------------------------

def _shown(m: RunModel) -> tuple:
    return (banner_text(m), list(m.timeline), {r: (v.step, v.status, v.loss, list(v.lines)) for r, v in m.ranks.items()},
            m.finished, m.stall, m.hang, m.crash)


@pytest.mark.parametrize("record", ["hang", "crash", "cpu-ddp"])
def test_the_model_at_any_event_is_the_fold_from_the_start(record):
    es = _events(record)
    rewind = Rewind(es, every=7)  # checkpoints every 7 events: most positions fold from one
    for i in [len(es) - 1, 0, 3, 7, 20, len(es) // 2, 8, len(es) - 2]:
        fresh = RunModel()
        fresh.apply(es[:i + 1])
        assert _shown(rewind.model_at(i)) == _shown(fresh), i
    assert rewind._marks == list(range(7, len(es) + 1, 7))
    assert rewind.model_at(5) is not rewind.model_at(5)  # each a model of its own, folded on by the screen


def test_restore_replaces_the_state_and_moves_the_chart_on():
    es = _events("hang")
    shown = RunModel()
    shown.apply(es)
    before = shown.loss_version
    earlier = Rewind(es).model_at(10)
    shown.restore(earlier)
    assert shown.stall is None and shown.finished is None and len(shown.timeline) == len(earlier.timeline)
    assert shown.loss_version > before and shown.changes.run and shown.changes.lines
