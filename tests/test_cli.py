"""The `ddptui` command line for real: headless output format, exit codes, ad-hoc commands, signals, dry runs."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from tests.support.cli import Output, ddptui, live_ddptui, only_run, wait_for_rank1
from tests.support.wait import wait_until

pytestmark = pytest.mark.main_suite(
    "its wrapped commands name the test's own interpreter (and its torchrun) as the ranks'")

ROOT = Path(__file__).resolve().parent.parent
LINE = re.compile(r"^\[\d\d:\d\d:\d\d\.\d{3}\] \[(rank \d+|launcher|ddptui|hint|stall|crash)\] ")
PLAIN_DDP = textwrap.dedent("""
    import os, torch, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    dist.init_process_group("gloo")
    r = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(8, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.manual_seed(r + 1)
    for step in range(15):
        x = torch.randn(16, 8)
        loss = model(x).pow(2).mean()
        opt.zero_grad(); loss.backward(); opt.step()
        print(f"step {step} loss {loss.item():.4f}")
    dist.barrier()
    dist.destroy_process_group()
""")


@pytest.mark.timeout(120)
def test_headless_output_summary_and_exit_code(runs_dir, tmp_path):
    out = tmp_path / "summary.json"
    p = ddptui("profiles/cpu-smoke.yaml", "--no-ui", "--summary", str(out), runs_dir=runs_dir)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    body = lines[: lines.index(next(x for x in lines if x.startswith("== ddptui:")))]
    assert all(LINE.match(x) or x.startswith("    ") or not x for x in body), [x for x in body if not LINE.match(x)][:3]
    assert any(re.search(r"\[rank 0\] dist_smoke_ok$", x) for x in lines)
    assert "\x1b[" not in p.stdout  # no colour when not a terminal
    assert "status: ok (exit 0)" in p.stdout
    summary = json.loads(out.read_text())
    assert summary == json.loads((only_run(runs_dir) / "summary.json").read_text())
    assert summary["exit_code"] == 0 and set(summary["ranks"]) == {"0", "1"}


@pytest.mark.timeout(60)
def test_dry_run_prints_every_process(runs_dir):
    p = ddptui("profiles/multinode-env.yaml", "--dry-run", "--set", "nnodes=3", runs_dir=runs_dir)
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("argv: ") == 3 and "env:  RANK=2" in p.stdout and "cwd:  " in p.stdout
    assert "env:  WORLD_SIZE=3" in p.stdout and "MASTER_PORT=" in p.stdout
    assert not list(runs_dir.iterdir()), "a dry run starts nothing and records nothing"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("yaml_text, expect", [
    ("workload: {builtin: ddp_mlp}\nnprocs: 2\n", r":2:1: unknown field 'nprocs' \(did you mean 'nproc'\?\)"),
    ("workload: {builtin: ddp_mlp}\nnproc: 0\n", r":2:8: field 'nproc': expected an integer >= 1, got 0"),
    ("workload: {script: missing.py}\n", r"field 'workload.script'"),
    ("workload: {builtin: ddp_mlp}\nnproc: [\n", r"bad\.yaml:\d+:\d+: "),
])
def test_bad_profile_is_one_line_exit_2(runs_dir, tmp_path, yaml_text, expect):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml_text)
    p = ddptui(str(bad), "--no-ui", runs_dir=runs_dir)
    assert p.returncode == 2
    err = p.stderr.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert re.search(expect, err), err
    assert err.startswith(str(bad))


@pytest.mark.timeout(60)
def test_bad_override_is_one_line_exit_2(runs_dir):
    p = ddptui("profiles/cpu-ddp.yaml", "--no-ui", "--set", "stall_after=soon", runs_dir=runs_dir)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "--set stall_after=soon" in p.stderr


@pytest.mark.timeout(120)
def test_wraps_an_unmodified_torchrun_command(runs_dir, tmp_path):
    script = tmp_path / "plain_ddp.py"
    script.write_text(PLAIN_DDP)
    p = ddptui("--no-ui", "--", "torchrun", "--standalone", "--nproc_per_node=2", str(script), runs_dir=runs_dir)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr
    assert re.search(r"\[rank 1\] step 14 loss", p.stdout)
    summary = json.loads((only_run(runs_dir) / "summary.json").read_text())
    assert summary["ranks"]["0"]["steps"] == 15 and summary["ranks"]["1"]["steps"] == 15
    assert summary["replica"]["status"] == "identical"  # digests from the injected code, script unaware


@pytest.mark.timeout(120)
def test_wraps_an_env_rank_program_per_emulated_node(runs_dir, tmp_path):
    script = tmp_path / "plain_ddp.py"
    script.write_text(PLAIN_DDP)
    p = ddptui("--no-ui", "--set", "nnodes=2", "--", sys.executable, str(script), runs_dir=runs_dir)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr
    assert re.search(r"\[rank 0\] step 14 loss", p.stdout) and re.search(r"\[rank 1\] step 14 loss", p.stdout)
    assert "replicas: all 2 ranks hold byte-identical weights" in p.stdout


@pytest.mark.timeout(120)
def test_sigint_stops_every_rank_and_keeps_the_logs(runs_dir):
    with live_ddptui(runs_dir, "profiles/cpu-ddp.yaml", "--no-ui", "--set", "steps=100000") as proc:
        wait_for_rank1(runs_dir, "step")
        ranks = [c for c in psutil.Process(proc.pid).children(recursive=True)]
        assert len(ranks) >= 3  # torchrun + 2 ranks
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 1
    assert "status: stopped (exit 1)" in out
    assert not [p for p in ranks if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    log = (only_run(runs_dir) / "rank1.log").read_text()
    assert "step" in log


@pytest.mark.timeout(120)
def test_sigkill_of_torchrun_does_not_orphan_ranks(runs_dir):
    with live_ddptui(runs_dir, "profiles/cpu-ddp.yaml", "--no-ui", "--set", "steps=100000") as proc:
        def launcher_and_ranks():
            kids = psutil.Process(proc.pid).children(recursive=True)
            launcher = [k for k in kids if "torch.distributed.run" in " ".join(k.cmdline())]
            ranks = [k for k in kids if "ddp_mlp.py" in " ".join(k.cmdline()) and k not in launcher]
            return (launcher, ranks) if len(ranks) >= 2 else None

        launcher, ranks = wait_until(launcher_and_ranks, 60, "torchrun's 2 ranks", step=0.2)
        assert launcher and len(ranks) == 2
        wait_for_rank1(runs_dir, " loss ")  # the ranks train: the launcher dies mid-run
        assert " loss " in (only_run(runs_dir) / "rank1.log").read_text()
        launcher[0].kill()
        out, _ = proc.communicate(timeout=40)
    assert proc.returncode == 1, out[-1500:]
    assert not [p for p in ranks if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


@pytest.mark.timeout(30)
def test_help_and_usage_errors(runs_dir):
    p = ddptui("--help", runs_dir=runs_dir)
    assert p.returncode == 0 and "exit codes: 0 ok, 1 run failed" in p.stdout
    p = ddptui("--no-ui", runs_dir=runs_dir)
    assert p.returncode == 2 and "needs a PROFILE" in p.stderr
    p = ddptui("no-such-profile", "--no-ui", runs_dir=runs_dir)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1


@pytest.mark.timeout(120)
def test_dump_command_collects_stacks_of_a_live_run(runs_dir):
    # on_stall=wait: the stall is called without touching the ranks; the dump then reads the verdict from stacks
    with live_ddptui(runs_dir, "profiles/hang.yaml", "--no-ui", "--set", "on_stall=wait",
                     "--set", "stall_after=3") as proc:
        deadline = wait_for_rank1(runs_dir, "injecting hang")
        run = only_run(runs_dir)
        wait_until(lambda: '"kind": "stall"' in (run / "events.jsonl").read_text(), deadline.left(),
                   "the stall in the record", step=0.2)
        p = ddptui("dump", str(run), runs_dir=runs_dir)
        assert p.returncode == 0, p.stderr
        wait_until(lambda: list(run.glob("stacks/*/verdict.txt")), deadline.left(), "the dump's verdict", step=0.2,
                   seen=lambda: sorted(str(p.relative_to(run)) for p in run.glob("stacks/**/*")))
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    (verdict,) = run.glob("stacks/*-on-request/verdict.txt")
    assert "rank 1 is stuck in at_step() at _faults.py:" in verdict.read_text()
    assert "(calls time.sleep), step 10" in verdict.read_text()
    assert proc.returncode == 1 and ddptui("dump", str(run), runs_dir=runs_dir).returncode == 2


TRAIN_LONG = ROOT / "tests" / "fixtures" / "train_ddp_long.py"


def train_args(*extra: str) -> list[str]:
    """`ddptui --no-ui -- python train_ddp_long.py` on 2 env:// ranks: ranks that train until stopped."""
    return ["--no-ui", "--set", "nproc=2", *extra, "--", sys.executable, str(TRAIN_LONG)]


SLOW_TO_STOP = ROOT / "tests" / "fixtures" / "train_ddp_slow_to_stop.py"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("signals", [(signal.SIGINT,) * 3, (signal.SIGTERM,)], ids=["sigint-x3", "sigterm"])
def test_every_stop_signal_ends_with_a_summary_and_no_traceback(runs_dir, signals):
    # three signals: ranks that take their time on SIGTERM, so the third surely lands during the teardown
    args = train_args() if len(signals) == 1 else \
        ["--no-ui", "--set", "nproc=2", "--", sys.executable, str(SLOW_TO_STOP)]
    with live_ddptui(runs_dir, *args) as proc:
        output = Output(proc)
        wait_for_rank1(runs_dir, "step 3")
        ranks = psutil.Process(proc.pid).children(recursive=True)
        assert len(ranks) == 2
        # each signal once ddptui reacted to the one before: a signal still pending is not queued twice
        # (1: a rank got the graceful stop, in the file it writes itself; the other may be stuck in gloo meanwhile)
        reacted = [lambda: any("SIGTERM: saving a checkpoint first" in (only_run(runs_dir) / "raw" / f"rank{r}.out")
                               .read_text() for r in (0, 1)),
                   lambda: "ddptui: already stopping" in output.text()]
        for sig, seen in zip(signals, reacted + [None]):
            proc.send_signal(sig)
            if len(signals) > 1 and seen is not None:
                output.wait(seen, 60)
        proc.wait(timeout=60)
        out = output.all()
    assert proc.returncode == 1, out[-2000:]
    assert "Traceback" not in out and "KeyboardInterrupt" not in out, out[-2000:]
    assert "status: stopped (exit 1)" in out
    summary = json.loads((only_run(runs_dir) / "summary.json").read_text())
    assert summary["status"] == "stopped" and summary["exit_code"] == 1
    if len(signals) == 3:
        assert "SIGKILL to every rank now" in out
    assert not [p for p in ranks if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not (only_run(runs_dir) / "ddptui.pid").exists()


def _pending_signals(pid: int) -> int:
    """The signals sent to `pid` and not yet handled (a mask; blocked ones stay here)."""
    status = dict(ln.split(":", 1) for ln in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in ln)
    return int(status["ShdPnd"], 16) | int(status["SigPnd"], 16)


@pytest.mark.timeout(60)
def test_dump_never_signals_a_process_a_stale_pid_file_names(runs_dir, tmp_path):
    """A SIGKILLed ddptui leaves ddptui.pid behind; its pid may now be an unrelated process (default SIGUSR1: die)."""
    run = runs_dir / "20261202-130241-cpu-ddp"
    run.mkdir()
    (run / "events.jsonl").write_text("")
    # It blocks every signal it can: one sent to it stays pending, where /proc shows it, however long it would take
    # to act on it.
    other = subprocess.Popen([sys.executable, "-c", "import signal, time; "
                              "signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals()); "
                              "print('ready', flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout.readline().strip() == "ready"
        created = psutil.Process(other.pid).create_time()
        stale = [str(other.pid),  # the format of an older ddptui: nothing to check it against
                 json.dumps({"pid": other.pid, "create_time": created - 30.0}),  # the pid was reused since
                 json.dumps({"pid": other.pid, "create_time": created})]  # the same process, but not a ddptui
        for text in stale:
            (run / "ddptui.pid").write_text(text)
            p = ddptui("dump", str(run), runs_dir=runs_dir)
            assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, (text, p.stderr)
            assert "nothing signalled" in p.stderr and "Traceback" not in p.stderr
            assert other.poll() is None and not _pending_signals(other.pid), f"{text!r}: the unrelated process was signalled"
        other.kill()
        other.wait()
        p = ddptui("dump", str(run), runs_dir=runs_dir)
        assert p.returncode == 2 and "is not running" in p.stderr
    finally:
        if other.poll() is None:
            other.kill()
            other.wait()


def test_pid_file_check_decisions(tmp_path):
    from ddptui.tui.pidfile import is_ddptui, parse, refusal
    run = tmp_path / "runs" / "20261202-130241-cpu-ddp"
    rec = {"pid": 42, "create_time": 1000.0, "run_dir": str(run)}
    me = {"create_time": 1000.0, "cmdline": ["/venv/bin/python", "-m", "ddptui.tui.cli", "--no-ui", "x"],
          "sigusr1": True, "open": {str(run / "events.jsonl"), str(run / "rank0.log")}}
    assert refusal(rec, me) is None and refusal(rec, me, run) is None
    assert refusal(rec, me, tmp_path / "runs" / ".." / "runs" / run.name) is None  # the same record, spelled otherwise
    copy = tmp_path / "copy"
    assert refusal(rec, me, copy) == f"it names the run {run}, not this record (a copy of a record is no live run)"
    assert refusal({**rec, "run_dir": None}, me, run) == "it does not say which run its ddptui serves"
    dashboard = {**me, "cmdline": ["/venv/bin/python", "-m", "ddptui.tui.cli", "x"], "sigusr1": False}
    assert refusal(rec, dashboard, run) == ("pid 42 does not handle SIGUSR1: it is no headless ddptui (a dashboard "
                                            "would die of it)")
    assert refusal(rec, {**me, "open": {str(copy / "events.jsonl")}}, run) == (
        "pid 42 is not writing this record (it does not hold its events.jsonl open)")
    assert refusal(rec, {**me, "cmdline": ["/venv/bin/python", "/venv/bin/ddptui", "x"]}) is None
    assert "another process" in refusal(rec, {**me, "create_time": 1003.0})
    assert "not a ddptui" in refusal(rec, {**me, "cmdline": ["sleep", "60"]})
    assert "not running" in refusal(rec, None)
    assert refusal(None, me) and parse("1234") is None and parse('{"pid": "x", "create_time": 1}') is None
    assert parse('{"pid": 7, "create_time": 5.5}')["pid"] == 7 and not is_ddptui(["python", "train.py"])


@pytest.mark.timeout(150)
def test_dump_of_a_copied_record_signals_neither_the_original_run_nor_a_dashboard(runs_dir, tmp_path):
    """`cp -r` of a live run's record keeps its ddptui.pid (and its engine.json, its control.sock): `ddptui dump COPY`
    must not reach the original run. A dashboard (which has no SIGUSR1 handler: SIGUSR1 would kill it) is asked
    through its control channel, never signalled, whatever its pid file says."""
    import shlex

    from tests.support.terminal import TMUX, Term
    with live_ddptui(runs_dir, *train_args()) as proc:
        wait_for_rank1(runs_dir, "step 3")
        run = only_run(runs_dir)
        copy = tmp_path / "copied" / run.name
        copy.parent.mkdir()
        subprocess.run(["cp", "-r", str(run), str(copy)], check=True)  # as `cp -r` copies it: its control.sock too
        p = ddptui("dump", str(copy), runs_dir=runs_dir)
        assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
        assert f"it names the run {run.resolve()}, not this record" in p.stderr and "nothing signalled" in p.stderr
        time.sleep(1.0)
        assert not list(run.glob("stacks/*")) and not list(copy.glob("stacks/*"))  # no dump taken anywhere
        assert ddptui("dump", str(run), runs_dir=runs_dir).returncode == 0  # the run itself is still asked
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    if not Path(TMUX).exists():
        pytest.skip("tmux not installed: the dashboard half needs a terminal")
    dash_runs = tmp_path / "dash-runs"
    cmd = (f"unset COLUMNS LINES; cd {shlex.quote(str(ROOT))} && {shlex.quote(sys.executable)} -m ddptui.tui.cli "
           f"--runs-dir {shlex.quote(str(dash_runs))} --set nproc=2 -- {shlex.quote(sys.executable)} "
           f"{shlex.quote(str(TRAIN_LONG))}; echo DDPTUI-EXITED $?; sleep 30")
    term = Term(cmd)
    try:
        term.wait_for("rank 1", 60)
        dash_runs.mkdir(exist_ok=True)
        wait_for_rank1(dash_runs, "step 3")
        run = only_run(dash_runs)
        # the dashboard and its run's engine, a process of its own (tui/held.py)
        both = [q for q in psutil.process_iter(["cmdline"]) if "ddptui.tui.cli" in (q.info["cmdline"] or [])
                and str(dash_runs) in q.info["cmdline"]]
        (engine,) = [q for q in both if "--engine-ready-fd" in q.info["cmdline"]]
        (dash,) = [q for q in both if q is not engine]
        forged = {"pid": dash.pid, "create_time": dash.create_time(), "run_dir": str(run.resolve())}
        (run / "ddptui.pid").write_text(json.dumps(forged))
        p = ddptui("dump", str(run), runs_dir=dash_runs)
        # the dashboard's engine serves its control channel: asked there, never signalled (the forged pid file is
        # not read; its refusal of a dashboard's pid is the unit test above)
        assert p.returncode == 0 and f"asked its engine (pid {engine.pid})" in p.stdout, p.stderr
        wait_until(lambda: list(run.glob("stacks/01-on-request/stacks.json")), 30, "the dashboard's run's stacks")
        assert dash.is_running() and not _pending_signals(dash.pid) and not _pending_signals(engine.pid)
        (run / "ddptui.pid").unlink()
        term.keys("q")
        term.wait_for("Stop every rank and quit?", 20)
        term.keys("y")
        term.wait_for("DDPTUI-EXITED", 60)
        assert (run / "summary.json").exists()
    finally:
        term.close()


@pytest.mark.timeout(120)
def test_a_stop_during_spawning_stops_spawning_at_once(runs_dir, monkeypatch, capsys):
    """SIGTERM arrives after the 2nd of 8 rank processes started: no 3rd, the 2 are torn down, summary, exit 1."""
    from ddptui.runners.edge import procs
    from ddptui.runners.launch.profile.load import adhoc_profile
    from ddptui.tui.cli import run_headless
    real_spawn, started = procs.spawn, []

    def spawn(spec):
        proc = real_spawn(spec)
        started.append(proc)
        if len(started) == 2:
            os.kill(os.getpid(), signal.SIGTERM)  # its handler runs right here, as it would between two forks
        return proc

    monkeypatch.setattr(procs, "spawn", spawn)
    code = run_headless(adhoc_profile([sys.executable, str(TRAIN_LONG)], ["nproc=8"]), str(runs_dir))
    assert code == 1 and len(started) == 2
    assert all(p.returncode is not None for p in started)
    run = only_run(runs_dir)
    assert "stop requested while spawning: 2 of 8 processes started" in (run / "launcher.log").read_text()
    assert json.loads((run / "summary.json").read_text())["status"] == "stopped"
    assert "status: stopped (exit 1)" in capsys.readouterr().out


@pytest.mark.timeout(120)
def test_a_wedged_teardown_is_cut_off_by_the_headless_bound(runs_dir):
    """Teardown stuck (as in a kernel call that never returns): ddptui still exits, with a summary, naming the ranks."""
    driver = textwrap.dedent(f"""
        import sys, time
        import ddptui.runners.edge.procs, ddptui.tui.stopper
        ddptui.runners.edge.procs.teardown = lambda *a, **k: time.sleep(3600)  # the engine wedges in its teardown
        ddptui.tui.stopper.STOP_BOUND = 3.0
        from ddptui.tui.cli import main
        sys.exit(main({["--runs-dir", str(runs_dir), *train_args()]!r}))
    """)
    proc = subprocess.Popen([sys.executable, "-c", driver], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        wait_for_rank1(runs_dir, "step 3")
        proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        out, err = proc.communicate(timeout=60)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1 and 3.0 <= took < 30, (took, err)
    assert "did not end within 3 s" in err and "Traceback" not in err + out, err
    summary = json.loads((only_run(runs_dir) / "summary.json").read_text())
    assert summary["status"] == "stopped" and "did not end within 3 s" in summary["error"]
    assert {re.search(r"\((rank \d)\)", s).group(1) for s in summary["survivors"]} == {"rank 0", "rank 1"}


RECORDS = ROOT / "tests" / "fixtures" / "records"


def copied_record(tmp_path, name: str = "cpu-ddp") -> Path:
    import shutil
    run = tmp_path / name
    shutil.copytree(RECORDS / name, run)
    return run


def replay(run: Path, runs_dir: Path):
    p = ddptui("replay", str(run), "--no-ui", runs_dir=runs_dir)
    assert "Traceback" not in p.stderr + p.stdout, p.stderr
    return p


@pytest.mark.timeout(60)
def test_replay_leaves_out_and_names_a_wrong_typed_event(runs_dir, tmp_path):
    run = copied_record(tmp_path)
    lines = (run / "events.jsonl").read_text().splitlines(keepends=True)
    mid = json.loads(lines[10])["wall"]
    bad = {"kind": "stall", "stalled": [1], "progressing": [0], "since": mid, "threshold": "20", "wall": mid}
    lines.insert(11, json.dumps(bad) + "\n")
    lines.insert(12, json.dumps({"kind": "progress", "rank": 0, "step": "x", "loss": None, "wall": mid,
                                 "source": "hook"}) + "\n")
    (run / "events.jsonl").write_text("".join(lines))
    p = replay(run, runs_dir)
    assert p.returncode == 1
    (note,) = p.stderr.strip().splitlines()
    assert "events.jsonl: 2 malformed lines left out (line 12: stall.threshold: expected float, got str '20'" in note
    assert "replayed what is there" in note
    assert "status: ok (exit 0)" in p.stdout and "[stall]" not in p.stdout  # the rest is replayed as it was


@pytest.mark.timeout(60)
def test_replay_of_a_record_whose_ddptui_was_killed_says_it_is_incomplete(runs_dir, tmp_path):
    run = copied_record(tmp_path)
    text = (run / "events.jsonl").read_text()
    (run / "events.jsonl").write_text(text[:len(text) * 2 // 3].rsplit("\n", 1)[0] + '\n{"rank": 1, "st')
    (run / "summary.json").unlink()
    p = replay(run, runs_dir)
    assert p.returncode == 1
    (note,) = p.stderr.strip().splitlines()
    assert "is cut short (ddptui stopped while writing it)" in note
    assert "no summary.json: the run did not finish (its ddptui was killed, or is still running)" in note
    assert re.search(r"\[rank 1\] step \d+ loss", p.stdout) and "status:" not in p.stdout


@pytest.mark.timeout(60)
def test_replay_ignores_a_stray_rank_log_and_says_so(runs_dir, tmp_path):
    run = copied_record(tmp_path)
    (run / "rankX.log").write_text("not a rank log\n")
    with open(run / "rank0.log", "a") as f:
        f.write("garbage that is no record line\n")
    p = replay(run, runs_dir)
    assert p.returncode == 1
    (note,) = p.stderr.strip().splitlines()
    assert "rankX.log left out (not rank<N>.log)" in note and "rank0.log: 1 line not in the record's format" in note
    assert "status: ok (exit 0)" in p.stdout
    p = replay(copied_record(tmp_path / "clean"), runs_dir)  # a whole record: exit 0, nothing on stderr
    assert p.returncode == 0 and p.stderr == ""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("file, text, words", [
    ("events.jsonl", "[" * 100_000 + "]" * 100_000, "events.jsonl: 1 malformed line left out (line N: JSON nested too deep)"),
    ("summary.json", '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}", "summary.json is malformed (JSON nested too deep)"),
    ("summary.json", "[1, 2]", "summary.json is malformed (expected a JSON object, got list)"),
    ("summary.json", '{"status": 3}', "summary.json is malformed (status: expected str, got int)"),
    ("plan.json", "{", "plan.json is malformed (not JSON)"),
    ("plan.json", '{"runner": "env", "world_size": "2"}', "plan.json is malformed (world_size: expected int, got str)"),
], ids=["events-deep", "summary-deep", "summary-list", "summary-status", "plan-not-json", "plan-world-size"])
def test_replay_of_a_malformed_or_deep_record_file_is_one_line_and_exit_1(runs_dir, tmp_path, file, text, words):
    """Before: a 100,000-deep JSON line was a RecursionError traceback; a malformed summary.json or plan.json exit 0."""
    run = copied_record(tmp_path)
    if file == "events.jsonl":
        lines = (run / file).read_text().splitlines(keepends=True)
        lines.insert(5, text + "\n")
        (run / file).write_text("".join(lines))
        words = words.replace("line N", "line 6")
    else:
        (run / file).write_text(text)
    p = replay(run, runs_dir)
    assert p.returncode == 1, p.stderr
    (note,) = p.stderr.strip().splitlines()
    assert note == f"ddptui: replay of {run}: {words}; replayed what is there", note
    assert re.search(r"\[rank 1\] step \d+ loss", p.stdout)  # what is there is replayed


@pytest.mark.timeout(60)
def test_replay_decisions_on_malformed_event_lines(tmp_path):
    from ddptui.runners.edge.record import replay_events
    run = tmp_path / "r"
    run.mkdir()
    good = {"kind": "run_started", "run_dir": "r", "profile": "p", "runner": "env", "world_size": 1, "steps": None,
            "wall": 1.0}
    rows = [good, [1, 2], {"kind": "nope"}, {"kind": "rank_state", "rank": 0}, {"kind": "resources",
            "cpu": {"x": 1.0}, "rss": {}, "wall": 2.0}, {"kind": "run_finished", "status": "ok", "exit_code": 0,
            "summary_path": "", "wall": 3.0, "summary": {"ranks": {"0": {"steps": "many"}}}}]
    (run / "events.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + "\n{oops\n")
    (run / "summary.json").write_text('{"status": "ok"}')
    problems: list[str] = []
    events = list(replay_events(run, problems))
    assert [e.kind for e in events] == ["run_started"]
    assert problems[0].startswith("events.jsonl: 6 malformed lines left out (line 2: not an event (no \"kind\")")
    assert problems[1:] == ["events.jsonl has no run_finished event"]


@pytest.mark.timeout(60)
def test_dashboard_replay_of_a_malformed_killed_record_opens_and_says_so(tmp_path):
    import asyncio

    from ddptui.tui.app import DdpApp
    from ddptui.tui.replay import ReplaySource
    run = copied_record(tmp_path)
    lines = (run / "events.jsonl").read_text().splitlines(keepends=True)
    lines = lines[:len(lines) * 3 // 4]  # cut before its end, as a killed ddptui leaves it
    at = len(lines) * 2 // 3
    wall = json.loads(lines[at])["wall"]
    lines.insert(at + 1, json.dumps({"kind": "stall", "stalled": "1", "progressing": [0], "since": wall,
                                  "threshold": 20, "wall": wall}) + "\n")
    (run / "events.jsonl").write_text("".join(lines) + '{"kind": "progr')
    (run / "summary.json").unlink()
    (run / "rankX.log").write_text("x\n")
    source = ReplaySource(run)

    async def main():
        app = DdpApp(source=source)
        async with app.run_test(size=(120, 40)) as pilot:
            for _ in range(100):
                if app.model is not None and app.model.finished is not None:
                    break
                await pilot.pause(0.1)
            await pilot.pause(0.5)  # let the run screen finish mounting its panes before the app closes
            m = app.model
            assert m.finished.status == "incomplete" and not m.live and m.stall is None
            assert any("no summary.json" in t for _, _, t in m.launcher)
            assert app.run_error is None
        return app

    asyncio.run(main())
    assert any("rankX.log" in x for x in source.problems)


def _session_until_progress(runs_dir, overrides=("nproc=2",)):
    """A real 2-rank run of train_ddp_long.py; `seen` is set once rank 1 reported progress."""
    import threading

    from ddptui.runners import events as ev
    from ddptui.runners.launch.profile.load import adhoc_profile
    from ddptui.runners.session import Session
    seen = threading.Event()

    def emit(batch):
        if any(isinstance(e, ev.Progress) and e.rank == 1 for e in batch):
            seen.set()

    return Session(adhoc_profile([sys.executable, str(TRAIN_LONG)], list(overrides)), runs_dir, emit=emit), seen


@pytest.mark.timeout(120)
def test_an_engine_error_still_tears_down_and_writes_the_summary(runs_dir, monkeypatch):
    from ddptui.runners.session import Session
    session, seen = _session_until_progress(runs_dir)
    real = Session._sample_resources

    def sample(self):
        if seen.is_set():
            raise RuntimeError("engine bug")
        return real(self)

    monkeypatch.setattr(Session, "_sample_resources", sample)
    with pytest.raises(RuntimeError, match="engine bug"):
        session.run()
    summary = json.loads((session.run_dir / "summary.json").read_text())
    assert summary["status"] == "error" and summary["exit_code"] == 1
    assert "ddptui: internal error: RuntimeError: engine bug" in (session.run_dir / "launcher.log").read_text()
    assert all(p.returncode is not None for p in session.procs)  # torn down; the fixture checks the rest


@pytest.mark.timeout(120)
def test_a_front_end_that_raises_does_not_cost_the_summary(runs_dir, capsys):
    from ddptui.runners import events as ev
    from ddptui.runners.launch.profile.load import adhoc_profile
    from ddptui.runners.session import Session
    got = []

    def broken_front_end(batch):
        got.extend(batch)
        if any(isinstance(e, ev.Progress) for e in got):
            session.request_stop()
        raise ValueError("front end bug")

    session = Session(adhoc_profile([sys.executable, str(TRAIN_LONG)], ["nproc=2"]), runs_dir, emit=broken_front_end)
    assert session.run() == 1
    assert json.loads((session.run_dir / "summary.json").read_text())["status"] == "stopped"
    assert isinstance(got[-1], ev.RunFinished)
    assert "ValueError: front end bug" in capsys.readouterr().err  # said, once per batch, and the run went on


@pytest.mark.timeout(30)
def test_the_runs_end_is_its_last_event_even_after_steps_read_in_the_last_drain(runs_dir):
    """Steps the final drain read were coalesced into Progress at the next flush, which came after RunFinished: the
    end was not the last event (seen once in CI, in the test above)."""
    from ddptui.runners import events as ev
    from ddptui.runners.launch.profile.load import adhoc_profile
    from ddptui.runners.session import Session
    got = []
    session = Session(adhoc_profile([sys.executable, "-c", "pass"], ["nproc=1"]), runs_dir, emit=got.extend)
    pending = [ev.Progress(0, 5, 0.5, time.time(), "parsed")]
    session.judge.progress = lambda: [pending.pop()] if pending else []  # what the last drain left coalescing
    session._finish("ok", 0)
    assert [type(e) for e in got] == [ev.Progress, ev.RunFinished]
    recorded = [json.loads(ln)["kind"] for ln in (session.run_dir / "events.jsonl").read_text().splitlines()]
    assert recorded[-2:] == ["progress", "run_finished"]


@pytest.mark.timeout(30)
def test_stop_signal_decisions_and_the_bound(tmp_path):
    import threading
    from types import SimpleNamespace

    from ddptui.tui.stopper import HeadlessStopper, action
    assert [action(n) for n in (1, 2, 3, 4)] == ["stop", "again", "kill", "kill"]
    asked = []
    session = SimpleNamespace(run_dir=tmp_path, procs=[], tracks={}, world=2,
                              profile=SimpleNamespace(name="p", runner="env"),
                              request_stop=lambda why="": asked.append(f"stop {why}".strip()),
                              request_kill=lambda: asked.append("kill"))
    exited = threading.Event()
    stopper = HeadlessStopper(bound=0.3, hurry_bound=0.2, exit_fn=lambda code: exited.set())
    stopper._watchdog.start()  # as install() does, without taking this process's signal handlers
    stopper._on_signal(2, None)  # before the session exists: kept, then delivered by attach()
    stopper.attach(session)
    stopper._on_signal(2, None)
    stopper._on_signal(2, None)
    assert asked == ["stop SIGINT", "stop SIGINT", "kill"]
    assert exited.wait(10)  # nobody called finished(): the bound ran out
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "stopped" and "did not end within" in summary["error"]
    late = threading.Event()
    done = HeadlessStopper(bound=3600, exit_fn=lambda code: late.set())  # armed, and not running out here
    done._watchdog.start()
    done.attach(session)
    done._on_hangup(1, None)  # SIGHUP (no terminal here to let go of): a stop, once, never the SIGKILL escalation
    for _ in range(3):
        done._on_hangup(1, None)
    assert asked[-1:] == ["stop SIGHUP"] and done.count == 1
    done._on_signal(2, None)
    done.finished()  # run() returned in time: the bound no longer applies
    done._watchdog.join(10)
    assert not done._watchdog.is_alive() and not late.is_set()  # the watchdog left without giving up
