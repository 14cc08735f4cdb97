"""`ddptui runs` over 1,000 records: the whole command (a fresh interpreter, as a user types it) on a runs folder made
of copies of one real run's record (`cpu-ddp --no-ui`, its engine.json naming each copy as its own engine's would),
one in twenty without its summary (an engine that died), the table and `--json`. Target ≤ 1 s."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET_S = 1.0


def real_record(work: Path) -> Path:
    """One short real run's record (the default profile, 20 steps)."""
    runs = work / "runs-list-source"
    p = subprocess.run([sys.executable, "-m", "ddptui.tui.cli", "profiles/cpu-ddp.yaml", "--no-ui", "--runs-dir",
                        str(runs), "--set", "steps=20"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    dirs = [d for d in runs.iterdir() if d.is_dir()] if runs.is_dir() else []
    if p.returncode != 0 or len(dirs) != 1:
        raise RuntimeError(f"the source run exited {p.returncode}: {p.stderr[-300:]}")
    return dirs[0]


def make_runs(src: Path, d: Path, n: int) -> Path:
    """n records in d, copies of src, each started a minute after the one before."""
    d.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        dst = d / f"20261201-{i:06d}-{src.name.split('-', 2)[-1]}"
        shutil.copytree(src, dst)
        ev = dst / "events.jsonl"
        lines = ev.read_bytes().split(b"\n", 1)
        first = json.loads(lines[0])
        first["wall"] = 1796000000.0 + 60 * i
        ev.write_bytes(json.dumps(first).encode() + b"\n" + lines[1])
        info = dst / "engine.json"
        if info.is_file():
            e = json.loads(info.read_text())
            e.update(run_dir=str(dst.resolve()), socket=str(dst.resolve() / "control.sock"))
            info.write_text(json.dumps(e) + "\n")
        if i % 20 == 19:
            (dst / "summary.json").unlink()
    return d


def _once(runs: Path, *extra: str) -> tuple[float, int]:
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "ddptui.tui.cli", "runs", "--runs-dir", str(runs), *extra],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"ddptui runs exited {p.returncode}: {p.stderr[-300:]}")
    rows = len(json.loads(p.stdout)) if extra else len(p.stdout.splitlines()) - 1
    return wall, rows


def bench(cfg, work: Path, res: dict, log, mmm) -> None:
    n = 1000
    runs = make_runs(real_record(work), work / "runs-list", n)
    reps = max(3, cfg.repeats)
    log(f"runs: `ddptui runs` over {n} records (copies of a real run's), {reps} repeats, table and --json")
    _once(runs)  # the page cache warm, as on a second look
    table, js, rows = [], [], set()
    for _ in range(reps):
        w, r = _once(runs)
        table.append(w)
        rows.add(r)
        w, r = _once(runs, "--json")
        js.append(w)
        rows.add(r)
    out = {"records": n, "rows": sorted(rows), "table_s": mmm(table), "json_s": mmm(js), "target_s": TARGET_S}
    out["met"] = max(table + js) <= TARGET_S and rows == {n}
    res["runs"] = out
    log(f"  table {out['table_s']['median']:.3f} s, --json {out['json_s']['median']:.3f} s (median), rows {sorted(rows)}")
    shutil.rmtree(runs, ignore_errors=True)


def report(d: dict, fmt3) -> list[str]:
    return ["## `ddptui runs`: the list of run records\n",
            f"`ddptui runs --runs-dir D` over {d['records']} records (copies of a real `cpu-ddp` run's record, one "
            "in twenty without its summary), the whole command in a fresh interpreter, page cache warm: table "
            f"{fmt3(d['table_s'], 3, ' s')}, `--json` {fmt3(d['json_s'], 3, ' s')} (min / median / max); every record "
            f"listed: {d['rows'] == [d['records']]}. It reads summary.json, the first line of events.jsonl (its "
            "last bytes where there is no summary), profile.json where the summary names no nodes, and the engine's "
            f"lock, never the logs. Target ≤ {d['target_s']:g} s (slowest): {'met' if d['met'] else 'NOT met'}.\n"]
