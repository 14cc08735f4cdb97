"""The engine's control channel (runners/edge/control.py): what a RUN_DIR is (pure), the socket served for real
(0600, engine.json, engine.lock, ping/dump/stop/hold), and `ddptui attach RUN_DIR`'s one-line refusals."""
from __future__ import annotations

import json
import os
import pwd
import stat
import threading

import pytest

from ddptui.runners.edge import control
from ddptui.runners.edge.control import Facts, decide
from tests.support.cli import ddptui
from tests.support.wait import wait_until

pytestmark = pytest.mark.any_python


def facts(**kw) -> Facts:
    base = dict(run_dir="R", is_record=True, finished=False, lock_held=True, socket_there=True, socket_uid=1000,
                my_uid=1000, engine_pid=42, answered_pid=42)
    base.update(kw)
    return Facts(**base)


# ---- the decision, pure ------------------------------------------------------------------------------------------

def test_what_a_run_dir_is_decided_from_what_was_seen():
    assert decide(facts()).state == "live" and decide(facts()).pid == 42
    no = decide(facts(is_record=False))
    assert no.state == "not-a-record" and no.line == "R: not a ddptui run record (no events.jsonl)"
    foreign = decide(facts(socket_uid=0))  # before anything else of it: never asked
    assert foreign.state == "foreign" and "uid 0" in foreign.line and "not to you" in foreign.line
    assert decide(facts(socket_uid=0, finished=True)).state == "foreign"
    assert decide(facts(finished=True)).state == "finished"
    assert decide(facts(finished=True, lock_held=False, socket_there=False)).state == "finished"
    dead = decide(facts(lock_held=False, answered_pid=None))
    assert dead.state == "dead" and dead.line == ("R: the engine (pid 42) died: the record is incomplete; its control "
                                                  "socket is stale")
    assert decide(facts(lock_held=False, socket_there=False, socket_uid=None, engine_pid=None)).line == \
        "R: the engine (pid unknown) died: the record is incomplete"
    copy = decide(facts(names_run="/runs/orig"))  # a copied record: never the original's socket
    assert copy.state == "copy" and "names the run /runs/orig, not this record" in copy.line
    away = decide(facts(lock_held=False, engine_host="node17"))  # a batch job's engine: its lock not seen from here
    assert away.state == "elsewhere" and "runs or ran on node17" in away.line and not away.usable
    assert decide(facts(lock_held=False, engine_host="node17", finished=True)).state == "finished"
    assert decide(facts(answered_pid=None)).state == "busy"
    two = decide(facts(answered_pid=43))
    assert two.state == "two-engines" and "pid 42" in two.line and "pid 43" in two.line
    assert {s: decide(f).usable for s, f in [("live", facts()), ("fin", facts(finished=True)),
                                              ("dead", facts(lock_held=False))]} == {"live": True, "fin": True,
                                                                                       "dead": False}


def test_a_path_too_long_for_a_unix_socket_puts_it_in_the_runtime_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    short = tmp_path / "r"
    assert control.socket_path(short) == short.resolve() / "control.sock"
    deep = tmp_path / ("x" * 120)
    p = control.socket_path(deep)
    assert p.parent == control.Path(f"/tmp/ddptui-{os.getuid()}") and len(str(p)) < 100
    assert control.socket_path(deep) == p and control.socket_path(tmp_path / ("y" * 120)) != p
    edge = tmp_path.resolve() / ("e" * (control.SUN_PATH_MAX - len(str(tmp_path.resolve())) - len("/control.sock") - 1))
    edge.mkdir()
    assert len(str(control.socket_path(edge))) == control.SUN_PATH_MAX and control.socket_path(edge).parent == edge
    (edge / "events.jsonl").write_text("")
    ch = control.Channel(edge, lambda: None, lambda why: None).open()  # bound at the longest path a socket takes
    try:
        assert control.ask(edge, "ping")["ok"]
    finally:
        ch.close()


# ---- the channel served for real ---------------------------------------------------------------------------------

@pytest.mark.timeout(30)
def test_the_channel_answers_holds_the_record_and_refuses_a_second_engine(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "events.jsonl").write_text("")
    dumps, stops = [], []
    ch = control.Channel(run, lambda: dumps.append(1), stops.append).open()
    try:
        sock = run / "control.sock"
        assert stat.S_IMODE(os.stat(sock).st_mode) == 0o600 and os.stat(sock).st_uid == os.getuid()
        info = json.loads((run / "engine.json").read_text())
        assert info["pid"] == os.getpid() and info["socket"] == str(sock.resolve()) and info["uid"] == os.getuid()
        assert control.lock_held(run)
        assert control.ask(run, "ping")["pid"] == os.getpid()
        assert control.state_of(run).state == "live"
        control.ask(run, "dump")
        control.ask(run, "stop")
        control.ask(run, "stop", why="the terminal hung up, SIGHUP")  # what asked the viewer, into the record
        assert dumps == [1] and stops == ["asked through its control channel", "the terminal hung up, SIGHUP"]
        assert control.ask(run, "bogus") == {"ok": False, "error": "unknown op 'bogus' (one of ping, dump, stop, "
                                                                   "hold, release, feed)"}
        assert control.ask(run, "feed") == {"ok": False, "error": "this engine serves no feed"}  # a channel without one
        with pytest.raises(control.ChannelError, match=r"another engine \(pid \d+\) already holds this record"):
            control.Channel(run, lambda: None, lambda why: None).open()
        # a launching dashboard's hold: released, its leaving stops nothing; dropped, it stops the run
        s = control.connect(run)
        assert control.request(s, "hold")["ok"] and control.request(s, "release")["ok"]
        s.close()
        s = control.connect(run)
        control.request(s, "hold")
        s.close()
        wait_until(lambda: len(stops) == 3, 5, "the dropped hold to stop the run")
        assert stops[2] == "the dashboard that launched the run went away without detaching"
    finally:
        ch.close()
    assert not sock.exists() and not control.lock_held(run) and (run / "engine.json").exists()
    assert control.state_of(run).state == "dead"  # no summary, no engine: the record is incomplete


@pytest.mark.timeout(60)
def test_attach_refuses_what_it_cannot_follow_with_one_line(tmp_path):
    runs = tmp_path / "runs"
    plain = tmp_path / "plain"
    plain.mkdir()
    p = ddptui("attach", str(plain), "--no-ui", runs_dir=runs)
    assert p.returncode == 2 and p.stderr == f"ddptui: attach: {plain}: not a ddptui run record (no events.jsonl)\n"
    # a dead engine's record: its lock free, its socket left behind (SIGKILL leaves it)
    dead = tmp_path / "dead"
    dead.mkdir()
    (dead / "events.jsonl").write_text("")
    (dead / "engine.json").write_text(json.dumps({"pid": 999999, "socket": str(dead / "control.sock")}))
    (dead / "engine.lock").write_text("")
    control._bind_private(dead / "control.sock").close()  # a socket file with nobody behind it
    p = ddptui("attach", str(dead), "--no-ui", runs_dir=runs)
    assert p.returncode == 2 and p.stderr == (f"ddptui: attach: {dead}: the engine (pid 999999) died: the record is "
                                              "incomplete; its control socket is stale; `ddptui replay` shows what "
                                              "it holds\n")
    assert (dead / "control.sock").is_socket()  # nothing removed, nothing signalled


@pytest.mark.skipif(os.getuid() != 0, reason="chown to another user needs root")
@pytest.mark.timeout(60)
def test_another_users_socket_is_never_asked(tmp_path):
    run = tmp_path / "theirs"
    run.mkdir()
    (run / "events.jsonl").write_text("")
    asked = threading.Event()
    ch = control.Channel(run, asked.set, lambda why: asked.set()).open()
    try:
        nobody = pwd.getpwnam("nobody").pw_uid
        os.chown(run / "control.sock", nobody, -1)
        state = control.state_of(run)
        assert state.state == "foreign" and f"uid {nobody}" in state.line
        for args in (["attach", str(run), "--no-ui"], ["dump", str(run)]):
            p = ddptui(*args, runs_dir=tmp_path / "runs")
            assert p.returncode == 2 and "its control socket belongs to user nobody" in p.stderr, p.stderr
            assert p.stderr.count("\n") == 1 and "Traceback" not in p.stderr
        assert not asked.is_set()
    finally:
        ch.close()
