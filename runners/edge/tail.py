"""Following the files ranks write into, in large chunks, yielding complete lines only."""
from __future__ import annotations

import ctypes
import glob
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from ..evidence.rank_learn import RankLearner

CHUNK = 1 << 20  # bytes read per file per turn: one syscall serves thousands of lines
MAX_LINE = 64 * 1024  # longer lines are cut here (the raw file keeps them whole)


class Lines(list):
    """A batch of lines that also carries its newline-joined text, so batch-wide scans need no join."""

    __slots__ = ("text",)

    def __init__(self, lines, text: str | None = None) -> None:
        super().__init__(lines)
        self.text = "\n".join(self) if text is None else text


def _has_long_line(text: str, limit: int) -> bool:
    """Whether any line of `text` is longer than `limit`: jumps window by window instead of measuring every line."""
    start, n = 0, len(text)
    while n - start > limit:
        nl = text.rfind("\n", start, start + limit + 1)
        if nl < 0:
            return True
        start = nl + 1
    return False


@dataclass
class FileTail:
    path: str
    rank: int | None
    stream: str
    fd: int | None = None
    partial: bytes = b""
    dropped: int = 0  # bytes of the current over-long line not kept
    full: bool = False  # the last read filled a whole chunk: more is waiting
    learn: bool = False  # `rank` is a guess: the folder's hello names the rank (runners/evidence/rank_learn.py)
    start: int = 0  # the offset reading begins at (`ddptui attach`: what was there before is shown once, not followed)

    def read(self) -> Lines | list[str]:
        """Complete lines that arrived since the last call (possibly none)."""
        if self.fd is None:
            try:
                self.fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError:
                return []
            if self.start:
                os.lseek(self.fd, self.start, os.SEEK_SET)
        data = os.read(self.fd, CHUNK)
        self.full = len(data) == CHUNK
        if not data:
            return []
        return self._split(data)

    def _split(self, data: bytes) -> Lines | list[str]:
        buf = self.partial + data if self.partial else data
        nl = buf.rfind(b"\n")
        complete, tail = (None, buf) if nl < 0 else (buf[:nl], buf[nl + 1:])
        ended_long = self.dropped if complete is not None else 0  # the over-long line finally ended
        if ended_long:
            self.dropped = 0
        if len(tail) > MAX_LINE:
            self.dropped += len(tail) - MAX_LINE
            tail = tail[:MAX_LINE]
        self.partial = tail
        if complete is None:
            return []
        text = complete.decode("utf-8", "replace")
        if "\r" in text:
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        lines = text.split("\n")
        joined: str | None = text
        if len(text) > MAX_LINE and _has_long_line(text, MAX_LINE):
            lines = [ln if len(ln) <= MAX_LINE else ln[:MAX_LINE] + f" …[{len(ln) - MAX_LINE} more chars]"
                     for ln in lines]
            joined = None
        if ended_long:
            lines[0] += f" …[{ended_long} more bytes]"
            joined = None
        return Lines(lines, joined)

    def drain(self) -> Iterator[list[str]]:
        """Everything left, chunk by chunk, the last partial line included (once the writer has exited)."""
        while True:
            got = self.read()
            if got:
                yield got
            elif self.fd is None or not self._more():
                break
        if self.partial or self.dropped:
            last = self.partial.decode("utf-8", "replace").rstrip("\r")
            if self.dropped:
                last += f" …[{self.dropped} more bytes]"
            self.partial, self.dropped = b"", 0
            yield [last]

    def _more(self) -> bool:
        assert self.fd is not None  # drain asks only while the file is open
        try:
            return os.lseek(self.fd, 0, os.SEEK_CUR) < os.fstat(self.fd).st_size
        except OSError:
            return False

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


@dataclass
class GlobTail:
    """A file whose exact path is only known once its writer creates it (torchrun's run-id folder)."""

    pattern: str
    rank: int | None
    stream: str
    tails: dict[str, FileTail] = field(default_factory=dict)
    learn: bool = False

    def discover(self) -> None:
        for path in sorted(glob.glob(self.pattern)):
            if path not in self.tails:
                self.tails[path] = FileTail(path, self.rank, self.stream, learn=self.learn)


class FileWatch:
    """inotify on the files being followed: `fd` turns readable when one of them is written (Linux)."""

    _IN_MODIFY = 0x2

    def __init__(self) -> None:
        self.fd: int | None = None
        self._watched: set[str] = set()
        try:
            self._libc = ctypes.CDLL(None, use_errno=True)
            fd = self._libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
            self.fd = fd if fd >= 0 else None
        except (OSError, AttributeError):  # no inotify: the engine just sleeps its timeout
            pass

    def add(self, path: str) -> None:
        if self.fd is not None and path not in self._watched:
            if self._libc.inotify_add_watch(self.fd, os.fsencode(path), self._IN_MODIFY) >= 0:
                self._watched.add(path)

    def clear(self) -> None:
        """Forget the writes seen so far (the reads that follow will get their data)."""
        if self.fd is None:
            return
        try:
            while os.read(self.fd, 1 << 16):
                pass
        except OSError:  # BlockingIOError: nothing left
            pass

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class Tailer:
    """All of a run's files; `poll()` returns (rank, stream, lines) for each file that grew."""

    def __init__(self) -> None:
        self.files: list[FileTail] = []
        self.globs: list[GlobTail] = []
        self.watch = FileWatch()
        self.backlog = False  # the last poll left data unread in some file
        self.learner = RankLearner()

    def add(self, path: str, rank: int | None, stream: str, learn: bool = False, start: int = 0) -> None:
        """Follow `path` (a glob: its files once they appear) as `rank`'s; `learn`: the rank is a guess that the
        hello report read in the file's folder corrects (LogSource.learn_rank); `start`: the byte offset of a plain
        path to read from (0: the beginning)."""
        if any(ch in path for ch in "*?["):
            self.globs.append(GlobTail(path, rank, stream, learn=learn))
        else:
            self.files.append(FileTail(path, rank, stream, learn=learn, start=start))

    def learned_file(self, rank: int, stream: str) -> str | None:
        """The newest `stream` file of a folder whose hello named `rank` (learn_rank sources), else None."""
        hits = [t.path for t in self._all() if t.learn and t.stream == stream
                and self.learner.learned.get(os.path.dirname(t.path)) == rank]
        return hits[-1] if hits else None

    def take_renamed(self) -> list[tuple[int | None, int]]:
        """(guess, rank) of the folders whose hello named another rank than the plan guessed (RankLearner)."""
        return self.learner.take_renamed()

    def _attribute(self, t: FileTail, lines, mono: float) -> list[tuple[int | None, str, list[str]]]:
        if not t.learn:
            return [(t.rank, t.stream, lines)]
        return self.learner.feed(os.path.dirname(t.path), t.rank, t.stream, lines, mono)

    def _all(self) -> list[FileTail]:
        return self.files + [t for g in self.globs for t in g.tails.values()]

    def discover(self) -> None:
        for g in self.globs:
            g.discover()

    def all_found(self) -> bool:
        """Every file known only by a pattern has appeared."""
        return all(g.tails for g in self.globs)

    def poll(self) -> list[tuple[int | None, str, list[str]]]:
        out = []
        self.watch.clear()
        backlog = False
        mono = time.monotonic()
        for t in self._all():
            lines = t.read()
            if t.fd is not None:
                self.watch.add(t.path)
            backlog = backlog or t.full
            if lines:
                out += self._attribute(t, lines, mono)
        self.backlog = backlog
        return out + self.learner.due(mono)

    def drain(self) -> Iterator[tuple[int | None, str, list[str]]]:
        """What is left in every file, one chunk at a time (memory stays bounded by CHUNK)."""
        self.discover()
        for t in self._all():
            for lines in t.drain():
                yield from self._attribute(t, lines, time.monotonic())
        yield from self.learner.release()

    def close(self) -> None:
        for t in self._all():
            t.close()
        self.watch.close()
