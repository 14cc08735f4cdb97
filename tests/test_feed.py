"""The engine's live feed (runners/edge/feed.py): a turn's batch comes through a frame as the same events, anything
else is a FeedError, and a viewer that takes the feed mid-run (tui/follow.py) sees every line and event of the
record exactly once, also when the feed drops it halfway and it goes back to reading the record."""
from __future__ import annotations

import dataclasses
import marshal
import threading
import time
from pathlib import Path

import pytest

from ddptui.runners import events as ev
from ddptui.runners.edge import feed
from ddptui.runners.edge.control import Channel
from ddptui.runners.edge.record import RunRecord, replay_events
from ddptui.tui.follow import FollowSource

pytestmark = pytest.mark.any_python

W = 1_796_500_000.0


def _batch(turn: int, ranks: int = 3) -> list:
    wall = W + turn * 0.02
    out: list = [ev.LogLines(r, "out" if r else "err", wall, 5.0, (f"rank {r} turn {turn} line {i}" for i in range(2)))
                 for r in range(ranks)]
    out = [dataclasses.replace(e, lines=tuple(e.lines)) for e in out]
    out += [ev.Progress(r, turn, 1.0 / (turn + 1), wall, "hook", ([turn, 1.0 / (turn + 1)],), 64, 0.02)
            for r in range(ranks)]
    if turn % 5 == 0:
        out.append(ev.LogLines(None, "err", wall, 5.0, (f"launcher says {turn}",)))
        out.append(ev.RankState(1, "running", f"turn {turn}", wall))
    return out


def _plain(e: ev.Event) -> dict:
    """An event as the record keeps it (a frame's LogLines carries no monotonic time; its points are tuples)."""
    d = e.to_json()
    d.pop("mono", None)
    if "losses" in d:
        d["losses"] = [list(p) for p in d["losses"]]
    return d


def test_a_batch_comes_through_a_frame_as_the_same_events():
    batch = _batch(5) + [ev.CollectiveProgress({0: {"0": {"desc": "default_pg", "ranks": [0, 1], "enqueued": 3,
                                                         "completed": 2, "frontier": None}}}, (1,), W),
                         ev.RunFinished("ok", 0, "summary.json", W + 1, {"status": "ok"})]
    body = feed.frame(1234, {0: 10, None: 7}, batch)[feed.HEAD.size:]
    kind, size, logs, got = feed.read_frame(body)
    assert (kind, size, logs) == ("batch", 1234, {0: 10, None: 7})
    assert [_plain(e) for e in got] == [_plain(e) for e in batch]
    assert [type(e) for e in got] == [type(e) for e in batch]


def test_a_field_marshal_does_not_take_comes_as_the_record_has_it():
    class Loss(float):  # a float of the user's type (a numpy float64 is one)
        pass
    batch = [ev.Progress(0, 3, Loss(0.5), W, "parsed", ((3, Loss(0.5)),), None, 0.1), ev.LogLines(0, "out", W, 1.0, ("x",))]
    _, _, _, got = feed.read_frame(feed.frame(1, {}, batch)[feed.HEAD.size:])
    assert [_plain(e) for e in got] == [_plain(e) for e in batch]


@pytest.mark.parametrize("body", [b"", b"junk", marshal.dumps(("batch", 1, {}, [(9, "x")])),
                                  marshal.dumps(("start", "1", {}, [])), marshal.dumps(compile("1", "f", "eval")),
                                  marshal.dumps(("batch", 1, {}, [(2, '{"kind": "nope"}')])),
                                  marshal.dumps(("batch", 1, {}, [(0, 1)]))])
def test_anything_but_a_frame_is_a_feed_error_never_a_crash(body):
    with pytest.raises(feed.FeedError):
        feed.read_frame(body)


def test_a_length_no_frame_has_is_a_feed_error():
    sub = feed.Subscription.__new__(feed.Subscription)
    sub._buf, sub._eof = bytearray(feed.HEAD.pack(feed.MAX_FRAME + 1) + b"x"), False
    with pytest.raises(feed.FeedError):
        sub._complete()


class Engine:
    """The engine's side of a run as runners/run_loop.py does it each turn: the batch into the record, the record
    flushed, the batch published; the control channel serves the feed."""

    def __init__(self, run: Path, turns: int) -> None:
        self.run, self.turns = run, turns
        self.record = RunRecord(run)
        self.feed = feed.Feed()
        self.channel = Channel(run, lambda: None, lambda why: None, self.feed.add).open()
        self.turn = 0
        self.drop = threading.Event()  # the engine drops its viewers, as one too slow to keep up is dropped
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        for turn in range(self.turns):
            if turn == 10:  # the viewer subscribes mid-run, after it read the record's first ten turns
                end = time.monotonic() + 30
                while self.feed.idle and time.monotonic() < end:
                    time.sleep(0.005)
            batch = _batch(turn)
            if turn == self.turns - 1:
                batch.append(ev.RunFinished("ok", 0, "summary.json", W + 100, {}))
            for e in batch:
                if isinstance(e, ev.LogLines):
                    self.record.lines(e.rank, e.stream, e.wall, e.lines)
                else:
                    self.record.event(e)
            self.record.flush()
            if self.drop.is_set():
                for c in list(self.feed._subs):
                    self.feed._drop(c)
            self.feed.publish(batch, self.record)
            self.turn = turn
            time.sleep(0.01)
        self.channel.close()
        self.feed.close()
        self.record.close()


def _follow(run: Path, engine: Engine, drop_after: int | None = None) -> tuple[FollowSource, list]:
    got: list = []
    src = FollowSource(run, poll=0.02)

    def emit(batch: list) -> None:
        got.extend(batch)
        if drop_after is not None and src.feed_frames == drop_after:
            engine.drop.set()
    src.prepare(emit)
    code: list = []
    t = threading.Thread(target=lambda: code.append(src.run()), daemon=True)
    t.start()
    t.join(60)
    assert code == [0], "the follow ended with the run's exit code"
    return src, got


@pytest.mark.timeout(90)
@pytest.mark.parametrize("drop_after", [None, 5])
def test_a_viewer_that_takes_the_feed_mid_run_sees_the_record_exactly_once(tmp_path, drop_after):
    run = tmp_path / "run"
    run.mkdir()
    engine = Engine(run, 60)
    engine.thread.start()
    while engine.turn < 9:  # the viewer comes when the record already holds ten turns
        time.sleep(0.01)
    src, got = _follow(run, engine, drop_after)
    engine.thread.join(30)
    assert src.feed_frames >= (drop_after or 20), "the batches came through the feed"
    assert drop_after is None or src.feed_frames <= drop_after + 1, "dropped, it read the rest from the record"
    lines: dict = {}
    for e in got:
        if isinstance(e, ev.LogLines):
            lines.setdefault(e.rank, []).extend(e.lines)
    for r in (None, 0, 1, 2):
        name = "launcher.log" if r is None else f"rank{r}.log"
        kept = [ln.split(" ", 2)[2] for ln in (run / name).read_text().splitlines()]
        assert lines[r] == kept, f"{name}: every line once, in order"
    record = [_plain(e) for e in replay_events(run) if not isinstance(e, ev.LogLines)]
    assert sorted(map(str, record)) == sorted(str(_plain(e)) for e in got if not isinstance(e, ev.LogLines))
    assert sum(isinstance(e, ev.RunFinished) for e in got) == 1


class _Sizes:
    def sizes(self, ranks=None):
        return 0, {}


def test_a_viewer_that_does_not_keep_up_is_dropped_and_never_holds_the_engine(monkeypatch):
    import socket
    monkeypatch.setattr(feed, "MAX_BEHIND", 1 << 20)
    engine_end, viewer_end = socket.socketpair()
    f = feed.Feed()
    f.add(engine_end)
    batch = _batch(1, ranks=64)
    turns, t0 = 0, time.monotonic()
    while not f.idle and turns < 10_000:  # the viewer never reads
        f.publish(batch, _Sizes())
        turns += 1
    assert f.idle and turns < 10_000, "dropped once more than MAX_BEHIND waited for it"
    assert time.monotonic() - t0 < 5, "publish never waited on the viewer"
    viewer_end.settimeout(5)
    got = b""
    while chunk := viewer_end.recv(1 << 20):  # what it was sent, then the end of its feed
        got += chunk
    assert len(got) >= feed.HEAD.size
    viewer_end.close()


def test_the_last_frames_go_out_at_the_engines_end():
    import socket
    engine_end, viewer_end = socket.socketpair()
    f = feed.Feed()
    f.add(engine_end)
    f.publish([], _Sizes())  # the start frame
    for turn in range(50):
        f.publish(_batch(turn, ranks=64), _Sizes())
    sub = feed.Subscription(viewer_end)
    reader = threading.Thread(target=lambda: got.extend(_all(sub)), daemon=True)
    got: list = []
    reader.start()
    f.close()
    reader.join(10)
    kinds = [feed.read_frame(b)[0] for b in got]
    assert kinds == ["start"] + ["batch"] * 50


def _all(sub: feed.Subscription) -> list[bytes]:
    out: list[bytes] = []
    while (bodies := sub.frames(5.0)) is not None:
        out += bodies
    return out
