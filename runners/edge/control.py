"""The engine's control channel in its run directory (control.sock, engine.json, engine.lock): viewers in other
processes ping it, ask for stacks and stop the run through it; what a RUN_DIR is (not a record, live, finished, an
engine that died, another user's) is read from it without signalling anything."""
from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import pwd
import selectors
import socket
import struct
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

SOCKET, INFO, LOCK = "control.sock", "engine.json", "engine.lock"
SUN_PATH_MAX = 107  # bytes of a unix socket's path (sun_path is 108 with its NUL)
ASK_TIMEOUT = 5.0
OPS = ("ping", "dump", "stop", "hold", "release", "feed")


class ChannelError(Exception):
    """One line that says why a record's engine cannot be reached or served (its text is the whole message)."""


def socket_path(run_dir: Path) -> Path:
    """Where a record's socket goes: in the record, or (a path too long for a unix socket) in the user's runtime
    folder, named by a hash of the record's path."""
    here = Path(run_dir).resolve() / SOCKET  # (bound first as ".cXXXXXXXX/s" beside it: the same length)
    if len(os.fsencode(str(here))) <= SUN_PATH_MAX:
        return here
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = Path(runtime) / "ddptui" if runtime and os.path.isdir(runtime) else Path(f"/tmp/ddptui-{os.getuid()}")
    name = hashlib.sha1(str(Path(run_dir).resolve()).encode()).hexdigest()[:16]
    return base / f"{name}.sock"


# ---- the engine's side ---------------------------------------------------------------------------------------

class Channel:
    """Served by one daemon thread for the engine's whole life: holds engine.lock, answers one JSON line a request.
    `dump()` and `stop(why)` are the session's request_dump/request_stop; a viewer that said `hold` and goes away
    without `release` (the dashboard that launched the run died: its terminal closed) stops the run. A viewer that
    asks for the `feed` gets its connection handed to `feed` (runners/edge/feed.py Feed.add): the run's batches
    come on it from then on."""

    def __init__(self, run_dir: Path, dump: Callable[[], None], stop: Callable[[str], None],
                 feed: Callable[[socket.socket], None] | None = None) -> None:
        self.run_dir = Path(run_dir)
        self._dump, self._stop, self._feed = dump, stop, feed
        self.path = socket_path(self.run_dir)
        self._lock_fd = -1
        self._sock: socket.socket | None = None
        self._ino = 0
        self._wake_r, self._wake_w = -1, -1
        self._thread: threading.Thread | None = None
        self._closed = threading.Event()

    def open(self) -> Channel:
        """Take the record's lock (ChannelError when another engine holds it), bind the socket (0600), write
        engine.json, start serving."""
        fd = os.open(self.run_dir / LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            pid = read_info(self.run_dir).get("pid", "?")
            raise ChannelError(f"{self.run_dir}: another engine (pid {pid}) already holds this record "
                               f"({LOCK}); two engines on one record: nothing started") from None
        self._lock_fd = fd
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._sock = _bind_private(self.path)
        self._ino = os.stat(self.path).st_ino
        info = {"pid": os.getpid(), "host": socket.gethostname(), "uid": os.getuid(), "started": time.time(),
                "socket": str(self.path), "run_dir": str(self.run_dir.resolve())}
        tmp = self.run_dir / (INFO + ".tmp")
        tmp.write_text(json.dumps(info) + "\n")
        os.replace(tmp, self.run_dir / INFO)
        self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._thread = threading.Thread(target=self._serve, name="ddptui-control", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving, remove the socket, release the lock (engine.json stays: who the engine was)."""
        if self._closed.is_set():
            return
        self._closed.set()
        if self._wake_w >= 0:
            with contextlib.suppress(OSError):
                os.write(self._wake_w, b"x")
        if self._thread is not None:
            self._thread.join(2.0)
        with contextlib.suppress(OSError):
            if self._sock is not None and os.stat(self.path).st_ino == self._ino:  # ours, not a later engine's
                os.unlink(self.path)
        for fd in (self._wake_r, self._wake_w):
            if fd >= 0:
                os.close(fd)
        if self._sock is not None:
            self._sock.close()
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # the lock goes with its last fd
            self._lock_fd = -1

    def _serve(self) -> None:
        assert self._sock is not None, "opened before serving"
        sel = selectors.DefaultSelector()
        sel.register(self._sock, selectors.EVENT_READ, None)
        sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        conns: dict[socket.socket, dict] = {}
        while not self._closed.is_set():
            for key, _ in sel.select():
                if key.data == "wake":
                    break
                if key.data is None:
                    self._accept(sel, conns)
                else:
                    self._read(sel, conns, key.fileobj)  # type: ignore[arg-type]
        for c in conns:
            c.close()
        sel.close()

    def _accept(self, sel, conns: dict) -> None:
        assert self._sock is not None, "serving"
        try:
            c, _ = self._sock.accept()
        except OSError:
            return
        if peer_uid(c) not in (os.getuid(), 0):  # the socket is 0600: only root could get this far
            c.close()
            return
        c.setblocking(False)
        conns[c] = {"buf": b"", "hold": False}
        sel.register(c, selectors.EVENT_READ, "conn")

    def _read(self, sel, conns: dict, c: socket.socket) -> None:
        st = conns[c]
        try:
            data = c.recv(4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            sel.unregister(c)
            c.close()
            del conns[c]
            if st["hold"]:
                self._stop("the dashboard that launched the run went away without detaching")
            return
        st["buf"] += data
        if len(st["buf"]) > 65536:
            st["buf"] = b""
            return
        while b"\n" in st["buf"]:
            line, st["buf"] = st["buf"].split(b"\n", 1)
            answer = self._answer(line, st)
            with contextlib.suppress(OSError):
                c.setblocking(True)
                c.settimeout(1.0)
                c.sendall((json.dumps(answer) + "\n").encode())
                c.setblocking(False)
            if st.get("feed") and answer.get("ok") and self._feed is not None:  # the connection is the feed's now
                sel.unregister(c)
                del conns[c]
                self._feed(c)
                return

    def _answer(self, line: bytes, st: dict) -> dict:
        try:
            msg = json.loads(line)
            op = msg.get("op")
        except (ValueError, AttributeError):
            return {"ok": False, "error": "not a JSON object"}
        if op == "ping":
            return {"ok": True, "pid": os.getpid(), "run_dir": str(self.run_dir.resolve())}
        if op == "dump":
            self._dump()
        elif op == "stop":
            why = msg.get("why")  # what asked the viewer (the dashboard's terminal hung up), said in the record
            self._stop(why[:200] if isinstance(why, str) and why else "asked through its control channel")
        elif op in ("hold", "release"):
            st["hold"] = op == "hold"
        elif op == "feed":
            if self._feed is None:
                return {"ok": False, "error": "this engine serves no feed"}
            st["feed"] = True
        else:
            return {"ok": False, "error": f"unknown op {op!r} (one of {', '.join(OPS)})"}
        return {"ok": True, "pid": os.getpid()}


def _bind_private(path: Path) -> socket.socket:
    """A listening socket at `path`, mode 0600 from the moment it is there: bound in a private folder beside it
    (0700), made 0600, then renamed into place."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    folder = tempfile.mkdtemp(prefix=".c", dir=path.parent)  # ".cXXXXXXXX/s": no longer than the socket's own name
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        tmp = os.path.join(folder, "s")
        s.bind(tmp)
        os.chmod(tmp, 0o600)
        if path.is_socket():
            path.unlink()  # a dead engine's socket of this very record (the lock was free)
        os.rename(tmp, path)
        s.listen(16)
    except BaseException:
        s.close()
        raise
    finally:
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(folder, "s"))  # only if the rename did not happen
        os.rmdir(folder)
    return s


def peer_uid(c: socket.socket) -> int:
    creds = c.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[2]


# ---- a viewer's side -------------------------------------------------------------------------------------------

def read_info(run_dir: Path) -> dict:
    """engine.json, or {} when missing or unreadable."""
    try:
        d = json.loads((Path(run_dir) / INFO).read_text())
    except (OSError, ValueError):
        return {}
    return d if isinstance(d, dict) else {}


def lock_held(run_dir: Path) -> bool:
    """Whether an engine holds the record's lock now (an engine that died, even SIGKILLed, holds none)."""
    try:
        fd = os.open(Path(run_dir) / LOCK, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # a shared lock taken here goes with it
    return False


def connect(run_dir: Path, timeout: float = ASK_TIMEOUT) -> socket.socket:
    """A connection to the record's engine; ChannelError says why there is none."""
    path = Path(read_info(run_dir).get("socket") or socket_path(run_dir))
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(str(path))
    except OSError as e:
        s.close()
        raise ChannelError(f"{run_dir}: its engine does not answer on {path} ({e.strerror or e})") from None
    return s


def request(s: socket.socket, op: str, why: str = "") -> dict:
    s.sendall((json.dumps({"op": op, "why": why} if why else {"op": op}) + "\n").encode())
    buf = b""
    while b"\n" not in buf:
        got = s.recv(4096)
        if not got:
            raise ChannelError("the engine closed its control channel")
        buf += got
    return json.loads(buf.split(b"\n", 1)[0])


def ask(run_dir: Path, op: str, timeout: float = ASK_TIMEOUT, why: str = "") -> dict:
    """One request to the record's engine (ping, dump, stop): its answer; ChannelError (one line) when it cannot be
    asked. why: what asked a stop, for the record's line."""
    with connect(run_dir, timeout) as s:
        try:
            return request(s, op, why)
        except (OSError, ValueError) as e:
            raise ChannelError(f"{run_dir}: its engine did not answer {op!r} ({e})") from None


# ---- what a RUN_DIR is ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Facts:
    """What was seen of a RUN_DIR, read without signalling anything (`look`)."""
    run_dir: str
    is_record: bool  # it holds events.jsonl
    finished: bool  # it holds summary.json
    lock_held: bool
    socket_there: bool
    socket_uid: int | None
    my_uid: int
    engine_pid: int | None  # engine.json's
    answered_pid: int | None  # the pid a ping was answered for (None: not asked, or no answer)
    names_run: str | None = None  # the run engine.json names when it is not this one (a copied record)
    engine_host: str | None = None  # engine.json's host when it is not this one (a batch job's engine on its node)


@dataclass(frozen=True)
class RecordState:
    """`state`: not-a-record | copy | foreign | live | finished | dead | elsewhere | busy | two-engines; `line`: says
    it."""
    state: str
    line: str
    pid: int | None = None

    @property
    def usable(self) -> bool:
        """A viewer may follow it (live) or show it (finished)."""
        return self.state in ("live", "finished")


def decide(f: Facts) -> RecordState:
    """What a RUN_DIR is, from what was seen of it (pure)."""
    d, pid = f.run_dir, f.engine_pid
    who = f"pid {pid}" if pid else "pid unknown"
    if not f.is_record:
        return RecordState("not-a-record", f"{d}: not a ddptui run record (no events.jsonl)")
    if f.names_run is not None:
        return RecordState("copy", f"{d}: it names the run {f.names_run}, not this record (its engine.json: a copy "
                                   "of a record is no live run); nothing signalled", pid)
    if f.socket_there and f.socket_uid is not None and f.socket_uid != f.my_uid:
        return RecordState("foreign", f"{d}: its control socket belongs to {_user(f.socket_uid)}, not to you; "
                                      "nothing asked or signalled", pid)
    if f.finished:
        return RecordState("finished", f"{d}: the run has finished", pid)
    if not f.lock_held and f.engine_host:  # its lock, taken on another host, is not seen from here
        return RecordState("elsewhere", f"{d}: its engine ({who}) runs or ran on {f.engine_host}: whether it still "
                                        "runs cannot be seen from this host", pid)
    if not f.lock_held:
        stale = "; its control socket is stale" if f.socket_there else ""
        return RecordState("dead", f"{d}: the engine ({who}) died: the record is incomplete{stale}", pid)
    if f.answered_pid is None:
        return RecordState("busy", f"{d}: the engine ({who}) holds the record but does not answer on its control "
                                   "socket", pid)
    if pid is not None and f.answered_pid != pid:
        return RecordState("two-engines", f"{d}: two engines on one record: engine.json names pid {pid}, its socket "
                                          f"answers for pid {f.answered_pid}; nothing signalled", f.answered_pid)
    return RecordState("live", f"{d}: live, its engine is pid {f.answered_pid}", f.answered_pid)


def _user(uid: int) -> str:
    try:
        return f"user {pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def look(run_dir: Path, ping: bool = True) -> Facts:
    """What a RUN_DIR holds now (I/O; `decide` says what it is). A foreign socket is never connected to."""
    run_dir = Path(run_dir)
    info = read_info(run_dir)
    named = info.get("run_dir")
    if isinstance(named, str) and named != os.path.abspath(run_dir) and named != str(run_dir.resolve()):
        # a copy: its socket and lock are another run's
        return Facts(str(run_dir), (run_dir / "events.jsonl").is_file(), (run_dir / "summary.json").exists(), False,
                     False, None, os.getuid(), None, None, named)
    sock = Path(info.get("socket") or socket_path(run_dir))
    try:
        st = os.lstat(sock)
        there, uid = True, st.st_uid
    except OSError:
        there, uid = False, None
    held = lock_held(run_dir)
    pid = info.get("pid") if isinstance(info.get("pid"), int) else None
    answered = None
    finished = (run_dir / "summary.json").exists()
    if ping and there and held and uid == os.getuid() and not finished:
        try:
            answered = ask(run_dir, "ping", timeout=2.0).get("pid")
        except (ChannelError, OSError, ValueError):
            answered = None
    host = info.get("host")
    elsewhere = host if isinstance(host, str) and host and host != socket.gethostname() else None
    return Facts(str(run_dir), (run_dir / "events.jsonl").is_file(), finished, held, there, uid, os.getuid(), pid,
                 answered if isinstance(answered, int) else None, engine_host=elsewhere)


def state_of(run_dir: Path) -> RecordState:
    return decide(look(run_dir))
