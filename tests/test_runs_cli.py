"""`ddptui runs` and `ddptui runs prune` for real: a runs folder of the suite's real records, a cut one, and a live
`--detach`ed run of a wrapped torchrun command (its record named after its script); another user's unreadable record
listed by `nobody`; prune's dry run and real run never touch the live record; the dashboard's opener follows it."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest

from ddptui.runners.edge import control
from ddptui.tui.follow import FollowSource
from ddptui.tui.open_record import source_for
from ddptui.tui.replay import ReplaySource
from tests.support.cli import ROOT, ddptui
from tests.support.replay import runs_folder
from tests.support.wait import wait_until

pytestmark = pytest.mark.main_suite("a live --detach run of real torchrun ranks among finished records")
LOOP = ROOT / "tests" / "fixtures" / "healthy_ddp_loop.py"
TORCHRUN = str(Path(sys.executable).parent / "torchrun")


def runs(runs_dir: Path, *args: str, as_nobody: bool = False) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "ddptui.tui.cli", "runs", *args, "--runs-dir", str(runs_dir)]
    if as_nobody:
        cmd = ["setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups", *cmd]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)


@pytest.mark.timeout(150)
def test_runs_lists_a_live_run_among_finished_cut_and_unreadable_records_and_prune_spares_it():
    base = Path(tempfile.mkdtemp(prefix="ddptui-runs-", dir="/tmp"))  # where `nobody` may look (tmp_path is 0700)
    os.chmod(base, 0o755)
    engine = None
    try:
        folder = runs_folder(base)
        secret = folder / "theirs"
        shutil.copytree(folder / "hang", secret)
        p = ddptui("--detach", "--set", "timeout=120", "--", TORCHRUN, "--standalone", "--nproc_per_node=2", str(LOOP),
                   runs_dir=folder, timeout=60)
        assert p.returncode == 0, p.stderr
        live = Path(p.stdout.splitlines()[0][5:])
        engine = psutil.Process(int(p.stdout.splitlines()[1].split()[-1]))
        assert live.name.endswith("-adhoc-healthy_ddp_loop")  # named after its script, not `adhoc`
        wait_until(lambda: (live / "events.jsonl").stat().st_size > 0, 30, "the live run's first events")

        got = runs(folder, "--json")
        assert got.returncode == 0, got.stderr
        rows = {Path(r["path"]).name: r for r in json.loads(got.stdout)}
        assert list(rows)[0] == live.name and len(rows) == 7  # newest first: the live run
        assert (rows[live.name]["status"], rows[live.name]["live"], rows[live.name]["ranks"]) == ("live", True, 2)
        assert rows[live.name]["name"] == "adhoc-healthy_ddp_loop" and rows[live.name]["runner"] == "torchrun"
        assert rows["crash"]["status"] == "failed" and rows["crash"]["verdict"].startswith("rank 1 failed first")
        assert rows["crash-killed"]["status"] == "incomplete" and "ends in a cut line" in rows["crash-killed"]["verdict"]
        listed = runs(folder)
        table = listed.stdout.splitlines()
        assert listed.stderr == (f"ddptui runs: {folder / 'crash-killed'}: events.jsonl ends in a cut line (the engine "
                                 "was killed while writing, or the file was cut)\n")
        assert table[0].startswith("STARTED") and "adhoc-healthy_ddp_loop" in table[1] and " live " in table[1]
        assert [ln.split()[-1] for ln in runs(folder, "--status", "live").stdout.splitlines()[1:]] == [str(live)]
        assert len(runs(folder, "--profile", "adhoc-*").stdout.splitlines()) == 2
        assert runs(folder, "--since", "soon").returncode == 2

        if os.geteuid() == 0 and shutil.which("setpriv"):  # another user's record, as that other user sees it
            os.chmod(secret, 0o700)
            seen = runs(folder, "--json", as_nobody=True)
        else:
            os.chmod(secret, 0)
            seen = runs(folder, "--json")
        assert seen.returncode == 0, seen.stderr
        theirs = {Path(r["path"]).name: r for r in json.loads(seen.stdout)}
        assert len(theirs) == 7 and theirs["theirs"]["status"] == "unreadable"
        assert "permission denied" in theirs["theirs"]["verdict"]
        assert theirs["crash"]["status"] == "failed" and theirs[live.name]["live"] is True
        os.chmod(secret, 0o755)

        assert isinstance(source_for(live)[0], FollowSource) and isinstance(source_for(folder / "hang")[0], ReplaySource)

        dry = runs(folder, "prune", "--keep", "2", "--dry-run")
        assert dry.returncode == 0, dry.stderr
        assert dry.stdout.count("would remove /") == 5 and f"{live}" not in dry.stdout
        assert dry.stdout.splitlines()[-1] == "would remove 5 records"
        assert len(list(folder.iterdir())) == 7  # nothing removed
        gone = runs(folder, "prune", "--keep", "0")
        assert gone.stdout.count("removed /") == 6, gone.stdout
        assert f"kept {live}: live" in gone.stdout
        assert [d.name for d in folder.iterdir()] == [live.name] and control.state_of(live).state == "live"

        assert control.ask(live, "stop")["ok"]
        engine.wait(60)
        assert json.loads(runs(folder, "--json").stdout)[0]["status"] == "stopped"
    finally:
        if engine is not None and engine.is_running():
            engine.kill()
        shutil.rmtree(base, ignore_errors=True)
