"""`make bench` section "replica": what the live replica check (`replica_check_every`) costs a training step.

Two measures, side by side in one run. End to end: the built-in workload (ddp_mlp, `ddptui cpu-ddp --no-ui`, 2 gloo
ranks) with `replica_check_every` at its default and at 0, in pairs whose order alternates; time per step from the
ranks' own clocks (fr_overhead.rank_seconds_per_step), ratio within each pair. On a shared 2-core machine a pair's
runs differ by more than the 1 % sought, so the check is also measured in one instrumented rank alone, by its CPU
clock (bench/workloads/replica_step_cpu.py, with and without the check, pairs alternating), and timed alone: the rank
side's digest and report line for ddp_mlp's model (per check, then per step at the default interval, as a share of
the measured step), and the digest of a 1M-parameter model (the cost per million parameters on the CPU).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from fr_overhead import rank_seconds_per_step

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "runners" / "inject"))
TARGET = 1.01
STEP_CPU = ROOT / "bench" / "workloads" / "replica_step_cpu.py"


def _default_every() -> int:
    from ddptui.runners.launch.profile.model import default
    return int(default("replica_check_every"))


def run_once(every: int, steps: int, work: Path) -> dict:
    runs = work / f"replica-{every}"
    shutil.rmtree(runs, ignore_errors=True)
    argv = [sys.executable, "-m", "ddptui.tui.cli", "profiles/cpu-ddp.yaml", "--no-ui", "--runs-dir", str(runs),
            "--set", f"steps={steps}", "--set", f"replica_check_every={every}"]
    t0 = time.time()
    rc = subprocess.run(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600).returncode
    out: dict = {"every": every, "exit": rc, "wall_s": time.time() - t0}
    dirs = [d for d in runs.iterdir() if d.is_dir()] if runs.exists() else []
    if rc != 0 or len(dirs) != 1:
        out["error"] = f"exit {rc}"
        return out
    out["s_per_step"], _ = rank_seconds_per_step(dirs[0])
    checks = json.loads((dirs[0] / "summary.json").read_text(encoding="utf-8")).get("replica_checks") or {}
    out["compared"] = checks.get("compared")
    if every and not checks.get("compared"):  # the mode must be what it says
        out["error"] = f"replica_check_every={every} but no check was compared"
    shutil.rmtree(runs, ignore_errors=True)
    return out


def rank_cpu_once(every: int, steps: int, port: int) -> tuple[float, float] | None:
    """(CPU, wall) seconds per step of one instrumented rank (bench/workloads/replica_step_cpu.py), the check every
    `every` steps (0: off); its reports go to a pipe nobody reads but this."""
    env = dict(os.environ, DDPTUI="1", DDPTUI_PID=str(os.getpid()), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0",
               OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT / "runners" / "inject"), STEPS=str(steps),
               BENCH_PORT=str(port), DDPTUI_REPLICA_EVERY=str(every))
    p = subprocess.run([sys.executable, "-u", str(STEP_CPU)], env=env, cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    got = [ln.split()[1:] for ln in p.stdout.splitlines() if ln.startswith("per_step_s ")]
    checks = p.stdout.count('"k":"replica_digest"')
    if p.returncode != 0 or not got or (every and checks != (steps + 200) // every) or (not every and checks):
        return None
    return float(got[0][0]), float(got[0][1])


def _best_seconds(fn, n: int) -> float:
    """The fastest of n calls (timeit's advice: the others were slowed by the machine's other work, not by fn)."""
    fn()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def digest_costs(reps: int) -> dict:
    """Seconds per check on ddp_mlp's model (digests and the report line's JSON), and per 1M-parameter digest (the
    fastest of `reps` calls each)."""
    import torch

    import ddptui_replica

    torch.set_num_threads(1)  # as a rank runs (OMP_NUM_THREADS=1)
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
                              torch.nn.Linear(64, 1))
    named = list(mlp.named_parameters())

    def check() -> None:
        ds = ddptui_replica.digests([p for _, p in named], torch)
        json.dumps({"k": "replica_digest", "r": 0, "step": 100, "params": [[n, d] for (n, _), d in zip(named, ds, strict=True)]},
                   separators=(",", ":"))

    million = [torch.nn.Linear(1000, 1000).weight.detach()]  # 1,000,000 float32 parameters
    return {"mlp_params": sum(p.numel() for _, p in named),
            "check_s": _best_seconds(check, reps * 20),
            "per_million_cpu_s": _best_seconds(lambda: ddptui_replica.digests(million, torch), reps),
            # the device way (integer sums), run on the CPU here: what a CUDA rank runs, minus the GPU's speed
            "per_million_sums_on_cpu_s": _best_seconds(lambda: ddptui_replica.device_digests(million, torch), reps)}


def bench(cfg, work: Path, res: dict, log, mmm) -> None:
    every, steps, pairs = _default_every(), cfg.replica_steps, cfg.replica_pairs
    log(f"replica: ddp_mlp {steps} steps, 2 gloo ranks, replica_check_every={every} (default) vs 0, {pairs} pairs")
    rows: dict[int, list] = {every: [], 0: []}
    ratios, fails = [], []
    for i in range(pairs):
        got = {}
        for e in ((every, 0) if i % 2 == 0 else (0, every)):
            r = run_once(e, steps, work)
            log(f"  pair {i} every={e}: {r.get('s_per_step') or 0:.6f} s/step (rank clock), wall {r['wall_s']:.2f} s, "
                f"checks compared {r.get('compared')} {r.get('error', '')}")
            if "error" in r or not r.get("s_per_step"):
                fails.append(f"pair {i} every={e}: {r.get('error', 'no step times')}")
                continue
            rows[e].append(r)
            got[e] = r
        if len(got) == 2:
            ratios.append(got[every]["s_per_step"] / got[0]["s_per_step"])
    cpu = {every: [], 0: []}
    cpu_ratios = []
    for i in range(pairs + 2):  # in the rank alone, by its CPU clock: what the check costs a step
        got = {}
        for e in ((every, 0) if i % 2 == 0 else (0, every)):
            got[e] = rank_cpu_once(e, cfg.replica_steps, 29300 + 2 * i + (e > 0))
            if got[e] is not None:
                cpu[e].append(got[e][0])
        log(f"  rank alone pair {i}: every={every} {got[every]}, off {got[0]} (CPU, wall s per step)")
        if got[every] and got[0]:
            cpu_ratios.append(got[every][0] / got[0][0])
    costs = digest_costs(5 if cfg.quick else 20)
    step_s = mmm([r["s_per_step"] for r in rows[0]])["median"]
    share = costs["check_s"] / every / step_s if step_s and every else None
    ratio = mmm(ratios)
    out = {"every": every, "steps": steps, "pairs": pairs, "target": TARGET, "failures": fails,
           "ms_per_step": {str(e): mmm([1000 * r["s_per_step"] for r in rs]) for e, rs in rows.items()},
           "ratio": ratio, "ratio_values": ratios, "costs": costs, "share_of_step": share,
           "rank_cpu_us_per_step": {str(e): mmm([1e6 * c for c in cs]) for e, cs in cpu.items()},
           "rank_cpu_ratio": mmm(cpu_ratios), "rank_cpu_ratio_values": cpu_ratios}
    # the least disturbed run of each: the pairs' spread on a loaded machine is wider than the effect sought
    best = {e: min(cs) for e, cs in cpu.items() if cs}
    out["rank_cpu_best_ratio"] = best[every] / best[0] if len(best) == 2 else None
    cr = out["rank_cpu_best_ratio"]
    out["met"] = share is not None and share <= TARGET - 1 and cr is not None and cr <= TARGET
    res["replica"] = out
    log(f"replica: per-step ratio default/off {ratio}, in the rank alone by CPU {out['rank_cpu_ratio']}, fastest "
        f"runs {out['rank_cpu_best_ratio']} "
        f"(target <= {TARGET}); one check of ddp_mlp "
        f"{costs['check_s'] * 1e6:.0f} us = {100 * (share or 0):.3f} % of a step at every={every}; "
        f"digest per 1M parameters {costs['per_million_cpu_s'] * 1e3:.2f} ms (CPU, blake2b), "
        f"{costs['per_million_sums_on_cpu_s'] * 1e3:.2f} ms (the device way's sums, run on the CPU)")


def report(r: dict, fmt3) -> list[str]:
    c, every = r["costs"], r["every"]
    L = ["## 13. The live replica check: overhead\n"]
    L.append(f"`ddptui cpu-ddp --no-ui --set steps={r['steps']}` (ddp_mlp, 2 gloo ranks) with `replica_check_every` "
             f"at its default ({every}) and at 0, {r['pairs']} pairs in alternating order; time per step from the ranks' "
             "own clocks (first to last progress report, the slower rank); ratio within each pair.\n")
    L.append("| | ms per step (rank clock) |\n|---|---|")
    L.append(f"| replica_check_every: {every} (default) | {fmt3(r['ms_per_step'][str(every)], 3)} |")
    L.append(f"| replica_check_every: 0 (off) | {fmt3(r['ms_per_step']['0'], 3)} |")
    L.append(f"| ratio default / off (per pair) | {fmt3(r['ratio'], 3)} |")
    L.append("")
    rc = r.get("rank_cpu_us_per_step") or {}
    L.append("In the rank alone (`bench/workloads/replica_step_cpu.py`: one instrumented gloo DDP rank, ddp_mlp's model "
             f"and step, {r['steps']} steps; CPU time by the rank's own clock, which the machine's other work does not "
             f"stretch as it does wall time), {len(r.get('rank_cpu_ratio_values') or [])} pairs in alternating order:\n")
    L.append("| | µs CPU per step |\n|---|---|")
    L.append(f"| replica_check_every: {every} (default) | {fmt3(rc.get(str(every)), 1)} |")
    L.append(f"| replica_check_every: 0 (off) | {fmt3(rc.get('0'), 1)} |")
    L.append(f"| ratio default / off (per pair) | {fmt3(r.get('rank_cpu_ratio'), 3)} |")
    best = r.get("rank_cpu_best_ratio")
    L.append(f"| **ratio of the fastest runs, default / off** | **{'-' if best is None else f'{best:.3f}'}** |")
    L.append("")
    share = r.get("share_of_step")
    L.append(f"The check timed alone (the rank side: digests of ddp_mlp's {c['mlp_params']:,} parameters and the JSON of "
             f"its report line): {c['check_s'] * 1e6:.0f} µs per check, every {every} steps: "
             f"{'-' if share is None else f'{100 * share:.3f} %'} of a step. "
             f"Digest of 1M float32 parameters: {c['per_million_cpu_s'] * 1e3:.2f} ms on the CPU (blake2b of the "
             f"bytes); the device way (two int64 sums, what a CUDA rank runs) {c['per_million_sums_on_cpu_s'] * 1e3:.2f}"
             " ms when run on this CPU.\n")
    spread = r.get("rank_cpu_ratio") or {}
    conclusive = bool(spread.get("n")) and spread["min"] >= 2 - r["target"] - 0.01 and spread["max"] <= r["target"] + 0.01
    verdict = "met" if r["met"] else "**missed**"
    if not conclusive:  # the load moved whole runs by more than the effect sought: the check timed alone decides
        verdict += (f" by the fastest runs, but **not conclusive** (per-pair ratios {fmt3(spread, 3)}); by the check "
                    f"timed alone: {'met' if share is not None and share <= r['target'] - 1 else '**missed**'}")
    L.append(f"Target ≤ {r['target']} per step: {verdict}."
             + (f" Runs left out: {r['failures']}" if r["failures"] else "") + "\n")
    return L
