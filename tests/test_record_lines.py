"""The record's rank logs read back as the engine wrote them (runners/edge/record.py log_groups, tui/follow.py's
reader of a growing record) and the events' type checks (runners/evidence/eventcheck.py), without a run."""
from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddptui.runners import events as ev
from ddptui.runners.edge.record import (
    BIG_LINE,
    PROGRESS_TAIL,
    ProgressColumns,
    RunRecord,
    _decode_problem,
    _stamp,
    event_columns,
    event_line,
    loads_in_steps,
    log_groups,
    log_line,
    replay_events,
    scan_events,
)
from ddptui.runners.evidence.eventcheck import _field_checks, _fits, problem
from ddptui.runners.edge.progress_line import progress_line
from ddptui.tui.follow import RecordReader

pytestmark = pytest.mark.any_python

A = "2026-12-05T06:00:01.250+00:00"
B = "2026-12-05T06:00:01.500+00:00"


def test_log_groups_groups_by_stamp_and_stream_and_counts_what_is_not_a_log_line():
    lines = [f"{A} out one", f"{A} out two\r", f"{A} err three", "garbage", f"{A} err ", f"{B} out four",
             "2026-13-05T06:00:01.500+00:00 out month 13", f"{B} out {A} out five"]
    groups, bad = log_groups(lines)
    wall_a, wall_b = log_line(f"{A} out x")[0], log_line(f"{B} out x")[0]
    assert groups == [(wall_a, "out", ["one", "two\r"]), (wall_a, "err", ["three", ""]),
                      (wall_b, "out", ["four", f"{A} out five"])]
    assert bad == 2
    # one time written as two stamps (another UTC offset) is one group, as the engine's LogLines was
    same = "2026-12-05T07:00:01.250+01:00"
    assert log_groups([f"{A} out a", f"{same} out b"]) == ([(wall_a, "out", ["a", "b"])], 0)
    assert log_groups([]) == ([], 0)
    assert log_groups(["\0 out x", f"{A} out y"]) == ([(wall_a, "out", ["y"])], 1)


def test_a_growing_record_is_read_back_batch_by_batch_as_written(tmp_path):
    rec = RunRecord(tmp_path)
    reader = RecordReader(tmp_path)
    rec.event(ev.RunStarted("p", "torchrun", "cmd", 2, 10, 100.0))
    rec.lines(0, "out", 100.5, ("a", "b"))
    rec.lines(1, "err", 100.5, ("c",))
    rec.lines(None, "out", 100.7, ("launcher",))
    rec.flush()
    got = reader.read()
    assert [type(e).__name__ for e in got] == ["RunStarted", "LogLines", "LogLines", "LogLines"]
    logs = {(e.rank, e.stream, e.wall, e.lines) for e in got if isinstance(e, ev.LogLines)}
    assert logs == {(0, "out", 100.5, ("a", "b")), (1, "err", 100.5, ("c",)), (None, "out", 100.7, ("launcher",))}
    with open(tmp_path / "rank0.log", "a") as f:  # a line the engine is still writing is not read yet
        f.write(log_line_text(101.0, "out", "d") + log_line_text(101.0, "out", "e")[:10])
    assert [e.lines for e in reader.read()] == [("d",)]
    with open(tmp_path / "rank0.log", "a") as f:  # ... then its end
        f.write(log_line_text(101.0, "out", "e")[10:])
    rec.lines(0, "out", 101.25, ("f",))  # and the next
    rec.flush()
    rest = reader.read()
    assert [e.lines for e in rest] == [("e",), ("f",)]
    assert reader.bad == 0
    assert reader.logs[0].fd is not None  # kept open between reads (1,024 logs: one call each a turn, not three)
    reader.close()
    assert reader.logs[0].fd is None and reader.events.fd is None
    rec.close()
    replayed = [e for e in replay_events(tmp_path) if isinstance(e, ev.LogLines) and e.rank == 0]
    assert [line for e in replayed for line in e.lines] == ["a", "b", "d", "e", "f"]


def log_line_text(wall: float, stream: str, text: str) -> str:
    """One line as RunRecord writes it."""
    return f"{_stamp(wall)} {stream} {text}\n"


def test_event_type_checks_take_no_bool_for_a_number_and_check_nested_values():
    ok = ev.Progress(0, 3, 1.5, 100.0, "hook", ((1, 2.0), (None, 3)), None, 0.5)
    assert problem(ok) is None
    assert problem(ev.Progress(0, True, 1.5, 100.0, "hook")) is not None  # a bool is no step
    assert "progress.loss" in problem(ev.Progress(0, 3, "1.5", 100.0, "hook"))
    assert problem(ev.Progress(0, 3, 1, 100.0, "hook")) is None  # an int is a float
    assert problem(ev.Progress(0, 3, None, 100.0, "hook", step_time=True)) is None  # old records: False/True
    assert "losses" in problem(ev.Progress(0, 3, None, 100.0, "hook", ((1, "x"),)))
    assert problem(ev.LogLines(0, "out", 1.0, 0.0, ("a", "b"))) is None
    assert "log_lines.lines" in problem(ev.LogLines(0, "out", 1.0, 0.0, ("a", 2)))
    assert problem(ev.Resources({0: 1.0}, {0: 5}, 1.0)) is None
    assert problem(ev.Resources({0: "x"}, {0: 5}, 1.0)) is not None
    assert problem(ev.Resources({"0": 1.0}, {0: 5}, 1.0)) is not None


_VALUES = (None, True, False, 0, 3, -1, 1.5, "x", "", (), [], {}, (1, 2.0), [[1, 2.0]], ((None, 3),), ("a", "b"),
           (1, 2), [0, 1], {0: 1.0}, {0: 5}, {0: "x"}, {"0": 1.0}, {"a": 1}, ((1, "x"),), (("a", 1),), [{"a": 1}])


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(sorted(ev.EVENT_TYPES)), st.data())
def test_the_one_function_check_of_an_event_says_what_its_field_tests_say(kind, data):
    """eventcheck's fused check (a function per class, scalars inline) fails exactly where a field's own test fails:
    each field given a value its own test takes, or any value (a bool for a number, a str, a list...)."""
    cls = ev.EVENT_TYPES[kind]
    e = object.__new__(cls)
    for name, _, ok in _field_checks(cls):
        fitting = [v for v in _VALUES if ok(v)]
        fit = bool(fitting) and data.draw(st.booleans(), label=f"{name} fits")
        e.__dict__[name] = data.draw(st.sampled_from(fitting if fit else _VALUES), label=name)
    fields_ok = all(ok(e.__dict__[name]) for name, _, ok in _field_checks(cls))
    assert _fits(cls)(e) is fields_ok


_FLOATS = st.one_of(st.floats(), st.integers(-10**20, 10**20), st.sampled_from([0.0, -0.0, 1e-7, 1e300, 3]))
_PROGRESS = st.builds(
    ev.Progress, rank=st.integers(-1, 5000), step=st.none() | st.integers(-3, 10**12), loss=st.none() | _FLOATS,
    wall=_FLOATS, source=st.sampled_from(["hook", "report", "parsed", ""]),
    losses=st.lists(st.tuples(st.integers(-3, 10**9), _FLOATS), max_size=4).map(tuple),
    samples=st.none() | st.integers(0, 10**6), step_time=st.none() | _FLOATS | st.booleans())


def _decoded(line: str):
    """What decoding a line as JSON and checking it gives (event_line without its Progress shortcut)."""
    try:
        return _decode_problem(loads_in_steps(line))
    except ValueError:
        return "not JSON"


@settings(max_examples=500, deadline=None)
@given(_PROGRESS, st.integers(0, 10**6), st.sampled_from(["", "x", "0", "-", ".", "e", " ", "]", "[", '"', "null"]),
       st.integers(0, 2))
def test_a_progress_line_read_by_its_shape_is_the_event_json_decoding_gives(e, at, text, how):
    """runners/edge/progress_line.py: a line RunRecord wrote gives the event json decoding and checking give, the
    same repr (a float stays a float, an int an int, the points lists); the line with one character changed, cut or
    added, where the shape still takes it, the same as decoding it."""
    line = json.dumps(e.to_json(), default=str)
    fast = progress_line(line)
    assert fast is not None and repr(fast) == repr(_decoded(line))
    i = at % (len(line) + 1)
    changed = [line[:i] + text + line[i:], line[:i] + text + line[i + 1:], line[:i] + line[i + 1:]][how]
    got = progress_line(changed)
    assert got is None or repr(got) == repr(_decoded(changed)), changed
    assert repr(event_line(changed)) == repr(_decoded(changed))


def _same_column(a: list, b: list) -> bool:
    """Two columns of numbers alike: None where the other has None, NaN where it has NaN, else the same number."""
    def same(x, y):
        if x is None or y is None or isinstance(x, bool) or isinstance(y, bool):
            return x is y or x == y
        return float(x) == float(y) or (math.isnan(float(x)) and math.isnan(float(y)))
    return len(a) == len(b) and all(map(same, a, b))


@settings(max_examples=300, deadline=None)
@given(st.lists(_PROGRESS, min_size=1, max_size=6), st.integers(0, 10**6),
       st.sampled_from(["", "x", "0", "-", ".", "e", "]", "null", "true"]), st.booleans())
def test_a_stretch_read_as_columns_is_its_progress_events_decoded_one_by_one(events, at, text, mangle):
    """runners/edge/record.py scan_events: the lines that end as the engine ends a Progress line are read a column at
    a time (by the line pattern progress_line.py builds) and give what decoding and checking each gives; where one
    of them is of another shape (one character changed), the stretch is decoded line by line. A Progress line that
    does not end that way is decoded as any event, and handed over as one."""
    lines = [json.dumps(e.to_json(), default=str) for e in events]
    if mangle:
        i = at % len(lines)
        j = at % (len(lines[i]) + 1)
        lines[i] = lines[i][:j] + text + lines[i][j + 1:]
    decoded = [(line.endswith(PROGRESS_TAIL), d) for line in lines if isinstance(d := _decoded(line), ev.Progress)]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "events.jsonl"
        path.write_text("".join(line + "\n" for line in lines))
        got: list = []
        scan_events(path, [], got.append, got.append)
    cols = [c for c in got if isinstance(c, ProgressColumns)]
    singly = [e for e in got if isinstance(e, ev.Progress)]
    assert repr(singly) == repr([d for tail, d in decoded if not tail])
    assert len(cols) == (1 if any(line.endswith(PROGRESS_TAIL) for line in lines) else 0)
    want, have = event_columns([d for tail, d in decoded if tail]), cols[0] if cols else event_columns([])
    for name in ("rank", "step", "wall", "samples", "step_time", "point_event", "point_step", "point_loss"):
        assert _same_column(getattr(have, name), getattr(want, name)), (name, lines)


def test_a_long_line_decodes_in_steps_to_what_json_loads_gives_or_its_error():
    pad = " " * BIG_LINE  # a line this long is decoded member by member
    members = "[" + ", ".join(map(str, range(100))) + "]"
    good = [f'{{"by_rank": {{"0": {{"pg": {{"ranks": {members}, "n": 1}}}}, "1": {{"pg": {{"ranks": {members}}}}}}}}}',
            f'{{"a": {members}, "b": [1, "]", {members}], "c": {{"d": {{"e": {{"f": {members}}}}}}}, "g": NaN}}',
            '{"a": 1, "a": 2, "b": {}, "c": []}', "{}"]
    for text in good:
        got = loads_in_steps(text + pad)
        assert repr(got) == repr(json.loads(text))
    twice = loads_in_steps(good[0] + pad)["by_rank"]
    assert twice["0"]["pg"]["ranks"] == twice["1"]["pg"]["ranks"]
    assert twice["0"]["pg"]["ranks"] is not twice["1"]["pg"]["ranks"]  # decoded once, each its own list
    bad = ['{"a": 1,}', '{"a": 1} x', '{"a": {"b": {"c": [1, 2}}}', '{"a" 1}', '{"a": "\x01"}', '{"a": 1',
           f'{{"a": {members.replace(", 5,", ",,")}}}', f'{{"a": {members[:-1]}', "[1, 2]"]
    for text in bad:
        try:
            want: object = json.loads(text + pad)
        except ValueError as e:
            want = str(e)
        try:
            got = loads_in_steps(text + pad)
        except ValueError as e:
            got = str(e)
        assert repr(got) == repr(want), text
    assert isinstance(event_line('{"kind": "progress", "rank": 0' + pad), str)  # a cut line: why, not a crash


def test_a_short_line_decodes_as_json_loads_and_an_event_is_built_as_its_class_builds_it():
    for text in ['{"a": [1, 2.5, null], "b": "x"}', '{"a": 1} ', '{"a": 1}\r', " {}", "\ufeff{}", '{"a": 1} x',
                 '{"a": 1,}', "", "NaN", "[1,"]:
        try:
            want: object = json.loads(text)
        except ValueError as e:
            want = str(e)
        try:
            got = loads_in_steps(text)
        except ValueError as e:
            got = str(e)
        assert repr(got) == repr(want), text
    made = [ev.Progress(3, 7, 0.5, 1.0, "hook", (), 16, 0.25), ev.RunFinished("ok", 0, "s.json", 2.0),
            ev.CrashVerdict("rank 1 exit 1", 1, (0, 2), "exit 1", ("Traceback",), 3.0)]
    for e in made:
        back = event_line(json.dumps(e.to_json()))
        assert back == e and repr(back) == repr(e) and problem(back) is None
        assert not isinstance(e, ev.Progress) or hash(back) == hash(e)  # (the others hold dicts: not hashable)
    a, b = (event_line('{"kind": "run_finished", "status": "ok", "exit_code": 0, "summary_path": "", "wall": 1}')
            for _ in range(2))
    assert isinstance(a, ev.RunFinished) and a.summary == {} and a.summary is not b.summary  # a default made fresh
    assert event_line('{"kind": "progress", "rank": 0}').startswith("progress: ")  # a required field left out
    with pytest.raises(AttributeError):
        a.status = "failed"  # type: ignore[misc]  # still frozen
