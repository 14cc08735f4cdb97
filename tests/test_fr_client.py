"""The Flight Recorder client: HTTP over a unix socket, the relay program, and the dump normalised for torchfrtrace."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from ddptui.runners.edge import fr_client
from ddptui.runners.evidence import fr_records

from ddptui.runners.edge import fr_relay

from ddptui.runners.edge import stacks
from ddptui.runners.evidence import stack_types

pytestmark = pytest.mark.any_python

DATA = Path(__file__).parent / "data" / "fr_socket"


def _dumps(case: str) -> dict[int, dict]:
    return {int(p.stem.split("_")[1]): json.loads(p.read_text()) for p in sorted((DATA / case).glob("rank_*.json"))}


class Server:
    """A unix-socket server on a thread that answers every connection with `reply` (bytes) after reading the
    request head; None: reads and never answers."""

    def __init__(self, path: str, reply: bytes | None) -> None:
        self.path, self.reply, self.requests = path, reply, []
        if path == "tcp":  # a TCP server on an ephemeral port, as a rank's start_debug_server() runs
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self.sock.bind(("127.0.0.1", 0))
            self.path = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        else:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.bind(path)
        self.sock.listen(8)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                head = b""
                while b"\r\n\r\n" not in head:
                    data = conn.recv(4096)
                    if not data:
                        break
                    head += data
                self.requests.append(head.decode())
                if self.reply is None:
                    self.stop.wait(30)
                else:
                    conn.sendall(self.reply)

    def close(self) -> None:
        self.stop.set()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the accept() (close alone does not)
        except OSError:
            pass
        self.sock.close()
        self.thread.join(5)


@pytest.fixture
def sockdir():
    import tempfile
    with tempfile.TemporaryDirectory(prefix="frt", dir="/tmp") as d:  # short: a unix socket path is < 108 bytes
        yield d


@pytest.fixture
def serve(sockdir):
    made = []

    def start(name: str, reply: bytes | None) -> str:
        s = Server(os.path.join(sockdir, name), reply)
        made.append(s)
        return s.path
    yield start
    for s in made:
        s.close()


def _http(body: bytes, status: str = "200 OK", chunked: bool = False) -> bytes:
    if chunked:
        parts = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + 7]), body[i:i + 7]) for i in range(0, len(body), 7))
        return (f"HTTP/1.1 {status}\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n").encode() + parts + b"0\r\n\r\n"
    return f"HTTP/1.1 {status}\r\nConnection: close\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body


@pytest.mark.timeout(30)
def test_post_reads_content_length_and_chunked_bodies_and_sends_a_post(serve):
    body = json.dumps(_dumps("rank_conditional_barrier")[0]).encode()
    plain = serve("a.sock", _http(body))
    chunked = serve("b.sock", _http(body, chunked=True))
    assert fr_relay.post(plain, "fr_trace_json", 5) == body
    assert fr_relay.post(chunked, "fr_trace_json", 5) == body
    assert fr_client.fr_trace(plain)["pg_status"]["0"]["last_enqueued_collective"] == "4"


@pytest.mark.timeout(30)
@pytest.mark.timeout(30)
def test_post_reaches_a_debug_server_at_an_http_address_over_tcp():
    """torch.distributed.debug.start_debug_server() publishes http://host:port: the same POST, over TCP."""
    body = b'{"entries": [], "pg_status": {}}'
    srv = Server("tcp", _http(body))
    try:
        assert fr_relay.post(srv.path, "fr_trace_json", 5) == body
        assert srv.requests[0].startswith("POST /handler/fr_trace_json HTTP/1.1\r\n")
        port = srv.path.rsplit(":", 1)[1]
    finally:
        srv.close()
    with pytest.raises(fr_relay.DebugServerError) as e:  # the rank has ended: nothing listens there any more
        fr_relay.post(f"http://127.0.0.1:{port}", "fr_trace_json", 5)
    assert "refused the connection" in str(e.value)
    with pytest.raises(fr_relay.DebugServerError) as e:
        fr_relay.post("http://127.0.0.1:notaport", "ping", 1)
    assert str(e.value) == "not a debug server address: http://127.0.0.1:notaport"


def test_post_says_why_in_words(serve, sockdir):
    missing = os.path.join(sockdir, "gone.sock")
    with pytest.raises(fr_relay.DebugServerError, match="no debug server socket .*gone.sock"):
        fr_relay.post(missing, "ping", 2)
    dead = os.path.join(sockdir, "dead.sock")
    s = socket.socket(socket.AF_UNIX)
    s.bind(dead)  # bound, never listening: what a rank that ended leaves behind
    s.close()
    with pytest.raises(fr_relay.DebugServerError, match="refused"):
        fr_relay.post(dead, "ping", 2)
    nf = serve("nf.sock", _http(b"Handler nope not found: Failed to find handler nope", "404 Not Found"))
    with pytest.raises(fr_relay.DebugServerError, match="answered 404 Not Found: Handler nope not found"):
        fr_relay.post(nf, "nope", 2)
    silent = serve("silent.sock", None)
    with pytest.raises(fr_relay.DebugServerError, match="did not answer within 0.5 s"):
        fr_relay.post(silent, "fr_trace_json", 0.5)
    notjson = serve("nj.sock", _http(b"<html>"))
    with pytest.raises(fr_relay.DebugServerError, match="not JSON"):
        fr_client.fr_trace(notjson)


@pytest.mark.timeout(30)
def test_dump_everywhere_local_ranks_in_parallel_with_errors_per_rank(serve, sockdir):
    d = _dumps("rank_conditional_barrier")
    s0 = serve("r0.sock", _http(json.dumps(d[0]).encode()))
    slow = serve("r1.sock", None)
    got = fr_client.dump_everywhere({0: s0, 1: slow, 2: os.path.join(sockdir, "r2.sock")}, {}, "here", None, 1.0)
    assert got[0] == d[0]
    assert "did not answer within 1 s" in got[1]
    assert "no debug server socket" in got[2]


@pytest.mark.timeout(60)
def test_relay_program_runs_alone_on_the_standard_library(serve, sockdir):
    """The relay as srun runs it on a node: its text passed with -c to `python -S`, one JSON line per socket."""
    d = _dumps("rank_conditional_barrier")
    s0 = serve("r0.sock", _http(json.dumps(d[1]).encode(), chunked=True))
    gone = os.path.join(sockdir, "r9.sock")
    argv = fr_client.relay_argv(sys.executable, "fr_trace_json", 3, [s0, gone])
    assert argv[1:3] == ["-S", "-c"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=30, env={"PATH": os.environ["PATH"]})
    assert out.returncode == 0, out.stderr
    lines = [json.loads(ln) for ln in out.stdout.splitlines()]
    by = {x["sock"]: x for x in lines}
    assert json.loads(by[s0]["body"]) == d[1]
    assert "no debug server socket" in by[gone]["error"]


def test_ask_remote_without_a_job_says_why():
    got = fr_client.ask_remote({"node1": {3: "/tmp/x/r3.sock"}}, None, "fr_trace_json", 1)
    assert got == {3: "rank runs on node1, not here, and there is no Slurm job to reach it through"}


def test_normalise_real_gloo_dump_keys_pg_config_by_the_entries_group_and_pg_status_ints():
    raw = _dumps("rank_conditional_barrier")
    assert raw[0]["pg_config"] == {"": {"desc": "", "name": "", "ranks": "[0, 1]"}}  # as gloo dumps it
    out = fr_records.normalise_all(raw, world=2)
    for r in (0, 1):
        n = out[r]
        assert n["pg_config"] == {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}}
        assert n["pg_status"] == {"0": {"last_completed_collective": 3, "last_enqueued_collective": 4,
                                        "last_started_collective": -1}}
        assert n["entries"] == raw[r]["entries"] and n["version"] == raw[r]["version"]
    assert [e["profiling_name"] for e in out[0]["entries"]][-1] == "gloo:barrier"
    assert [e["profiling_name"] for e in out[1]["entries"]][-1] == "gloo:all_reduce"
    assert raw[0]["pg_status"]["0"]["last_enqueued_collective"] == "4"  # the input is left as it was


def test_memberships_of_subgroups_from_every_ranks_dump():
    raw = _dumps("subgroups")
    assert {d["pg_config"][""]["ranks"] for d in raw.values()} == {"[]", "[0, 1, 2, 3]"}  # gloo says nothing useful
    members = fr_records.memberships(raw, world=4)
    # the default group: the world; "pair": both its ranks named it; [0, 1, 2]: rank 2 never reached its first
    # collective, so its dumps show only ranks 0 and 1 (a lower bound)
    assert members == {"0": [0, 1, 2, 3], "1": [0, 1], "2": [1, 2]}
    out = fr_records.normalise_all(raw, world=4)
    assert out[1]["pg_config"]["2"] == {"name": "2", "desc": "pair", "ranks": "[1, 2]"}
    assert out[1]["pg_config"]["1"]["desc"] == "undefined"
    assert set(out[3]["pg_config"]) == {"0"}


def test_normalise_keeps_a_pg_config_keyed_by_real_names():
    nccl = {"version": "2.10", "entries": [], "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"},
                                                            "5": {"name": "5", "desc": "tp", "ranks": "[2, 3]"}},
            "pg_status": {"0": {"last_enqueued_collective": 7}}}
    n = fr_records.normalise_all({2: nccl}, world=4)[2]
    assert n["pg_config"] == {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"},
                              "5": {"name": "5", "desc": "tp", "ranks": "[2, 3]"}}
    assert n["pg_status"]["0"]["last_enqueued_collective"] == 7


def test_take_says_per_rank_recorded_or_why_not(serve):
    d = _dumps("rank_conditional_barrier")
    s0 = serve("r0.sock", _http(json.dumps(d[0]).encode()))
    dumps, said = fr_client.take([0, 1], {0: s0, 1: None}, {}, "here", None, 2,
                                 fr_records.why_no_socket(False, True))
    assert set(dumps) == {0} and dumps[0]["pg_config"]["0"]["desc"] == "default_pg"
    assert said == {0: "recorded", 1: "unavailable: flight_recorder: false in the profile"}
    assert fr_records.why_no_socket(True, False) == "XLA has no Flight Recorder"
    _, said = fr_client.take([0], {}, {}, "here", None, 1, fr_records.why_no_socket(True, True))
    assert said[0].startswith("unavailable: the rank started no debug server")


DEBUG_TRACEBACK = (  # torch 2.13's dump_traceback answer on a rank blocked in a barrier (its WorkerServer thread first)
    'Current thread 0x00007f5eca7fc6c0 (most recent call first):\n  <no Python frame>\n\n'
    'Thread 0x00007f5ef0a1b6c0 (most recent call first):\n'
    '  File "/work/main/runners/inject/ddptui_report.py", line 120 in _flush_quiet\n'
    '  File "/usr/lib/python3.11/threading.py", line 975 in run\n'
    '  File "/usr/lib/python3.11/threading.py", line 1038 in _bootstrap_inner\n'
    '  File "/usr/lib/python3.11/threading.py", line 995 in _bootstrap\n\n'
    'Thread 0x00007f5ef9c64b80 (most recent call first):\n'
    '  File "/work/main/.venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 5356 in barrier\n'
    '  File "/work/main/.venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", line 83 in wrapper\n'
    '  File "/tmp/h2/exp.py", line 9 in <module>\n')


def test_parse_debug_traceback_leaves_the_servers_thread_out_and_finds_the_main_thread():
    threads = stack_types.ordered(stacks.parse_debug_traceback(DEBUG_TRACEBACK))
    assert [t.name for t in threads] == ["MainThread", "Thread 0x00007f5ef0a1b6c0"]
    assert threads[0].frames[0].func == "barrier" and threads[0].frames[-1].line == 9
    assert stack_types.is_helper(threads[1])


def test_memberships_the_ranks_said_win_over_what_the_dumps_show():
    raw = _dumps("subgroups")
    # the live `coll` reports (RankTrack.collectives) carry each group's members from torch's own group table
    known = fr_records.known_groups({0: {"0": {"ranks": [0, 1, 2, 3]}, "1": {"ranks": [0, 1, 2], "enqueued": 1}},
                                    3: {"0": {"ranks": None}}})
    assert known == {"0": [0, 1, 2, 3], "1": [0, 1, 2]}
    out = fr_records.normalise_all(raw, world=4, known=known)
    assert {out[r]["pg_config"]["1"]["ranks"] for r in (0, 1)} == {"[0, 1, 2]"}


def test_pg_status_is_keyed_by_group_id_and_normalised_to_the_groups_name():
    """World 4, new_group([0, 1]) then new_group([2, 3]): ranks 2 and 3 file their pair under their own group id 1,
    whose entries name the group '2' (tests/data/fr_socket/subgroup_ids: H3's subgroup_hang recording)."""
    raw = _dumps("subgroup_ids")
    assert set(raw[2]["pg_status"]) == {"0", "1"}
    assert {tuple(e["process_group"]) for e in raw[2]["entries"] if e["pg_id"] == 1} == {("2", "undefined")}
    out = fr_records.normalise_all(raw, world=4)
    assert set(out[2]["pg_status"]) == {"0", "2"} and set(out[0]["pg_status"]) == {"0", "1"}
    assert out[2]["pg_status"]["2"] == {k: int(v) for k, v in raw[2]["pg_status"]["1"].items()}
    assert fr_records.memberships(raw, 4) == {"0": [0, 1, 2, 3], "1": [0, 1], "2": [2, 3]}
    assert set(out[3]["pg_config"]) == {"0", "2"}
    # a group id that no entry names (its entries left the ring buffer) is kept, under a name that says so
    lone = dict(raw[2], entries=[e for e in raw[2]["entries"] if e["pg_id"] == 0])
    assert set(fr_records.normalise(lone)["pg_status"]) == {"0", "pg_id 1"}


def test_stacks_collected_fr_survives_the_record():
    """The per-rank Flight Recorder words go through events.jsonl and back (replay) with int ranks, type-checked."""
    from ddptui.runners.evidence import eventcheck
    from ddptui.runners import events as ev
    e = ev.StacksCollected({0: "py-spy"}, {0: []}, 0.1, "/r/stacks/01-stall", 1.0, {}, "stall",
                           {0: "recorded", 1: "unavailable: flight_recorder: false in the profile"})
    back = ev.from_json(json.loads(json.dumps(e.to_json())))
    assert back == e and eventcheck.problem(back) is None
    old = ev.from_json({k: v for k, v in json.loads(json.dumps(e.to_json())).items() if k != "fr"})
    assert old.fr == {}  # a record from before issue 14
