"""A live (or finished) run's record followed from another process: what is there, then what the engine adds each
turn, as event batches for the console or the dashboard; stacks and stop go to the engine through its control
channel (runners/edge/control.py), and a viewer that leaves never stops the run."""
from __future__ import annotations

import os
import re
import resource
import threading
import time
from collections.abc import Callable
from operator import itemgetter
from pathlib import Path

from ..runners import events as ev
from ..runners.edge import control, feed, open_files
from ..runners.edge.record import event_line, log_groups

POLL = 0.25  # seconds between looks at the record: the engine flushes it once a loop turn (IDLE_POLL)
LOCK_EVERY = 1.0  # seconds between looks at whether the engine still holds the record, while nothing comes
_LOG = re.compile(r"(?:rank(\d+)|launcher)\.log\Z")


def _fd_budget(logs: int = 0) -> int:
    """How many of the record's files a follower keeps open: half of what this process may open, the soft limit
    raised first so that `logs` fit (1,024 rank logs read each turn cost three calls each when opened anew, one when
    kept open; Linux's usual soft limit is 1,024)."""
    soft, _ = open_files.ensure(2 * (logs + 32)) if logs else resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(0, (soft if soft != resource.RLIM_INFINITY else 1 << 16) // 2 - 32)


class Tail:
    """One file of the record read as it grows: its complete lines only. `keep`: the file stays open between reads
    (close() closes it)."""

    def __init__(self, path: Path, keep: bool = False) -> None:
        self.path, self.offset, self.partial, self.keep = path, 0, b"", keep
        self.fd: int | None = None

    def lines(self, size: int | None = None, end: int | None = None) -> list[str]:
        """size: the file's size as just seen (None: unknown); a file that did not grow is not read. end: read up to
        there and no further (where a viewer's feed starts)."""
        if end is not None:
            size = end
        if size is not None and size <= self.offset:
            return []
        fd = self.fd  # kept open: read without its size, whether it grew or not (one call)
        if fd is None:
            try:
                fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                return []
        chunks, pos = [], self.offset
        want = (size - self.offset if size is not None else 0) + 65536  # what grew, and room for more since
        try:
            while True:  # to the end (a short read), or to `end`
                n = want if end is None else min(want, end - pos)
                got = os.pread(fd, n, pos)
                chunks.append(got)
                pos += len(got)
                if len(got) < n or (end is not None and pos >= end):
                    break
        except OSError:
            return []
        finally:
            if self.keep and self.fd is None:
                self.fd = fd
            elif not self.keep:
                os.close(fd)
        data = b"".join(chunks)
        if not data:
            return []
        self.offset += len(data)
        data = self.partial + data
        cut = data.rfind(b"\n")
        if cut < 0:
            self.partial = data
            return []
        self.partial = data[cut + 1:]
        return data[:cut].decode("utf-8", errors="replace").split("\n")

    def skip_to(self, offset: int) -> None:
        """What is before `offset` came another way (the engine's feed, which says where each flush ended: a line's
        end)."""
        self.offset, self.partial = offset, b""

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class RecordReader:
    """What a record holds beyond what was read before, in time order (the same order as a replay,
    runners.edge.record.replay_events, read through its own line readers)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self.events = Tail(self.run_dir / "events.jsonl", keep=True)
        self.logs: dict[int | None, Tail] = {}
        self._budget = _fd_budget()
        self.bad = 0  # lines that did not decode
        self.finished: ev.RunFinished | None = None  # the last one read
        self.finishes = 0  # run_finished events read (a requeued batch job's record holds one per attempt)

    def _find_logs(self) -> dict[int | None, int]:
        """The size now of every log not kept open (one scandir: only the files that grew are opened); a log kept
        open is read without a look at its size (one call either way)."""
        sizes: dict[int | None, int] = {}
        with os.scandir(self.run_dir) as it:
            for entry in it:
                m = _LOG.match(entry.name)
                if m is None:
                    continue
                rank = int(m.group(1)) if m.group(1) is not None else None
                tail = self.logs.get(rank) or self._tail(rank)
                if tail.keep:
                    continue
                try:
                    sizes[rank] = entry.stat().st_size
                except OSError:
                    pass
        return sizes

    def _tail(self, rank: int | None) -> Tail:
        if len(self.logs) >= self._budget:  # more logs than it keeps open: the limit raised if it may be
            self._budget = _fd_budget(max(64, 2 * len(self.logs)))
        name = "launcher.log" if rank is None else f"rank{rank}.log"
        tail = self.logs[rank] = Tail(self.run_dir / name, keep=len(self.logs) < self._budget)
        return tail

    def skip(self, events_size: int, log_sizes: dict) -> None:
        """The record up to these sizes came through the engine's feed: reading goes on from there."""
        self.events.skip_to(events_size)
        for rank, size in log_sizes.items():
            (self.logs.get(rank) or self._tail(rank)).skip_to(size)

    def took(self, events: list[ev.Event]) -> None:
        """Events read or come through the feed: the run's end among them noted (`finished`, `finishes`)."""
        for e in events:
            if type(e) is ev.RunFinished:
                self.finished = e
                self.finishes += 1

    def close(self) -> None:
        """The files kept open between reads closed (reading again opens them again)."""
        for tail in (self.events, *self.logs.values()):
            tail.close()

    def read(self, upto: tuple[int, dict] | None = None) -> list[ev.Event]:
        """upto: (events.jsonl's size, each log's size) where a feed starts: read to there, no further (a log not
        named there is not read)."""
        sizes = self._find_logs()
        ends: dict = upto[1] if upto is not None else {}
        items: list[tuple[float, int, ev.Event]] = []
        for line in self.events.lines(end=upto[0] if upto is not None else None):
            if not line.strip():
                continue
            e = event_line(line)
            if isinstance(e, str):
                self.bad += 1
                continue
            items.append((getattr(e, "wall", 0.0), len(items), e))
        self.took([e for _, _, e in items])
        for rank, tail in self.logs.items():
            groups, bad = log_groups(tail.lines(sizes.get(rank), ends.get(rank, 0) if upto is not None else None))
            self.bad += bad
            for wall, stream, texts in groups:
                items.append((wall, len(items), ev.LogLines(rank, stream, wall, 0.0, tuple(texts))))
        items.sort(key=itemgetter(0))  # stable: lines of one time stay in the order read, as (wall, index) sorts them
        return [e for _, _, e in items]


class FollowSource:
    """The dashboard's and the console's source for a record another process's engine writes (`ddptui attach
    RUN_DIR`): request_stop leaves (the run goes on), stop_run asks the engine to stop it, request_dump asks for
    stacks. run() returns the run's exit code, 1 when its engine died before the end, 0 when the viewer left."""

    kind = "follow"

    def __init__(self, run_dir: Path, chunk: int = 500, poll: float = POLL, past: int = 0,
                 alive: Callable[[], bool] | None = None,
                 start: tuple[RecordReader, list[ev.Event]] | None = None, fed: bool = True) -> None:
        """past: run_finished events already in the record that do not end the follow (earlier attempts of a requeued
        batch job); alive: whether the engine still runs (default: it holds the record's lock); start: a reader of the
        record that has read already, and what it read (shown first), for the follow to go on from; fed: take the
        engine's feed where it serves one (runners/edge/feed.py), else read the record alone."""
        self.run_dir, self.chunk, self.poll, self.past, self.fed = Path(run_dir), chunk, poll, past, fed
        self._start = start
        self.alive = alive or (lambda: control.lock_held(self.run_dir))
        self._leave = threading.Event()
        self.emit: Callable[[list], None] = lambda batch: None
        self.left = False  # the viewer left before the run ended
        self.died: str | None = None  # the line said when the engine died before the end
        self.read_cpu = 0.0  # CPU seconds the reading of the record and the feed took so far (bench/ui_viewer.py says it apart)
        self.feed_frames = 0  # frames that came through the engine's feed (tests, the bench)

    def prepare(self, emit: Callable[[list], None]) -> None:
        self.emit = emit

    def run(self) -> int:
        reader, held = self._start or (RecordReader(self.run_dir), [])
        self._start = None  # once: a rerun (again()) reads the record from its beginning
        try:
            return self._follow(reader, held)
        finally:
            reader.close()

    def _read(self, reader: RecordReader) -> list[ev.Event]:
        cpu = time.thread_time()
        try:
            return reader.read()
        finally:
            self.read_cpu += time.thread_time() - cpu

    def _follow(self, reader: RecordReader, held: list[ev.Event]) -> int:
        got = held + self._read(reader)
        for i in range(0, len(got), self.chunk):
            self.emit(got[i:i + self.chunk])
        sub = feed.Subscription.open(self.run_dir) if self.fed and reader.finishes <= self.past else None
        if sub is not None:  # asked after the record's reading, not read again until the feed says where it starts
            with sub:
                code = self._fed(reader, sub)
            if code is not None:
                return code
        next_lock = 0.0
        while reader.finishes <= self.past:
            if self._leave.wait(self.poll):
                self.left = True
                return 0
            got = self._read(reader)
            if got:
                self.emit(got)
                continue
            mono = time.monotonic()
            if mono < next_lock:
                continue
            next_lock = mono + LOCK_EVERY
            if not self.alive():
                got = reader.read()  # what it wrote before it let go
                if reader.finishes <= self.past:
                    self.died = self._died_line()
                    wall = time.time()
                    got += [ev.LogLines(None, "err", wall, 0.0, (f"ddptui: {self.died}",)),
                            ev.RunFinished("incomplete", 1, "", wall, {})]
                if got:
                    self.emit(got)
                if reader.finishes <= self.past:
                    return 1
        self._last_words(reader)
        assert reader.finished is not None, "read past the earlier attempts' ends"
        return reader.finished.exit_code

    def _fed(self, reader: RecordReader, sub: feed.Subscription) -> int | None:
        """The run's batches as the engine sends them, after the record read up to where they start; the exit code
        once the run ended or the viewer left, None when the feed ended first (the record has the rest)."""
        started = False
        while not self._leave.is_set():
            try:
                bodies = sub.frames(self.poll)
            except feed.FeedError:
                return None
            if bodies is None:
                return None
            for body in bodies:
                cpu = time.thread_time()
                try:
                    kind, events_size, log_sizes, got = feed.read_frame(body)
                except feed.FeedError:
                    return None
                if kind == "start" and not started:
                    got = reader.read((events_size, log_sizes))
                    started = True
                elif kind == "start" or not started:
                    return None  # not the frames a feed sends: the record is read from where the feed left it
                else:
                    reader.skip(events_size, log_sizes)
                    reader.took(got)
                self.read_cpu += time.thread_time() - cpu
                self.feed_frames += 1
                if got:
                    self.emit(got)
                if reader.finishes > self.past:
                    self._last_words(reader)
                    assert reader.finished is not None, "a run_finished was read"
                    return reader.finished.exit_code
        self.left = True
        return 0

    def _last_words(self, reader: RecordReader) -> None:
        """The engine flushes the record's files one after the other: once it let go of the record (at most a
        moment after its end), what it wrote after the end was read."""
        end = time.monotonic() + 2.0
        while self.alive() and time.monotonic() < end and not self._leave.wait(0.05):
            pass
        got = reader.read()
        if got:
            self.emit(got)

    def _died_line(self) -> str:
        if (self.run_dir / "summary.json").exists():
            return f"{self.run_dir}: the record has summary.json but no run_finished event: it is incomplete"
        pid = control.read_info(self.run_dir).get("pid", "unknown")
        return f"the engine (pid {pid}) died: the record is incomplete"

    def request_stop(self) -> None:
        """Leave: stop following (the run goes on)."""
        self._leave.set()

    def request_dump(self) -> bool:
        try:
            control.ask(self.run_dir, "dump")
        except control.ChannelError:
            return False
        return True

    def stop_run(self) -> str:
        """Ask the engine to stop the run (as `s` in the dashboard that launched it): what happened, in words."""
        try:
            control.ask(self.run_dir, "stop")
        except control.ChannelError as e:
            return f"cannot stop it: {e}"
        return "asked the engine to stop every rank…"

    def again(self) -> FollowSource:
        return FollowSource(self.run_dir, self.chunk, self.poll, fed=self.fed)  # (a record's rerun starts from its beginning)
