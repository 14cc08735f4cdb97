"""Real gloo ranks under ddptui: each rank's torch debug server answers on its unix socket while the run is alive,
its collective progress is reported, the run ends 0 and leaves no socket folder; with flight_recorder: false, none."""
from __future__ import annotations

import json
import os
import socket
import threading
from pathlib import Path

import pytest

from ddptui.runners import events as ev
from ddptui.runners.launch import fr_env
from ddptui.runners.launch.profile.load import load_profile
from ddptui.runners.session import Session
from tests.support.engine import Recorder, strict_reports
from tests.support.wait import Deadline, wait_until

pytestmark = pytest.mark.main_suite(
    "real gloo ranks under ddptui; its AF_UNIX client and plain torchrun run beside the test's own interpreter")

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "ddp_subgroup_until_file.py"
WAIT_S = 90  # bounds for what must happen, not guesses at how long it takes


def post(path: str, handler: str) -> tuple[int, bytes]:
    """POST /handler/NAME over a unix socket (HTTP/1.1, Connection: close): (status, body)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(20)
        s.connect(path)
        s.sendall(f"POST /handler/{handler} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n"
                  "Connection: close\r\n\r\n".encode())
        data = b""
        while True:
            chunk = s.recv(1 << 16)
            if not chunk:
                break
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    if "content-length" in headers:
        body = body[:int(headers["content-length"])]
    return int(lines[0].split()[1]), body


def running(run: threading.Thread):
    """A stop_if for a wait on what the run's ranks do: the run ended."""
    return lambda: None if run.is_alive() else f"the run ended: {getattr(run, 'result', None)}"


def raw_reports(run_dir: Path) -> dict[int, list[dict]]:
    """The @ddptui lines each rank wrote on its stdout, from the files torchrun wrote (the record's raw copy)."""
    out: dict[int, list[dict]] = {}
    for f in run_dir.glob("torchrun/node0/*/attempt_*/*/stdout.log"):
        text = "\n".join(ln[ln.index("@ddptui "):] for ln in f.read_text().splitlines() if "@ddptui " in ln)
        out[int(f.parent.name)] = strict_reports(text)
    return out


def start(tmp_path: Path, extra: str = "", **env) -> tuple[Session, Recorder, threading.Thread]:
    path = tmp_path / "p.yaml"
    env_yaml = ", ".join(f"{k}: {json.dumps(str(v))}" for k, v in env.items())
    path.write_text(f"workload: {{script: {FIXTURE}}}\nnproc: 2\nstall_after: 60\ntimeout: 150\n"
                    f"env: {{{env_yaml}}}\n{extra}")
    rec = Recorder()
    session = Session(load_profile(path), tmp_path / "runs", emit=rec)
    result = {}
    run = threading.Thread(target=lambda: result.setdefault("code", session.run()), name="test-session")
    run.result = result  # type: ignore[attr-defined]
    run.start()
    return session, rec, run


@pytest.mark.timeout(240)
def test_every_rank_serves_its_debug_socket_and_reports_its_groups_then_the_run_ends_clean(tmp_path):
    stop = tmp_path / "stop"
    session, rec, run = start(tmp_path, STOP_FILE=stop)
    try:
        deadline = Deadline(WAIT_S, "the run")
        servers = wait_until(lambda: {e.rank: e.path for e in list(rec.events) if isinstance(e, ev.DebugServer)}
                             if len([e for e in list(rec.events) if isinstance(e, ev.DebugServer)]) >= 2 else None,
                             deadline.left(), "both ranks' debug servers", stop_if=running(run),
                             seen=lambda: [e for e in rec.events if not isinstance(e, ev.LogLines)][-5:])
        assert servers and set(servers) == {0, 1}, [e for e in rec.events if not isinstance(e, ev.LogLines)][-5:]
        folder = fr_env.socket_dir(session.run_dir)
        assert servers == {r: f"{folder}/r{r}.sock" for r in (0, 1)}
        assert session.tracks[0].debug_sock == servers[0] and session.tracks[1].debug_sock == servers[1]
        assert os.lstat(folder).st_mode & 0o777 == 0o700
        for r, path in servers.items():
            assert post(path, "ping") == (200, b"pong")

            def dump():  # while the rank trains: once it ran a collective in the default group and the subgroup
                status, body = post(path, "fr_trace_json")
                assert status == 200
                d = json.loads(body)
                return d if {"0", "1"} <= set(d["pg_status"]) else None
            d = wait_until(dump, deadline.left(), f"a collective of rank {r} in both groups", stop_if=running(run))
            assert d, "no collective in both groups"
            assert any(e["profiling_name"] == "gloo:all_reduce" and e["process_group"][0] == "1" for e in d["entries"])

        def both_groups_moved():  # each rank's `coll` reports name both groups, with collectives enqueued
            reps = raw_reports(session.run_dir)
            seen = {r: {} for r in (0, 1)}
            for r, lines in reps.items():
                for x in lines:
                    if x["k"] == "coll":
                        assert x["r"] == r
                        seen[r].update(x["pgs"])
            ok = all(set(s) >= {"0", "1"} and all(g["enqueued"] > 0 for g in s.values()) for s in seen.values())
            return seen if ok else None
        seen = wait_until(both_groups_moved, deadline.left(), "both groups' collectives in every rank's reports",
                          stop_if=running(run), seen=lambda: raw_reports(session.run_dir))
        assert seen, raw_reports(session.run_dir)
        for r in (0, 1):
            assert seen[r]["0"]["desc"] == "default_pg" and seen[r]["0"]["ranks"] == [0, 1]
            assert seen[r]["1"]["ranks"] == [0, 1]
            assert all(isinstance(g["enqueued"], int) and isinstance(g["completed"], int) for g in seen[r].values())
        assert not session.tracks[0].stalled and not session.tracks[1].stalled
    finally:
        stop.touch()
        run.join(WAIT_S)
    assert not run.is_alive()
    assert run.result["code"] == 0, rec.lines(0)[-20:]  # type: ignore[attr-defined]
    assert not os.path.exists(fr_env.socket_dir(session.run_dir))
    recorded = [json.loads(ln) for ln in (session.run_dir / "events.jsonl").read_text().splitlines()]
    assert sorted(e["rank"] for e in recorded if e["kind"] == "debug_server") == [0, 1]
    shown = "\n".join(rec.lines(0) + rec.lines(1))
    assert "@ddptui" not in shown and "rank 0 stopped after" in shown  # reports are taken out of the shown log


@pytest.mark.timeout(240)
def test_a_profile_that_opts_out_gets_no_server_no_reports_and_no_folder(tmp_path):
    stop = tmp_path / "stop"
    stop.touch()
    session, rec, run = start(tmp_path, "flight_recorder: false\n", STOP_FILE=stop, MIN_SECONDS=5)
    run.join(WAIT_S + 60)
    assert not run.is_alive()
    assert run.result["code"] == 0, rec.lines(0)[-20:]  # type: ignore[attr-defined]
    assert not rec.of(ev.DebugServer) and not rec.of(ev.CollectiveProgress)
    reps = raw_reports(session.run_dir)
    assert set(reps) == {0, 1} and all(x["k"] == "hello" for x in reps[0] if x["k"] in ("hello", "coll"))
    assert not [x for r in reps.values() for x in r if x["k"] in ("coll", "debug_server")]
    assert not os.path.exists(fr_env.socket_dir(session.run_dir))
    env = json.loads((session.run_dir / "plan.json").read_text())["procs"][0]["env"]
    assert not [k for k in env if k.startswith("TORCH_FR") or k == "DDPTUI_SOCKETS"]
    assert "Server listening" not in "\n".join(rec.lines(0) + rec.lines(1))


@pytest.mark.timeout(240)
def test_a_program_that_initialises_twice_gets_one_server_per_rank(tmp_path):
    path = tmp_path / "twice.yaml"
    path.write_text(f"workload: {{script: {FIXTURE.parent / 'gloo_init_twice.py'}}}\nnproc: 2\nstall_after: 60\n"
                    "timeout: 150\nreplica_check: false\n")
    rec = Recorder()
    session = Session(load_profile(path), tmp_path / "runs", emit=rec)
    assert session.run() == 0, rec.lines(0)[-20:]
    for r in (0, 1):
        assert f"round 2 rank {r} sum 4" in "\n".join(rec.lines(r))
    reps = raw_reports(session.run_dir)
    assert sorted(x["r"] for rs in reps.values() for x in rs if x["k"] == "debug_server") == [0, 1]
    assert sorted(e.rank for e in rec.of(ev.DebugServer)) == [0, 1]
    assert not os.path.exists(fr_env.socket_dir(session.run_dir))


@pytest.mark.timeout(120)
def test_a_rank_whose_node_has_no_socket_folder_makes_it_and_leaves_none_behind(tmp_path):
    """As on another node of a Slurm job: nobody made the folder there, and ddptui cannot remove it from here."""
    import subprocess
    import sys

    from ddptui.runners.launch.rankenv import activation
    home = tmp_path / "ddptui-me"
    home.mkdir(mode=0o700)
    folder = home / "abcd0123"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("DDPTUI")}
    env.update(activation({}, os.getpid()), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(port), TORCH_FR_BUFFER_SIZE="2000", DDPTUI_SOCKETS=str(folder))
    p = subprocess.run([sys.executable, str(FIXTURE.parent / "gloo_init_twice.py")], env=env, capture_output=True,
                       text=True, timeout=100, start_new_session=True)
    assert p.returncode == 0, p.stderr[-2000:]
    reps = strict_reports("\n".join(ln for ln in p.stdout.splitlines() if ln.startswith("@ddptui ")))
    assert [x["path"] for x in reps if x["k"] == "debug_server"] == [str(folder / "r0.sock")]
    assert p.stderr == ""  # torch's "Server listening to UNIX ..." warning is ddptui's: kept out of the rank's stderr
    assert not folder.exists() and home.is_dir()  # its socket and the folder it made are gone at its exit
