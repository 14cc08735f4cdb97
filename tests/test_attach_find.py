"""ddptui attach, finding the job: the decisions over a process snapshot (no processes), and where output goes."""
from __future__ import annotations

import os
import stat

import pytest

from ddptui.runners.attach import output as ao
from ddptui.runners.attach.find import NotAJob, Proc, Unreadable, locate, spawn_index, spawn_nprocs, spawn_numbers
from ddptui.runners.edge.tail import Tailer

pytestmark = pytest.mark.any_python

PY = "/venv/bin/python3.11"
SPAWN = (PY, "-B", "-c", "from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=4, pipe_handle=6)",
         "--multiprocessing-fork")
DENIED = "access denied: another user's process"


def env(rank: int, local: int | None = None, world: int = 2, **more) -> dict:
    e = {"RANK": str(rank), "LOCAL_RANK": str(rank if local is None else local), "WORLD_SIZE": str(world),
         "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "PATH": "/bin"}
    e.update(more)
    return e


def snap(*procs: Proc) -> dict[int, Proc]:
    base = [Proc(1, 0, ("/sbin/init",), {}, 0.0), Proc(10, 1, ("bash",), {"PATH": "/bin"}, 1.0)]
    return {p.pid: p for p in base + list(procs)}


def torchrun_job(agent_env=None, rank1_env: dict | None | str = "ok") -> dict[int, Proc]:
    r1 = Proc(102, 100, (PY, "-u", "train.py"), env(1), 5.1) if rank1_env == "ok" else \
        Proc(102, 100, (PY, "-u", "train.py"), None, 5.1, DENIED)
    return snap(Proc(100, 10, (PY, "/venv/bin/torchrun", "--nproc-per-node", "2", "train.py"), agent_env or {}, 5.0),
                Proc(101, 100, (PY, "-u", "train.py"), env(0), 5.1),
                r1,
                Proc(103, 101, (PY, "-u", "train.py"), env(0), 9.0),  # rank 0's DataLoader worker (forked)
                Proc(104, 10, ("sleep", "60"), {"PATH": "/bin"}, 2.0))


def test_torchrun_job_is_the_same_from_the_agent_a_rank_and_a_dataloader_worker():
    s = torchrun_job()
    for pid in (100, 101, 102, 103):
        got = locate(s, pid)
        assert (got.kind, got.root) == ("torchrun", 100), pid
        assert got.ranks == {101: (0, 0, 2), 102: (1, 1, 2)}, pid  # the worker (103) is no rank
        assert got.unreadable == ()


def test_python_m_torch_distributed_run_is_torchrun_too():
    s = snap(Proc(100, 10, (PY, "-m", "torch.distributed.run", "--nproc-per-node=1", "t.py"), {}, 5.0),
             Proc(101, 100, (PY, "-u", "t.py"), env(0, world=1), 5.1))
    assert locate(s, 101).kind == "torchrun" and locate(s, 101).root == 100


def test_a_shell_above_the_job_finds_it_below():
    got = locate(torchrun_job(), 10)
    assert (got.kind, got.root, sorted(got.ranks)) == ("torchrun", 100, [101, 102])


def test_a_process_above_several_jobs_names_each_and_picks_none():
    """A shell running two torchrun jobs, a spawn script and two env:// groups (pid 1 sees all of them): no job is
    picked; each is named by its launcher's pid and command (env:// ranks, which have none, by theirs)."""
    s = torchrun_job()
    second = {
        200: Proc(200, 10, (PY, "/venv/bin/torchrun", "--nproc-per-node", "2", "other.py"), {}, 6.0),
        201: Proc(201, 200, (PY, "-u", "other.py"), env(0, MASTER_PORT="29600"), 6.1),
        202: Proc(202, 200, (PY, "-u", "other.py"), env(1, MASTER_PORT="29600"), 6.1),
    }
    s.update(second)
    with pytest.raises(NotAJob) as e:
        locate(s, 10)
    lines = str(e.value).splitlines()
    assert lines[0] == "pid 10 (bash) is above 2 PyTorch jobs, not one; attach to one of them by its pid:"
    assert lines[1] == "  torchrun agent pid 100 (2 ranks found): python3.11 torchrun --nproc-per-node 2 train.py"
    assert lines[2] == "  torchrun agent pid 200 (2 ranks found): python3.11 torchrun --nproc-per-node 2 other.py"
    # each job is still found from its own processes
    assert locate(s, 201).root == 200 and locate(s, 101).root == 100
    # init above them all, with a spawn job and two groups of env:// ranks (one per rendezvous) besides
    s.update({
        300: Proc(300, 1, (PY, "spawner.py"), {"PATH": "/bin"}, 7.0),
        301: Proc(301, 300, SPAWN, {"PATH": "/bin"}, 7.1, torch=True),
        302: Proc(302, 300, SPAWN, {"PATH": "/bin"}, 7.2, torch=True),
        400: Proc(400, 1, (PY, "a.py"), env(0, MASTER_PORT="29700"), 8.0),
        401: Proc(401, 1, (PY, "a.py"), env(1, MASTER_PORT="29700"), 8.0),
        402: Proc(402, 400, (PY, "a.py"), env(0, MASTER_PORT="29700"), 8.5),  # rank 0's DataLoader worker
        500: Proc(500, 1, (PY, "b.py"), env(0, world=1, MASTER_PORT="29800"), 9.0),
    })
    with pytest.raises(NotAJob) as e:
        locate(s, 1)
    text = str(e.value)
    assert text.startswith("pid 1 (init) is above 5 PyTorch jobs, not one")
    assert "torch.multiprocessing.spawn parent pid 300 (2 ranks found)" in text
    assert "env:// ranks (pids 400, 401, rendezvous 127.0.0.1:29700): python3.11 a.py" in text
    assert "env:// ranks (pids 500, rendezvous 127.0.0.1:29800): python3.11 b.py" in text
    assert "pid 100 " in text and "pid 200 " in text


def test_not_a_job_and_no_process():
    with pytest.raises(NotAJob) as e:
        locate(torchrun_job(), 104)
    assert str(e.value) == ("pid 104 (sleep) is not part of a PyTorch job: no process in its tree has RANK/WORLD_SIZE "
                            "in its environment")
    with pytest.raises(NotAJob) as e:
        locate(torchrun_job(), 4242)
    assert str(e.value) == "no process 4242"


def test_a_rank_ddptui_cannot_read_is_named_with_the_reason():
    got = locate(torchrun_job(rank1_env=None), 100)
    assert got.ranks == {101: (0, 0, 2)}
    assert got.unreadable == (Unreadable(102, DENIED),)
    # asked about that very rank: its agent is known by its command line (readable by all), so the job is found
    got = locate(torchrun_job(rank1_env=None), 102)
    assert got.root == 100 and got.unreadable == (Unreadable(102, DENIED),)


def test_an_unreadable_pid_outside_any_job_says_so():
    s = snap(Proc(200, 10, ("python3", "x.py"), None, 3.0, DENIED))
    with pytest.raises(NotAJob) as e:
        locate(s, 200)
    assert str(e.value) == f"pid 200 (python3) cannot be read: {DENIED}"


def test_a_zombie_outside_any_job_has_exited():
    zombie = "a zombie: it has exited and its parent has not reaped it"
    s = snap(Proc(200, 10, (), None, 3.0, zombie))  # an ended launcher (torchrun) its parent has not waited for
    with pytest.raises(NotAJob) as e:
        locate(s, 200)
    assert str(e.value) == f"pid 200 has exited ({zombie})"


def test_env_ranks_of_a_users_launcher_and_shell_wrappers():
    # launch.py started `bash -c 'exec-less python train.py'` per rank: the python under each bash is the rank
    s = snap(Proc(300, 10, (PY, "launch.py"), {"PATH": "/bin"}, 3.0),
             Proc(301, 300, ("/bin/bash", "-c", "python train.py"), env(0), 3.1),
             Proc(302, 301, (PY, "train.py"), env(0), 3.2),
             Proc(303, 300, ("/bin/bash", "-c", "python train.py"), env(1), 3.1),
             Proc(304, 303, (PY, "train.py"), env(1), 3.2),
             Proc(305, 304, (PY, "-c", "helper"), env(1), 4.0))  # a helper the rank ran: same RANK, not a rank
    for pid in (300, 302, 305):
        got = locate(s, pid)
        assert (got.kind, got.root, got.ranks) == ("env", 300, {302: (0, 0, 2), 304: (1, 1, 2)}), pid


def test_orphaned_env_ranks_under_init_keep_to_their_own_job():
    s = snap(Proc(400, 1, (PY, "a.py"), env(0), 3.0), Proc(401, 1, (PY, "a.py"), env(1), 3.0),
             Proc(500, 1, (PY, "b.py"), env(0, MASTER_PORT="29999"), 3.0))
    got = locate(s, 401)
    assert (got.kind, got.root, got.ranks) == ("env", 1, {400: (0, 0, 2), 401: (1, 1, 2)})


def spawn_job(torch_loaded: bool = True) -> dict[int, Proc]:
    master = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29533"}
    return snap(Proc(600, 10, (PY, "-u", "notebook.py"), {"PATH": "/bin"}, 3.0),
                Proc(601, 600, (PY, "-B", "-c", "from multiprocessing.resource_tracker import main;main(3)"), master,
                     3.5),
                Proc(603, 600, SPAWN, master, 3.51, torch=torch_loaded),  # started second: a higher pid is no rank
                Proc(602, 600, SPAWN, master, 3.50, torch=torch_loaded),
                Proc(604, 602, SPAWN, master, 6.0, torch=torch_loaded))  # rank 0's DataLoader worker (spawned)


def test_spawn_job_from_the_parent_a_child_and_a_worker_by_start_order():
    for pid in (600, 602, 603, 604):
        got = locate(spawn_job(), pid)
        assert (got.kind, got.root, got.ranks) == ("spawn", 600, {602: (0, 0, 2), 603: (1, 1, 2)}), pid


def test_plain_multiprocessing_without_torch_is_not_a_job():
    with pytest.raises(NotAJob, match="pid 600 .* is not part of a PyTorch job"):
        locate(spawn_job(torch_loaded=False), 600)


def test_a_rank_with_spawned_dataloader_workers_is_no_spawn_parent():
    s = snap(Proc(700, 10, ("slurmstepd: [5.0]",), {}, 3.0), Proc(701, 700, (PY, "t.py"), env(3, 1, 4), 3.1),
             Proc(702, 701, SPAWN, env(3, 1, 4), 5.0, torch=True))
    for pid in (701, 702):
        got = locate(s, pid)
        assert (got.kind, got.root, got.ranks) == ("env", 700, {701: (3, 1, 4)}), pid


PYSPY_CHILD = [{"thread_name": "MainThread", "frames": [
    {"name": "train", "filename": "/nb/notebook.py", "locals": [{"name": "rank", "repr": "1"}]},
    {"name": "_wrap", "filename": "/venv/lib/python3.11/site-packages/torch/multiprocessing/spawn.py",
     "locals": [{"name": "fn", "repr": "<function at 0x7f>"}, {"name": "i", "repr": "1"},
                {"name": "args", "repr": "(2)"}]}]}]
PYSPY_PARENT = [{"thread_name": "MainThread", "frames": [
    {"name": "ProcessContext.join", "filename": "/venv/lib/python3.11/site-packages/torch/multiprocessing/spawn.py",
     "locals": [{"name": "timeout", "repr": "None"}]},
    {"name": "start_processes", "filename": "/venv/lib/python3.11/site-packages/torch/multiprocessing/spawn.py",
     "locals": [{"name": "nprocs", "repr": "3"}, {"name": "start_method", "repr": '"spawn"'}]}]}]


def test_spawn_rank_and_nprocs_read_from_py_spy_locals():
    assert spawn_index(PYSPY_CHILD) == 1 and spawn_nprocs(PYSPY_PARENT) == 3
    assert spawn_index([]) is None and spawn_nprocs(PYSPY_CHILD) is None
    got = locate(spawn_job(), 600)
    # rank 0 has exited: the start order would call the live child 603 rank 0; its stack says 1
    one = type(got)(got.kind, got.root, {603: (0, 0, 1)}, ())
    ranks, notes = spawn_numbers(one, {603: 1}, 3)
    assert ranks == {603: (1, 1, 3)} and notes == ()
    ranks, notes = spawn_numbers(got, {602: 0, 603: None}, None)
    assert ranks == {602: (0, 0, 2), 603: (1, 1, 2)}
    assert notes and "603" in notes[0] and "start order" in notes[0]


# ---- where output goes --------------------------------------------------------------------------------------------

def test_classify_every_kind_of_fd():
    reg, fifo, chr_, sock = stat.S_IFREG, stat.S_IFIFO, stat.S_IFCHR, stat.S_IFSOCK
    c = ao.classify
    assert c(ao.FdLink(5, 1, "/runs/x/rank0.out", reg)) == ao.RankOutput("file", "/runs/x/rank0.out", "")
    t = c(ao.FdLink(5, 1, "/dev/pts/3", chr_))
    assert t.kind == "terminal" and "/dev/pts/3" in t.note and "cannot read a terminal" in t.note
    p = c(ao.FdLink(5, 2, "pipe:[123]", fifo), reader="tee (pid 9)")
    assert p.kind == "pipe" and p.path is None and "tee (pid 9)" in p.note and "stderr" in p.note
    assert c(ao.FdLink(5, 1, "/tmp/fifo", fifo)).kind == "pipe"
    assert c(ao.FdLink(5, 1, "socket:[77]", sock)).kind == "socket"
    d = c(ao.FdLink(5, 1, "/runs/x/out.log (deleted)", reg))
    assert d.kind == "file" and d.path == "/proc/5/fd/1" and "deleted" in d.note
    assert c(ao.FdLink(5, 1, "/dev/null", chr_)).kind == "none"
    assert c(ao.FdLink(5, 1, error="denied")).kind == "unreadable"
    assert c(ao.FdLink(5, 1, error="closed")).note == "the rank's stdout is closed: it writes nowhere"
    assert c(ao.FdLink(5, 1, error="gone")).note == "process 5 has ended"


def test_split_tail_leaves_a_line_being_written_to_the_tailer():
    assert ao.split_tail(b"a\nb\nc\npart", 2) == (["b", "c"], 6)
    assert ao.split_tail(b"no newline yet", 5) == ([], 0)
    assert ao.split_tail(b"a\r\nb\n", 5) == (["a", "b"], 5)


def test_last_lines_then_the_tailer_follows_from_there(tmp_path, monkeypatch):
    monkeypatch.setattr(ao, "_BLOCK", 7)  # many blocks: the cut first line of a block must not show
    f = tmp_path / "rank0.out"
    f.write_text("".join(f"step {i}\n" for i in range(50)) + "step 5")
    lines, at = ao.last_lines(str(f), 3)
    assert lines == ["step 47", "step 48", "step 49"] and at == f.stat().st_size - len("step 5")
    assert ao.last_lines(str(f), 100)[0] == [f"step {i}" for i in range(50)]
    with open(f, "a") as w:
        w.write("0\nstep 51\n")
    t = Tailer()
    t.add(str(f), 0, "stdout", start=at)
    try:
        assert [ln for _, _, got in t.poll() for ln in got] == ["step 50", "step 51"]
    finally:
        t.close()


def test_last_lines_of_an_empty_file(tmp_path):
    f = tmp_path / "e"
    f.write_bytes(b"")
    assert ao.last_lines(str(f)) == ([], 0)


def test_rank_output_of_real_fds(tmp_path):
    """The fds of this very process: a regular file, a pipe (its reader named: this process), a terminal."""
    path = tmp_path / "out.txt"
    with open(path, "w") as f:
        r, w = os.pipe()
        try:
            fd_file, fd_pipe = f.fileno(), w
            got = ao.classify(ao.read_link(os.getpid(), fd_file))
            assert got == ao.RankOutput("file", str(path), "")
            pipe = ao.rank_output(os.getpid(), fd_pipe)
            assert pipe.kind == "pipe" and pipe.path is None
            os.unlink(path)
            gone = ao.rank_output(os.getpid(), fd_file)
            assert gone.kind == "file" and gone.path == f"/proc/{os.getpid()}/fd/{fd_file}" and "deleted" in gone.note
        finally:
            os.close(r)
            os.close(w)
    main, sub = os.openpty()
    try:
        assert ao.rank_output(os.getpid(), sub).kind == "terminal"
    finally:
        os.close(main)
        os.close(sub)


@pytest.mark.timeout(30)
def test_a_pipe_names_its_reader_and_a_socket_is_said(tmp_path):
    """`rank | tee log`: the rank's stdout is a pipe, read by tee; its stderr here a socket (a notebook kernel's)."""
    import socket
    import subprocess

    a, b = socket.socketpair()
    rank = subprocess.Popen(["sleep", "30"], stdout=subprocess.PIPE, stderr=b.fileno(), stdin=subprocess.DEVNULL)
    tee = subprocess.Popen(["tee", str(tmp_path / "log")], stdin=rank.stdout, stdout=subprocess.DEVNULL)
    rank.stdout.close()  # tee holds the read end now, not this test
    try:
        out = ao.rank_output(rank.pid, 1, {rank.pid})
        assert out.kind == "pipe" and f"read by tee (pid {tee.pid})" in out.note, out
        err = ao.rank_output(rank.pid, 2)
        assert err.kind == "socket" and "socket:[" in err.note
    finally:
        rank.kill()
        rank.wait()
        tee.wait(timeout=10)
        a.close()
        b.close()


def test_a_launcher_with_no_rank_running_is_no_job_to_attach_to():
    """torchrun's agent after its ranks ended (or before it started them): nothing to watch, said in one line."""
    s = snap(Proc(100, 10, (PY, "/venv/bin/torchrun", "--nproc-per-node", "2", "train.py"), {}, 5.0))
    with pytest.raises(NotAJob) as e:
        locate(s, 100)
    assert str(e.value) == ("the torchrun job of pid 100 (python3.11) has no rank running: its ranks have ended, or "
                            "have not started yet")
