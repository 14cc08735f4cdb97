"""`make bench` section "compare": `ddptui compare A B --no-ui` of two 100,000-step runs (target ≤ 2 s).

The two records are written by the engine's own writer (runners.edge.record.RunRecord) as a run of 2 ranks would
leave them, in two shapes: slow steps (longer than the engine's turn: one Progress event a rank a step, 200,000
events a record, the most a 100,000-step run can hold) and fast steps (25 steps a turn: 8,000 events of 25 losses).
Each is compared by the command a user runs (a fresh process: start-up, reading both records, the table), wall and
CPU time, min / median / max over the repeats.
"""
from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET_S = 2.0
STEPS = 100_000
SHAPES = {"slow steps (1 step an event)": 1, "fast steps (25 steps an event)": 25}


def make_record(d: Path, ranks: int, steps: int, per_event: int, step_s: float, offset: float = 0.0) -> None:
    """A finished run's record: RunStarted, each rank's Progress every `per_event` steps (step times and losses with a
    deterministic jitter, as a run's vary), RunFinished."""
    from ddptui.runners import events as ev
    from ddptui.runners.edge.record import RunRecord
    rec = RunRecord(d)
    t0 = 1_700_000_000.0
    rec.event(ev.RunStarted(str(d), "bench", "torchrun", ranks, steps, t0))
    for s in range(per_event, steps + 1, per_event):
        for r in range(ranks):
            jitter = ((s * 7919 + r * 104729) % 1000) / 1000  # 0 .. 1
            pts = tuple((k, 2.0 / k + offset + 0.01 * r + 0.001 * jitter) for k in range(s - per_event + 1, s + 1))
            rec.event(ev.Progress(r, s, pts[-1][1], t0 + 5 + s * step_s, "hook", pts, 64, step_s * (0.9 + 0.2 * jitter)))
    rec.event(ev.ReplicaVerdict("identical", "all 2 ranks hold byte-identical weights", None, (), (), {},
                                t0 + 6 + steps * step_s))
    rec.event(ev.RunFinished("ok", 0, str(d / "summary.json"), t0 + 6 + steps * step_s, {}))
    rec.close()


def compare_once(a: Path, b: Path) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "ddptui.tui.cli", "compare", str(a), str(b), "--no-ui"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = {"wall_s": wall, "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
           "exit": p.returncode}
    if p.returncode != 0 or f"loss at step {STEPS}" not in p.stdout:
        out["error"] = (p.stderr or p.stdout)[-300:]
    return out


def bench(cfg, work: Path, res: dict, log, mmm) -> None:
    repeats = 1 if cfg.quick else max(cfg.repeats, 5)
    out: dict = {"steps": STEPS, "repeats": repeats, "target_s": TARGET_S, "shapes": {}}
    for name, per_event in SHAPES.items():
        a, b = work / f"compare-{per_event}-a", work / f"compare-{per_event}-b"
        make_record(a, 2, STEPS, per_event, 0.3 if per_event == 1 else 0.01)
        make_record(b, 2, STEPS, per_event, 0.25 if per_event == 1 else 0.008, offset=0.05)
        size = sum((d / "events.jsonl").stat().st_size for d in (a, b))
        runs = [compare_once(a, b) for _ in range(repeats)]
        log(f"compare {name}: {runs}")
        ok = [r for r in runs if "error" not in r]
        out["shapes"][name] = {"events_per_record": 2 * STEPS // per_event, "mb": size / 1e6,
                               "wall_s": mmm([r["wall_s"] for r in ok]), "cpu_s": mmm([r["cpu_s"] for r in ok]),
                               "errors": [r["error"] for r in runs if "error" in r]}
        for d in (a, b):
            for f in d.iterdir():
                f.unlink()
            d.rmdir()
    out["load_average"] = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    out["met"] = all(s["wall_s"] and s["wall_s"]["median"] <= TARGET_S and not s["errors"]
                     for s in out["shapes"].values())
    res["compare"] = out


def report(r: dict, fmt3) -> list[str]:
    L = ["## Compare: two 100,000-step runs\n"]
    L.append(f"`ddptui compare A B --no-ui` (a fresh process: start-up, both records read, the table) of two records "
             f"of {r['steps']:,} steps on 2 ranks, written by the engine's own writer; {r['repeats']} repeats; load "
             f"average at the end {r.get('load_average')}.\n")
    L.append("| records | events a record | MB (both) | wall s | CPU s |\n|---|---|---|---|---|")
    for name, s in r["shapes"].items():
        L.append(f"| {name} | {s['events_per_record']:,} | {s['mb']:.0f} | {fmt3(s['wall_s'])} | {fmt3(s['cpu_s'])} |"
                 + (f" errors: {'; '.join(s['errors'])}" if s["errors"] else ""))
    L.append(f"\nTarget ≤ {r['target_s']:g} s (median wall, both shapes): {'met' if r['met'] else '**missed**'}.\n")
    return L
