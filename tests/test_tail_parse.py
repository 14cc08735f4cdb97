"""Reading rank files (partial lines, bad UTF-8, huge lines) and parsing step/loss/reports from plain text."""
from __future__ import annotations

import json
import math
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddptui.runners.evidence import parse
from ddptui.runners.edge.tail import MAX_LINE, FileTail, Lines, Tailer, _has_long_line

pytestmark = pytest.mark.any_python


def test_partial_last_line_waits_then_survives(tmp_path):
    f = tmp_path / "out"
    f.write_bytes(b"one\ntw")
    t = FileTail(str(f), 0, "out")
    assert t.read() == ["one"]
    with open(f, "ab") as w:
        w.write(b"o\nthr")
    assert t.read() == ["two"]
    assert list(t.drain()) == [["thr"]]  # the writer exited without a newline: the line is kept


def test_invalid_utf8_and_crlf(tmp_path):
    f = tmp_path / "out"
    f.write_bytes(b"ok \xff\xfe bytes\r\nnext\n")
    assert FileTail(str(f), 0, "out").read() == ["ok \ufffd\ufffd bytes", "next"]


@pytest.mark.timeout(30)
def test_ten_megabyte_line_is_cut_not_fatal(tmp_path):
    f = tmp_path / "out"
    with open(f, "wb") as w:
        w.write(b"before\n" + b"x" * (10 << 20) + b"\nafter\n")
    t = FileTail(str(f), 0, "out")
    got = []
    for _ in range(20):
        got += t.read()
    assert got[0] == "before" and got[-1] == "after" and len(got) == 3
    assert len(got[1]) < MAX_LINE + 64 and got[1].endswith("more bytes]")
    assert len(t.partial) == 0


def test_tailer_finds_files_created_later_by_glob(tmp_path):
    tl = Tailer()
    tl.add(str(tmp_path / "*" / "attempt_*" / "1" / "stdout.log"), 1, "out")
    tl.discover()
    assert tl.poll() == []
    d = tmp_path / "runid" / "attempt_0" / "1"
    d.mkdir(parents=True)
    (d / "stdout.log").write_text("hello\n")
    tl.discover()
    assert tl.poll() == [(1, "out", ["hello"])]


@pytest.mark.parametrize("line, step, loss", [
    ("Step 10, Loss: 0.1234", 10, 0.1234),
    ("step 5 loss 0.5", 5, 0.5),
    ("[rank 1] step 3 loss 1e-3", 3, 0.001),
    ("epoch 1 iter 20/100 loss=2.5", 20, 2.5),
    ("loss: 7.25", None, 7.25),
    ("nothing here", None, None),
])
def test_step_loss_formats(line, step, loss):
    s, l, summary = parse.step_loss(line)
    assert (s, l, summary) == (step, loss, None)


def test_summary_line_of_the_mirage_document():
    assert parse.step_loss("[rank 0] loss: 30.5666 -> 0.2634 over 50 steps") == (
        None, None, {"first": 30.5666, "last": 0.2634, "steps": 50})


def test_prefixes_and_tags():
    assert parse.split_prefix("[default3]:hello") == (3, "hello")
    assert parse.split_prefix("[rank12]: Traceback") == (12, "Traceback")
    assert parse.split_prefix("@ddptui:2 text") == (2, "text")
    assert parse.split_prefix("[rank 0] plain") == (None, "[rank 0] plain")
    assert parse.split_prefix("[1] mirage label") == (1, "mirage label")
    assert parse.split_prefix("[0]:") == (None, "[0]:")  # a header of torchrun's failure table
    assert parse.report('@ddptui {"k":"step","r":1,"step":4}') == {"k": "step", "r": 1, "step": 4}
    assert parse.report('@ddptui {"k":"step","r":1,"st') is None  # a torn report is just a line


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_parser_never_raises(text):
    for line in text.split("\n"):
        parse.step_loss(line)
        parse.split_prefix(line)
        parse.report(line)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 10**7), st.floats(min_value=-1e6, max_value=1e6, allow_nan=False),
       st.sampled_from(["Step {s}, Loss: {l:.4f}", "step {s} loss {l}", "[rank 3] step {s} loss {l:.6f}",
                        "iter {s}: loss={l}"]))
def test_generated_step_loss_lines_round_trip(s, l, fmt):
    line = fmt.format(s=s, l=l)
    step, loss, _ = parse.step_loss(line)
    assert step == s
    assert math.isclose(loss, float(line.rsplit("=", 1)[-1].split()[-1]), rel_tol=1e-9)


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=5), st.integers() | st.text(max_size=5), max_size=4),
       st.integers(0, 64))
def test_reports_round_trip(extra, rank):
    body = {"k": "step", "r": rank, **extra}
    assert parse.report("@ddptui " + json.dumps(body)) == body


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=40), max_size=30), st.integers(0, 29), st.sampled_from(["loss", "LOSS", "step", "iter"]))
def test_batch_keyword_test_never_misses_a_line(lines, at, word):
    lines = [ln.replace("\n", " ") for ln in lines] or [""]
    assert parse.may_have_step_or_loss("\n".join(lines)) == any(k in "\n".join(lines) for k in parse._KEYWORDS)
    lines[min(at, len(lines) - 1)] += f" {word} 3"
    assert parse.may_have_step_or_loss("\n".join(["x" * 600] + lines))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 40), max_size=30), st.integers(1, 12))
def test_long_line_test_agrees_with_measuring_every_line(lengths, limit):
    text = "\n".join("x" * n for n in lengths)
    assert _has_long_line(text, limit) == (max(map(len, text.split("\n"))) > limit)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=300), min_size=1, max_size=8))
def test_batches_carry_their_joined_text(tmp_path_factory, chunks):
    # whatever arrives (CR, bad UTF-8, over-long lines cut), a batch's text is exactly its lines joined
    f = tmp_path_factory.mktemp("t") / "out"
    f.write_bytes(b"")
    t = FileTail(str(f), 0, "out")
    for chunk in chunks:
        with open(f, "ab") as w:
            w.write(chunk + b"\n" + b"y" * (MAX_LINE + 5) * (chunk[:1] == b"!") + b"\n")
        got = t.read()
        assert isinstance(got, Lines) and got.text == "\n".join(got)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=4), min_size=1, max_size=6), st.binary(max_size=200))
def test_one_pass_needle_test_agrees_with_a_scan_per_needle(needles, data):
    assert parse.any_of(needles)(data) == any(n in data for n in needles)
    assert parse.any_of(needles)(data + needles[-1] + data)


def test_marker_test():
    assert parse.has_marker('x\n@ddptui {"k":"step"}') and parse.has_marker("@ddptui:3 y")
    assert not parse.has_marker("mail me @ home\nstep 3") and not parse.has_marker("no reports here")


def test_a_report_glued_to_half_a_printed_line_is_still_a_report():
    # print() under -u is two writes; the ranks' report thread can land between them
    assert parse.unglue_report('epoch 3 done@ddptui {"k":"step","r":1,"step":9}') == (
        "epoch 3 done", {"k": "step", "r": 1, "step": 9})
    assert parse.unglue_report("mail me@ddptui {not json") == ("mail me@ddptui {not json", None)
    assert parse.unglue_report('@ddptui {"k":"step"') == ('@ddptui {"k":"step"', None)
