"""`make bench` section 9: what `ddptui attach --watch` costs the ranks it watches (issue 16, part 3).

One healthy 2-rank gloo DDP job (bench/workloads/timed_ddp_steps.py, started by torchrun outside ddptui, each rank's
output to its own file) runs throughout; windows of W seconds alternate between nobody attached and `ddptui attach PID
--watch` (py-spy over every rank each stack_every seconds, CPU/RSS each second, the output followed), the order
rotating between pairs. Time per step is taken from the ranks' own clocks (the `t` each step prints, rank 0's lines
inside the window); the ratio attached / alone is taken within each pair, and its median reported."""
from __future__ import annotations

import glob
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORKLOAD = ROOT / "bench" / "workloads" / "timed_ddp_steps.py"
TARGET = 1.02


def step_time(path: str, t0: float, t1: float) -> float | None:
    """Seconds per step from rank 0's own stamps between t0 and t1."""
    stamps = []
    with open(path, errors="replace") as f:
        for ln in f:
            parts = ln.split()
            if len(parts) == 6 and parts[0] == "step" and parts[4] == "t":
                t = float(parts[5])
                if t0 <= t <= t1:
                    stamps.append(t)
    return (stamps[-1] - stamps[0]) / (len(stamps) - 1) if len(stamps) > 10 else None


def window(path: str, seconds: float, attach_pid: int | None, stack_every: float, work: Path) -> dict:
    watcher = None
    if attach_pid is not None:
        watcher = subprocess.Popen([sys.executable, "-m", "ddptui.tui.cli", "attach", str(attach_pid), "--watch",
                                    "--stack-every", str(stack_every), "--stall-after", "600",
                                    "--runs-dir", str(work / "runs")],
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for ln in watcher.stdout:  # measured once it follows the job
            if "ranks found" in ln:
                break
    t0 = time.time()
    time.sleep(seconds)
    t1 = time.time()
    if watcher is not None:
        watcher.send_signal(signal.SIGINT)  # detaches
        watcher.communicate(timeout=60)
    return {"s_per_step": step_time(path, t0, t1), "attached": attach_pid is not None}


def bench(cfg, work: Path, res: dict, log, mmm) -> None:
    pairs, seconds, every = cfg.attach_pairs, cfg.attach_window, cfg.attach_stack_every
    log(f"attach cost: 2-rank gloo DDP under torchrun, {pairs} pairs of {seconds:g} s windows, alone vs "
        f"`ddptui attach --watch` (py-spy every {every:g} s)")
    d = work / "attach"
    d.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    job = subprocess.Popen([str(Path(sys.executable).parent / "torchrun"), "--nproc-per-node", "2", "--master-port",
                            str(random.randint(20000, 29999)), "--log-dir", str(d / "logs"), "--redirects", "3",
                            str(WORKLOAD)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=d)
    try:
        deadline = time.monotonic() + 120
        path = None
        while time.monotonic() < deadline and path is None:
            hits = glob.glob(str(d / "logs" / "*" / "attempt_0" / "0" / "stdout.log"))
            if hits and os.path.getsize(hits[0]) > 10_000:
                path = hits[0]
            time.sleep(0.5)
        if path is None:
            raise RuntimeError("the job did not start training within 120 s")
        ratios, rows = [], []
        for i in range(pairs):
            order = (None, job.pid) if i % 2 == 0 else (job.pid, None)
            got = {}
            for who in order:
                w = window(path, seconds, who, every, d)
                got["on" if w["attached"] else "off"] = w["s_per_step"]
            rows.append(got)
            if got.get("on") and got.get("off"):
                ratios.append(got["on"] / got["off"])
            log(f"  pair {i + 1}: alone {got.get('off')}, attached {got.get('on')} s/step")
        res["attach"] = {"pairs": rows, "ratio": mmm(ratios), "stack_every": every, "window_s": seconds,
                         "load": ", ".join(f"{x:.1f}" for x in os.getloadavg()), "date": time.strftime("%Y-%m-%d %H:%M")}
    finally:
        tree = []
        try:
            import psutil
            tree = psutil.Process(job.pid).children(recursive=True)
        except Exception:  # noqa: BLE001 - the job is gone already
            pass
        job.send_signal(signal.SIGTERM)
        try:
            job.wait(timeout=30)
        except subprocess.TimeoutExpired:
            job.kill()
            job.wait()
        for p in tree:
            try:
                p.kill()
            except Exception:  # noqa: BLE001
                pass


def report(a: dict, fmt3) -> list[str]:
    r = a.get("ratio")
    return ["", f"## 9. `ddptui attach --watch`: its cost on the ranks (run of {a.get('date')}, load {a.get('load')})", "",
            f"A healthy 2-rank gloo DDP job under torchrun, started outside ddptui; {len(a.get('pairs', []))} pairs of "
            f"{a.get('window_s'):g} s windows alone / attached (`--watch`, py-spy over every rank each "
            f"{a.get('stack_every'):g} s, CPU and RSS each second), the order rotating; time per step by rank 0's own "
            "clock.", "",
            "| figure | measured (min / median / max) | target |", "|---|---|---|",
            f"| step time attached / alone | {fmt3(r, 3) if r else 'n/a'} | <= {TARGET} |", ""]
