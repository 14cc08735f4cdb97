"""Stacks of real processes: py-spy in parallel, the faulthandler fallback, and a real 2-rank gloo hang."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

pytestmark = pytest.mark.main_suite(
    "long end-to-end rank runs (the engine and dashboard under them are in the any_python set)")

sys.path.insert(0, str(Path(__file__).resolve().parent / "fixtures"))
import runhelp  # noqa: E402

from ddptui.runners.edge import stacks
from ddptui.runners.evidence import stack_types

from ddptui.runners.evidence import hang_verdict as verdict  # noqa: E402
from tests.support.wait import wait_until

HANG = runhelp.FIXTURES / "hang_ddp.py"
HANG_LINE = next(i for i, ln in enumerate(HANG.read_text().splitlines(), 1) if "# HANG_LINE" in ln)
BACKWARD_LINE = next(i for i, ln in enumerate(HANG.read_text().splitlines(), 1) if "loss.backward()" in ln)


def _fake(tmp_path: Path, body: str) -> str:
    exe = tmp_path / "fake-py-spy"
    exe.write_text("#!/bin/sh\n" + body + "\n")
    exe.chmod(0o755)
    return str(exe)


@pytest.fixture
def sleeper(tmp_path):
    """A Python process with a worker thread, faulthandler on SIGUSR1, stderr in a file."""
    script = tmp_path / "sleeper.py"
    script.write_text(textwrap.dedent("""
        import faulthandler, signal, sys, threading, time
        if sys.argv[1] == "fh":
            faulthandler.register(signal.SIGUSR1, all_threads=True)
        def worker():  # answers each line on stdin: proof of life that a signal would have prevented
            for _ in sys.stdin: print("pong", flush=True)  # WORKER
        threading.Thread(target=worker, name="worker", daemon=True).start()
        print("ready", flush=True)
        time.sleep(120)  # MAIN
    """))
    started = []

    def start(mode="fh"):
        err = tmp_path / f"stderr-{len(started)}.txt"
        with open(err, "wb") as ef:
            p = subprocess.Popen([runhelp.PY, str(script), mode], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=ef, start_new_session=True, text=True)
        started.append(p)
        assert p.stdout.readline().strip() == "ready"
        # "ready" comes before the MAIN line: wait until the main thread sleeps there (py-spy reads it without a
        # signal), so a stack taken from now on shows it there however slowly the process got going
        wait_until(lambda: _sleeps_at_main(stacks.collect([stacks.Target(0, p.pid, None)], method="py-spy",
                                                          workers=False)[0]), 30, "the sleeper at its MAIN line",
                   step=0.05)
        return p, str(err)

    yield start
    for p in started:
        p.kill()
        p.wait(timeout=10)
    assert not any(runhelp.alive(p.pid) for p in started)


def _sleeps_at_main(r: stack_types.StackResult) -> bool:
    main = [t for t in r.threads if t.name == "MainThread"]
    return bool(main and main[0].idle and main[0].frames and "# MAIN" in main[0].frames[0].code)


def _line_of(script_text: str, marker: str) -> int:
    return next(i for i, ln in enumerate(script_text.splitlines(), 1) if marker in ln)


@pytest.mark.timeout(60)
def test_pyspy_json_threads_frames_code(sleeper):
    p, err = sleeper()
    r = stacks.collect([stacks.Target(3, p.pid, err)])[3]
    assert r.method == "py-spy", r
    assert r.rank == 3 and r.pid == p.pid and r.error is None
    names = {t.name: t for t in r.threads}
    assert set(names) == {"MainThread", "worker"}
    main, worker = names["MainThread"], names["worker"]
    assert main.idle is True and main.tid == p.pid
    assert main.frames[0].func == "<module>" and main.frames[0].code == "time.sleep(120)  # MAIN"
    assert worker.frames[0].func == "worker" and "# WORKER" in worker.frames[0].code
    assert worker.frames[-1].func.endswith("_bootstrap")  # innermost first
    js = stack_types.to_json(r)
    assert {"thread", "idle", "frames"} <= set(js[0])
    fr = next(t for t in js if t["thread"] == "MainThread")["frames"][0]
    assert fr[0] == "<module>" and fr[1].endswith("sleeper.py") and isinstance(fr[2], int) and "MAIN" in fr[3]
    assert [t.frames for t in stack_types.from_json(js)] == [t.frames for t in r.threads]
    text = stack_types.render(r)
    assert "rank 3" in text and '"worker"' in text and "time.sleep(120)  # MAIN" in text
    assert verdict.classify(r.threads).category == "sleep"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("how", ["exit1", "missing", "timeout"])
def test_faulthandler_fallback_when_pyspy_fails(sleeper, tmp_path, how):
    p, err = sleeper("fh")
    if how == "missing":
        pyspy = str(tmp_path / "no-such-py-spy")
    else:
        pyspy = _fake(tmp_path, {"exit1": 'echo "Error: Operation not permitted (os error 1)" >&2; exit 1',
                                 "timeout": "exec sleep 30"}[how])
    t0 = time.monotonic()
    r = stacks.collect([stacks.Target(0, p.pid, err)], pyspy=pyspy, timeout=1.0 if how == "timeout" else 5.0)[0]
    assert time.monotonic() - t0 < 10
    assert r.method == "faulthandler", r
    assert {"exit1": "Operation not permitted", "missing": "No such file", "timeout": "timed out"}[how] in r.error
    names = [t.name for t in r.threads]
    assert "MainThread" in names and len(names) == 2
    main = next(t for t in r.threads if t.name == "MainThread")
    assert main.idle is None and main.frames[0].func == "<module>" and "MAIN" in main.frames[0].code
    assert verdict.classify(r.threads).category == "sleep"
    assert runhelp.alive(p.pid)  # the signal did not kill it
    # a second collection reads only the new dump, not the first one again
    r2 = stacks.collect([stacks.Target(0, p.pid, err)], method="faulthandler")[0]
    assert r2.method == "faulthandler" and r2.text.count("most recent call first") == 2


@pytest.mark.timeout(60)
def test_no_signal_to_a_process_without_faulthandler(sleeper, tmp_path):
    p, err = sleeper("plain")  # SIGUSR1 would kill it: it must not be sent
    r = stacks.collect([stacks.Target(0, p.pid, err)], pyspy=_fake(tmp_path, "exit 1"))[0]
    assert r.method.startswith("unavailable") and "faulthandler" in r.method
    assert r.threads == []
    p.stdin.write("ping\n")  # a SIGUSR1 sent above would have ended it before it could answer
    p.stdin.flush()
    assert p.stdout.readline().strip() == "pong" and runhelp.alive(p.pid)


@pytest.mark.timeout(60)
def test_a_stopped_process_is_said_stopped_and_neither_traced_nor_signalled(sleeper):
    """A rank SIGSTOPped (a frozen node): its State is the finding. py-spy cannot suspend it (ptrace's error would be
    all a user read), its debug server cannot answer, and a SIGUSR1 would wait to dump into its stderr once continued."""
    import signal
    p, err = sleeper("fh")
    os.kill(p.pid, signal.SIGSTOP)
    wait_until(lambda: _proc_state(p.pid) == "T (stopped)", 10, "the process stopped", step=0.05,
               seen=lambda: _proc_state(p.pid))
    r = stacks.collect([stacks.Target(3, p.pid, err)])[3]
    assert (r.method, r.threads) == ("unavailable: the process is stopped (State: T (stopped))", []), r
    assert (r.state, r.error) == ("T (stopped)", None), r
    os.kill(p.pid, signal.SIGCONT)
    p.stdin.write("ping\n")
    p.stdin.flush()
    assert p.stdout.readline().strip() == "pong"  # running again: a pending SIGUSR1 would have been delivered first
    assert "most recent call first" not in Path(err).read_text()  # no faulthandler dump: nothing was sent
    assert stacks.stopped_state(p.pid) == "" and _proc_state(p.pid)[:1] in ("R", "S")


def _proc_state(pid: int) -> str:
    return next(ln.split(":", 1)[1].strip() for ln in Path(f"/proc/{pid}/status").read_text().splitlines()
                if ln.startswith("State:"))


@pytest.mark.timeout(60)
def test_bash_wrapper_pid_resolves_to_python_and_non_python_is_refused(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("import time\nprint('ready', flush=True)\ntime.sleep(60)  # S\n")
    # `; true` keeps bash from exec-ing python: the pid is the shell's, the Python process its child
    wrapper = subprocess.Popen(["bash", "-c", f"{runhelp.PY} {script}; true"], stdout=subprocess.PIPE, text=True,
                               start_new_session=True)
    plain = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        assert wrapper.stdout.readline().strip() == "ready"
        assert psutil.Process(wrapper.pid).name() == "bash"
        # "ready" comes one line before "# S": collect until the Python process's stack is there
        def collected():
            res = stacks.collect([stacks.Target(0, wrapper.pid, None), stacks.Target(1, plain.pid, None)])
            assert res[0].method == "py-spy" and res[0].pid != wrapper.pid
            return res if res[0].threads[0].frames[0].code.endswith("# S") else None
        res = wait_until(collected, 30, "the Python process's stack at its # S line", step=0.05)
        assert res[1].method == f"unavailable: pid {plain.pid} is not a Python process"
        assert runhelp.alive(plain.pid)
    finally:
        for p in (wrapper, plain):
            os.killpg(p.pid, 9)
            p.wait(timeout=10)
    assert not runhelp.alive(wrapper.pid) and not runhelp.alive(plain.pid)


def test_parse_faulthandler_blocks():
    text = textwrap.dedent('''\
        some earlier stderr line
        Thread 0x00007f14b35186c0 (most recent call first):
          File "/tmp/x.py", line 4 in w
          File "/usr/lib/python3.11/threading.py", line 982 in run
          File "/usr/lib/python3.11/threading.py", line 1002 in _bootstrap

        Current thread 0x00007f14b4052b80 (most recent call first):
          File "/tmp/x.py", line 7 in f
          ...
          File "/tmp/x.py", line 8 in <module>
        unrelated line after
    ''')
    th = stacks.parse_faulthandler(text)
    assert [t.name for t in th] == ["Thread 0x00007f14b35186c0", "MainThread"]
    assert th[0].tid == 0x00007F14B35186C0 and th[0].idle is None
    assert [(f.func, f.line) for f in th[1].frames] == [("f", 7), ("<module>", 8)]


# ---- a real 2-rank gloo hang under torchrun ----

@pytest.fixture
def hang(tmp_path_factory):
    """A running 2-rank hang: rank 1 sleeps before step 3's backward, rank 0 blocks in its all-reduce."""
    log_dir = tmp_path_factory.mktemp("hang")
    p = runhelp.torchrun("hang_ddp.py", log_dir, env=runhelp.rank_env(HANG_RANK="1", HANG_STEP="3", PG_TIMEOUT="120"),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pids = []
    try:
        pids = list(runhelp.rank_pids(p.pid, 2).values())
        runhelp.wait_for_text(lambda: runhelp.rank_file(log_dir, 1, "stdout.log"), "hanging at step 3", 60)
        runhelp.wait_for_text(lambda: runhelp.rank_file(log_dir, 0, "stdout.log"), "step 2 loss", 30)
        ranks = runhelp.rank_pids(p.pid, 2)
        targets = [stacks.Target(r, pid, str(runhelp.rank_file(log_dir, r, "stderr.log"))) for r, pid in ranks.items()]
        # rank 0 runs step 3's forward, then blocks in backward's all-reduce: wait until its stack says so
        rank0 = [t for t in targets if t.rank == 0]
        wait_until(lambda: verdict.classify(stacks.collect(rank0, method="py-spy", workers=False)[0].threads)
                   .category == "collective", 30, "rank 0 blocked in backward's all-reduce")
        yield targets
    finally:
        runhelp.kill_session(p, pids)


@pytest.mark.timeout(120)
def test_real_gloo_hang_pyspy_then_faulthandler(hang, tmp_path, record_property):
    t0 = time.monotonic()
    res = stacks.collect(hang)
    took = time.monotonic() - t0
    record_property("pyspy_2_ranks_s", round(took, 3))
    print(f"py-spy collection, 2 ranks: {took:.3f}s")
    assert {r.method for r in res.values()} == {"py-spy"}, res
    w1 = verdict.classify(res[1].threads)
    w0 = verdict.classify(res[0].threads)
    assert (w1.category, w1.file, w1.line, w1.detail) == ("sleep", str(HANG), HANG_LINE, "time.sleep"), w1
    assert w0.category == "collective" and w0.detail == "all_reduce inside backward (DDP bucket all-reduce)", w0
    assert (w0.file, w0.line) == (str(HANG), BACKWARD_LINE)
    text, culprits, waiting = verdict.hang_sentence({0: w0, 1: w1}, {0: 3, 1: 3}, {0, 1}, time.time() - 30)
    assert culprits == (1,) and waiting == (0,)
    assert text.startswith(f"rank 1 is stuck in culprit_wait() at hang_ddp.py:{HANG_LINE} (calls time.sleep), step 3; "
                           f"rank 0 waits in all_reduce inside backward (DDP bucket all-reduce) at hang_ddp.py:{BACKWARD_LINE} "
                           "since "), text
    assert "culprit_wait" in stack_types.render(res[1])

    # the same hang with ptrace refused: faulthandler through SIGUSR1 gives the same verdict
    t0 = time.monotonic()
    res = stacks.collect(hang, pyspy=_fake(tmp_path, 'echo "Error: Permission denied (os error 13)" >&2; exit 1'))
    print(f"faulthandler collection, 2 ranks: {time.monotonic() - t0:.3f}s")
    assert {r.method for r in res.values()} == {"faulthandler"}, res
    assert all("Permission denied" in r.error for r in res.values())
    f1 = verdict.classify(res[1].threads)
    f0 = verdict.classify(res[0].threads)
    assert (f1.category, f1.line) == ("sleep", HANG_LINE), f1
    assert f0.category == "collective" and f0.line == BACKWARD_LINE, f0
    _, culprits, waiting = verdict.hang_sentence({0: f0, 1: f1}, {0: 3, 1: 3}, {0, 1}, time.time())
    assert (culprits, waiting) == ((1,), (0,))
    assert all(runhelp.alive(t.pid) for t in hang)  # the dumps did not end the ranks


WORKERS = """
import json, multiprocessing as mp, os, subprocess, sys, time
def work(ready):
    open(os.path.join(ready, str(os.getpid())), "w").close()
    time.sleep(120)
if __name__ == "__main__":
    ready, kids = sys.argv[1], {}
    for method in ("fork", "spawn", "forkserver"):
        p = mp.get_context(method).Process(target=work, args=(ready,))
        p.start()
        kids[method] = p.pid
    kids["python -c"] = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"]).pid
    while len(os.listdir(ready)) < 3:  # every worker is in work(): its stack says so
        time.sleep(0.05)
    print(json.dumps(kids), flush=True)
    time.sleep(120)
"""


@pytest.mark.timeout(60)
def test_worker_processes_of_a_rank_are_its_multiprocessing_children_only(tmp_path):
    script = tmp_path / "workers.py"
    script.write_text(WORKERS)
    ready = tmp_path / "ready"
    ready.mkdir()
    p = subprocess.Popen([runhelp.PY, str(script), str(ready)], stdout=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        kids = json.loads(p.stdout.readline())
        found = stacks.worker_pids([p.pid])[p.pid]
        # fork, spawn and forkserver workers (the last are the forkserver's children); not a plain subprocess,
        # not the forkserver itself or multiprocessing's resource tracker
        assert sorted(found) == sorted(kids[m] for m in ("fork", "spawn", "forkserver")), (found, kids)
        res = stacks.collect([stacks.Target(0, p.pid)])[0]
        assert {w.pid for w in res.workers} == set(found) and all(w.method == "py-spy" for w in res.workers)
        assert all(any(f.func == "work" for t in w.threads for f in t.frames) for w in res.workers)
    finally:
        os.killpg(p.pid, 9)
        p.wait(timeout=10)
