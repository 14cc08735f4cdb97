"""The engine's live feed: each turn's batch, as the in-process front end gets it, sent to the viewers that asked for
it on the control channel, so that a viewer of 1,024 ranks decodes one frame a turn instead of reading and parsing
1,025 files (bench/ui_viewer.py). The record stays the truth: every frame says how far the record's files are
written with it, so a viewer reads the record up to where its feed starts and goes back to it, exactly, when the
feed ends early (a viewer too slow to keep up, an engine that died)."""
from __future__ import annotations

import contextlib
import json
import marshal
import select
import socket
import struct
import threading
import time
from collections.abc import Iterable

from .. import events as ev
from .record import event_line, event_text

MARSHAL = 4  # marshal's format version: read alike by every Python ddptui runs on (3.10-3.13)
HEAD = struct.Struct("<I")  # a frame: its body's length, then the body (marshal of a tuple)
MAX_FRAME = 1 << 28  # bytes: a longer length is no frame of ours
MAX_BEHIND = 32 << 20  # bytes a viewer may fall behind: more and it is dropped (it reads the record from there)
SEND_BUFFER = 4 << 20  # the socket's send buffer asked for: a 1,024-rank turn is ~300 kB
CLOSE_WAIT = 2.0  # seconds the engine's end waits for its last frames to go out
_LOG, _PROGRESS, _OTHER = 0, 1, 2
_new = object.__new__


class FeedError(Exception):
    """A frame that is not one of ours: the viewer leaves the feed and reads the record."""


# ---- frames ----------------------------------------------------------------------------------------------------
def _item(e: ev.Event) -> tuple:
    if type(e) is ev.LogLines:
        return (_LOG, e.rank, e.stream, e.wall, tuple(e.lines))
    if type(e) is ev.Progress:
        return (_PROGRESS, e.rank, e.step, e.loss, e.wall, e.source, tuple(tuple(p) for p in e.losses), e.samples,
                e.step_time)
    return (_OTHER, event_text(e))  # as the record writes it, read back as replay reads it


def frame(events_size: int, log_sizes: dict, batch: Iterable[ev.Event] = (), start: bool = False) -> bytes:
    """One frame: how far events.jsonl and the logs the batch wrote to are written (bytes), and the batch; `start`:
    the first frame a viewer gets, whose sizes are every log's."""
    kind = "start" if start else "batch"
    try:
        body = marshal.dumps((kind, events_size, log_sizes, [_item(e) for e in batch]), MARSHAL)
    except ValueError:  # a field of a type marshal does not take (a str or float subclass): as the record has it
        body = marshal.dumps((kind, events_size, log_sizes, [(_OTHER, event_text(e)) for e in batch]), MARSHAL)
    return HEAD.pack(len(body)) + body


def read_frame(body: bytes) -> tuple[str, int, dict, list[ev.Event]]:
    """(kind, events.jsonl's size, log sizes, events) of a frame's body; FeedError for anything else."""
    try:
        kind, events_size, log_sizes, items = marshal.loads(body)
        if kind not in ("start", "batch") or type(events_size) is not int or type(log_sizes) is not dict:
            raise FeedError(f"not a frame ({kind!r})")
        return kind, events_size, log_sizes, [_event(t) for t in items]
    except FeedError:
        raise
    except (ValueError, TypeError, EOFError, IndexError, KeyError) as e:
        raise FeedError(f"a frame that does not decode: {e}") from None


def _event(t: tuple) -> ev.Event:
    k = t[0]
    if k == _LOG:
        lines = _new(ev.LogLines)  # every field set, as runners/edge/progress_line.py builds a Progress
        lines.__dict__.update(rank=t[1], stream=t[2], wall=t[3], mono=0.0, lines=t[4])
        return lines
    if k == _PROGRESS:
        p = _new(ev.Progress)
        p.__dict__.update(rank=t[1], step=t[2], loss=t[3], wall=t[4], source=t[5], losses=t[6], samples=t[7],
                          step_time=t[8])
        return p
    got = event_line(t[1]) if k == _OTHER else f"item kind {k!r}"
    if isinstance(got, str):
        raise FeedError(got)
    return got


# ---- the engine's side -----------------------------------------------------------------------------------------
class Feed:
    """The viewers subscribed to the run's batches. `add` comes from the control channel's thread; `publish` and
    `close` from the engine's, which never waits on a viewer: what a socket does not take now waits in that
    viewer's buffer, and a viewer more than MAX_BEHIND behind is dropped."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._new: list[socket.socket] = []
        self._subs: dict[socket.socket, bytearray] = {}

    def add(self, conn: socket.socket) -> None:
        """A viewer's connection, answered already: it gets its start frame at the engine's next flush."""
        with contextlib.suppress(OSError):
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
        conn.setblocking(False)
        with self._lock:
            self._new.append(conn)

    @property
    def idle(self) -> bool:
        return not self._subs and not self._new

    def publish(self, batch: list, record) -> None:
        """After the record's flush: the batch to every viewer, and a start frame to each new one (record:
        runners/edge/record.RunRecord, whose sizes the frames carry)."""
        if self.idle:
            return
        if batch and self._subs:
            events_size, logs = record.sizes({e.rank for e in batch if type(e) is ev.LogLines})
            data = frame(events_size, logs, batch)
            for out in self._subs.values():
                out += data
        with self._lock:
            new, self._new = self._new, []
        if new:  # the record with this batch in it: theirs to read, the next batch is their first
            events_size, logs = record.sizes()
            start = frame(events_size, logs, start=True)
            for c in new:
                self._subs[c] = bytearray(start)
        for c in list(self._subs):
            self._send(c)

    def _send(self, c: socket.socket) -> bool:
        """What the socket takes of the viewer's buffer now; False once the viewer is dropped."""
        out = self._subs[c]
        try:
            while out:
                n = c.send(out)
                del out[:n]
        except BlockingIOError:
            if len(out) <= MAX_BEHIND:
                return True
        except OSError:
            pass
        else:
            return True
        self._drop(c)
        return False

    def _drop(self, c: socket.socket) -> None:
        del self._subs[c]
        c.close()

    def close(self) -> None:
        """The run's end: the last frames go out (within CLOSE_WAIT), then every feed closes; a viewer that did not
        get them all reads the rest from the record."""
        end = time.monotonic() + CLOSE_WAIT
        with self._lock:
            new, self._new = self._new, []
        for c in new:
            c.close()
        while self._subs:
            waiting = [c for c, out in self._subs.items() if out]
            left = end - time.monotonic()
            if not waiting or left <= 0:
                break
            for c in select.select([], waiting, [], left)[1]:
                self._send(c)
        for c in list(self._subs):
            self._drop(c)


# ---- a viewer's side -------------------------------------------------------------------------------------------
class Subscription:
    """A viewer's feed of a live record's engine: its frames' bodies as they come (read_frame decodes them)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buf = bytearray()
        self._eof = False

    @classmethod
    def open(cls, run_dir, timeout: float = 2.0) -> Subscription | None:
        """The feed of the record's engine; None when there is none to have (no engine on this host, an engine from
        before feeds, one that does not answer): the viewer reads the record."""
        from . import control
        try:
            s = control.connect(run_dir, timeout)
        except control.ChannelError:
            return None
        try:
            s.sendall(b'{"op": "feed"}\n')
            line = bytearray()
            while not line.endswith(b"\n"):  # the answer only: the frames after it are read as frames
                peek = s.recv(4096, socket.MSG_PEEK)
                if not peek:
                    raise OSError("closed")
                cut = peek.find(b"\n")
                line += s.recv(cut + 1 if cut >= 0 else len(peek))
            ok = json.loads(line).get("ok") is True
        except (OSError, ValueError, AttributeError):
            ok = False
        if not ok:
            s.close()
            return None
        return cls(s)

    def frames(self, timeout: float) -> list[bytes] | None:
        """The bodies of the frames complete now, waiting up to `timeout` for one; None once the feed has ended."""
        got = self._complete()
        if got or self._eof:
            return got or None
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(1 << 20)
        except TimeoutError:
            return []
        except OSError:
            data = b""
        if not data:
            self._eof = True
            return None
        self._buf += data
        self.sock.setblocking(False)
        try:  # what else has come: a 1,024-rank turn is several reads
            while data := self.sock.recv(1 << 20):
                self._buf += data
            self._eof = True
        except BlockingIOError:
            pass
        except OSError:
            self._eof = True
        return self._complete() or ([] if not self._eof else None)

    def _complete(self) -> list[bytes]:
        out, buf, at = [], self._buf, 0
        while len(buf) - at >= HEAD.size:
            (n,) = HEAD.unpack_from(buf, at)
            if n > MAX_FRAME:
                raise FeedError(f"a frame of {n} bytes")
            if len(buf) - at - HEAD.size < n:
                break
            out.append(bytes(buf[at + HEAD.size:at + HEAD.size + n]))
            at += HEAD.size + n
        del buf[:at]
        return out

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
