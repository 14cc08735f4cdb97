"""In a rank, once its process group exists: PyTorch's debug server on a unix socket, and live collective progress."""
from __future__ import annotations

import atexit
import contextlib
import functools
import json
import os
import stat
import threading
from collections.abc import Callable
from typing import Any

import ddptui_scope

SOCKETS = "DDPTUI_SOCKETS"  # the folder of the run's sockets (runners/launch/fr_env.py); taken out of os.environ (GIVEN)
PERIOD = 2.0  # seconds between looks at Flight Recorder's per-group summary (0.06 ms each: nothing measurable)
SUN_PATH_MAX = 107  # bytes of a unix socket path, its NUL not counted
# c10's minimum log severity (0 INFO, 1 WARNING, 2 ERROR, from TORCH_CPP_LOG_LEVEL), an exported int of libc10 that
# c10d's C10D_WARNING reads at every call; torch has no Python setter for it
C10_LOG_LEVEL = "FLAGS_caffe2_log_level"
C10_ERROR = 2
_PREFIXES = ("gloo:", "nccl:", "xccl:", "ucc:", "mpi:")

_state = {"started": False}
_server: Any = None  # the C++ server stops when this object is collected: held for the life of the process
_thread: threading.Thread | None = None
_exiting = threading.Event()  # the interpreter began to shut down: the thread leaves at once
try:
    threading._register_atexit(_exiting.set)  # type: ignore[attr-defined]  # before non-daemon threads are joined
except Exception:
    pass


def patch(c10d: Any) -> Callable[[], None]:
    """Wrap torch.distributed.distributed_c10d.init_process_group (post-import, before torch.distributed re-exports
    it): after it returns, start the server and the thread once. Returns what undoes the wrapping."""
    orig = c10d.init_process_group

    @functools.wraps(orig)
    def init_process_group(*args, **kwargs):
        out = orig(*args, **kwargs)
        try:
            started(c10d)
        except Exception:
            pass
        return out

    c10d.init_process_group = init_process_group

    def undo() -> None:
        if c10d.init_process_group is init_process_group:
            c10d.init_process_group = orig

    return undo


def started(c10d: Any) -> bool:
    """Start the debug server and the collectives thread, the first time a process group is up in this process."""
    if _state["started"]:
        return False
    _state["started"] = True
    folder = ddptui_scope.GIVEN.get(SOCKETS)
    if not folder:
        return False
    import ddptui_report

    rank = c10d.get_rank()
    path = start_server(folder, rank)
    if path is not None:
        ddptui_report.emit("debug_server", r=rank, path=path)
    start_thread(rank, c10d)
    return True


def socket_path(folder: str, rank: int) -> str | None:
    path = os.path.join(folder, f"r{rank}.sock")
    return path if len(os.fsencode(path)) <= SUN_PATH_MAX else None


def own_folder(path: str) -> bool:
    """Made if missing (a rank on another node), and only this user's: a folder of another user is not used."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        for p in (os.path.dirname(path), path):
            st = os.lstat(p)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
                return False
        return True
    except OSError:
        return False


def start_server(folder: str, rank: int) -> str | None:
    """torch's _WorkerServer on FOLDER/r<rank>.sock (private name: feature-detected); the path, or None."""
    global _server
    try:
        from torch._C._distributed_c10d import _WorkerServer
    except Exception:
        return None
    path = socket_path(folder, rank)
    if path is None or not own_folder(folder):
        return None
    try:
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            os.unlink(path)  # left by an earlier process of this rank (an elastic restart)
    except OSError:
        pass
    try:
        with c10_quiet():  # its "Server listening to UNIX ..." warning is ddptui's, not the program's output
            _server = _WorkerServer(path)
    except Exception:
        return None
    atexit.register(_remove_socket, path, os.getpid())
    return path


def loaded_library(maps: str, name: str) -> str | None:
    """The path of the shared library NAME (`libc10.so`) among /proc/self/maps' mappings, or None."""
    for line in maps.splitlines():
        fields = line.split(None, 5)  # address perms offset dev inode path
        if len(fields) == 6 and os.path.basename(fields[5].strip()) == name:
            return fields[5].strip()
    return None


def _c10_log_level() -> Any:
    """c10's log level as a ctypes int inside the libc10 this process loaded (torch's), or None."""
    import ctypes

    try:
        with open("/proc/self/maps") as f:
            path = loaded_library(f.read(), "libc10.so")
        return ctypes.c_int.in_dll(ctypes.CDLL(path), C10_LOG_LEVEL) if path else None
    except (OSError, ValueError):
        return None


@contextlib.contextmanager
def c10_quiet():
    """c10's C++ warnings off for the moment of the block (errors still pass), then the level as it was. Other
    threads' C++ warnings in that moment (the server's constructor: well under a millisecond) are dropped too."""
    level = _c10_log_level()
    if level is None:
        yield
        return
    was = level.value
    level.value = max(was, C10_ERROR)
    try:
        yield
    finally:
        level.value = was


def _remove_socket(path: str, pid: int) -> None:
    """At exit: the socket file (torch leaves it), and its folder once empty (on another node nobody else would)."""
    if os.getpid() != pid:  # a fork child exiting normally: the socket is its parent's
        return
    for remove in (lambda: os.unlink(path), lambda: os.rmdir(os.path.dirname(path))):
        try:
            remove()
        except OSError:
            pass


# ---- the collectives thread ---------------------------------------------------------------------------------


def start_thread(rank: int, c10d: Any) -> None:
    global _thread
    try:
        from torch._C._distributed_c10d import _dump_fr_trace_json  # type: ignore[attr-defined]  # not in the stubs
    except Exception:
        return

    def summary() -> dict:
        return json.loads(_dump_fr_trace_json(includeCollectives=False))

    def full() -> dict:
        return json.loads(_dump_fr_trace_json(includeCollectives=True, onlyActive=False))

    watch = GroupChanges(lambda: groups(c10d), summary, full)
    # Not a daemon: like ddptui_report's flusher it ends when the main thread ends, before the interpreter
    # finalizes (a daemon thread left there made two-rank gloo runs abort at exit).
    _thread = threading.Thread(target=_loop, args=(rank, watch), name="ddptui-collectives")
    _thread.start()


def _loop(rank: int, watch: GroupChanges) -> None:
    import ddptui_report

    main = threading.main_thread()
    while main.is_alive() and not _exiting.is_set():
        try:
            pgs = watch.look()
            if pgs:
                ddptui_report.emit("coll", r=rank, pgs=pgs)
        except Exception:
            pass
        if _exiting.wait(PERIOD):
            break


def groups(c10d: Any) -> dict[str, tuple[str | None, list[int] | None]]:
    """The process groups this rank is in, by the name Flight Recorder files them under: name -> (desc, ranks)."""
    out: dict[str, tuple[str | None, list[int] | None]] = {}
    world = getattr(c10d, "_world", None)
    if world is None:
        return out
    members = dict(world.pg_group_ranks)
    for pg, name in list(world.pg_names.items()):
        ranks = members.get(pg)
        out[str(name)] = (getattr(pg, "group_desc", None), sorted(ranks) if ranks is not None else None)
    return out


def _int(v: Any) -> int:
    try:
        return max(int(v), 0)  # -1: none yet; sequence numbers start at 1, so the last one is also the count
    except (TypeError, ValueError):
        return 0


def _config_groups(config: Any) -> dict[str, tuple[str | None, list[int] | None]]:
    """pg_config as a fallback for names: gloo files its default group under '' (entries say '0')."""
    out: dict[str, tuple[str | None, list[int] | None]] = {}
    if not isinstance(config, dict):
        return out
    for name, c in config.items():
        if not isinstance(c, dict):
            continue
        try:
            ranks = [int(x) for x in json.loads(c.get("ranks", "null")) or []] or None
        except (ValueError, TypeError):
            ranks = None
        out[str(name) or "0"] = (c.get("desc") or None, ranks)
    return out


def _status_by_name(status: dict, order: list[str]) -> dict:
    """pg_status is keyed by the rank's own group id (its backends counted in creation order), not the group's name:
    on a rank outside an earlier subgroup they differ (world 4, new_group([0,1]) then new_group([2,3]): ranks 2, 3 file
    their pair '2' under '1'). `order`: the names of the rank's groups in creation order (torch's pg_names, kept)."""
    if not order:
        return status
    out = {}
    for key, v in status.items():
        i = int(key) if str(key).isdigit() else -1
        out[order[i] if 0 <= i < len(order) else key] = v
    return out


def progress(summary: dict, named: dict[str, tuple[str | None, list[int] | None]]) -> dict[str, dict]:
    """Per group: desc, ranks, enqueued, completed, from the summary's pg_status and the groups' names in creation
    order (a group with no collective yet counts 0 and 0)."""
    status = _status_by_name(summary.get("pg_status") or {}, list(named))
    fallback = _config_groups(summary.get("pg_config"))
    out = {}
    for name in sorted(set(status) | set(named), key=lambda n: (len(n), n)):
        s = status.get(name) or {}
        desc, ranks = named.get(name) or fallback.get(name) or (None, None)
        out[name] = {"desc": desc, "ranks": ranks, "enqueued": _int(s.get("last_enqueued_collective")),
                     "completed": _int(s.get("last_completed_collective"))}
    return out


def frontier(entries: list, name: str, completed: int) -> dict | None:
    """The group's first collective not completed: {seq, op, sizes, dtypes, backend} from a full dump's entries
    (backend: "gloo" from its "gloo:all_reduce", None without a prefix)."""
    best = None
    for e in entries or ():
        try:
            pg = e.get("process_group") or ()
            if e.get("is_p2p") or not pg or str(pg[0]) != name:
                continue
            seq = int(e.get("collective_seq_id"))
        except (TypeError, ValueError, AttributeError):
            continue
        if seq > completed and (best is None or seq < best[0]):
            best = (seq, e)
    if best is None:
        return None
    seq, e = best
    op, backend = str(e.get("profiling_name") or ""), None
    for p in _PREFIXES:
        if op.startswith(p):
            op, backend = op[len(p):], p[:-1]
            break
    return {"seq": seq, "op": op, "sizes": e.get("input_sizes"), "dtypes": e.get("input_dtypes"), "backend": backend}


class GroupChanges:
    """What changed since the previous look: the groups to report, with the frontier of one that stays pending."""

    def __init__(self, named: Callable[[], dict], summary: Callable[[], dict], full: Callable[[], dict]) -> None:
        self._named, self._summary, self._full = named, summary, full
        self._prev: dict[str, tuple] = {}  # group -> (desc, ranks, enqueued, completed) as last reported
        self._dumped: dict[str, tuple[int, int]] = {}  # group -> (enqueued, completed) a full dump was taken at
        self._names: dict[str, tuple] = {}  # every group seen: a destroyed group keeps its name in the reports

    def look(self) -> dict[str, dict]:
        self._names.update(self._named())
        now = progress(self._summary(), self._names)
        out: dict[str, dict] = {}
        stuck = []
        for name, g in now.items():
            key = (g["desc"], g["ranks"], g["enqueued"], g["completed"])
            if self._prev.get(name) != key:
                self._prev[name] = key
                out[name] = {**g, "frontier": None}
            elif g["enqueued"] > g["completed"] and self._dumped.get(name) != key[2:]:
                stuck.append(name)  # pending since the previous look at least
        if stuck:
            for name in stuck:  # before the dump: one that fails is not tried again until the numbers move
                self._dumped[name] = (now[name]["enqueued"], now[name]["completed"])
            entries = (self._full() or {}).get("entries") or []
            for name in stuck:
                out[name] = {**now[name], "frontier": frontier(entries, name, now[name]["completed"])}
        return out
