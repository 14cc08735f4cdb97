"""`make bench`: ddptui's overhead, ingest throughput, stall latency, memory, start-up and UI latency,
measured side by side with what users would run instead (bare torchrun, torchrun --tee, a plain pipe).

  .venv/bin/python bench/run.py [--quick] [--repeats N]
      [--only overhead,ingest,engine,stall,memory,startup,ui,multinode,fr,attach,many,viewer,restarts,replica,serve,
              runs,compare]

Writes bench/results.md (docs/performance.md is made from it) and bench/results.json; with --only, the
sections not run keep their figures and their text from the results.json already there (each section says when it
was measured).
Every figure is min / median / max over the repeats; ratios are taken pair by pair within one repeat
(the machine is shared and noisy), and the order of the pair alternates between repeats.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

import attach_cost  # noqa: E402
import compare_cost
import fr_overhead  # bench/ is this script's folder, first on sys.path
import multinode
import replica_cost
import restart_pace
import runs_list
import serve_latency
import ui_many
import ui_viewer
from figures import fmt, fmt3, mmm
from ingest_engine import count_lines

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # tests.support.terminal drives the dashboard in a terminal
BENCH = ROOT / "bench"
PY = sys.executable
PRINTER = BENCH / "workloads" / "printer.py"
DDP_MLP = ROOT / "runners" / "workloads" / "ddp_mlp.py"
DEVNULL = subprocess.DEVNULL


# ---------------------------------------------------------------------------------------------- helpers

def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def env_with(**kw) -> dict:
    env = dict(os.environ)
    env.update({k: str(v) for k, v in kw.items()})
    return env


class Timed:
    """A process whose exit wall time is taken by a waiting thread (no polling granularity), with the CPU
    seconds of its whole tree (wait4 rusage: itself and every descendant it waited for) and, on request,
    the peak RSS of the process itself (sampled every 50 ms)."""

    def __init__(self, argv, sample_rss: bool = False, **kw) -> None:
        self.t_start = time.time()
        self.p = subprocess.Popen(argv, **kw)
        self.t_end = None
        self.rc = None
        self.cpu_s = None
        self.peak_rss_mb = None
        self.th = threading.Thread(target=self._wait, daemon=True)
        self.th.start()
        if sample_rss:
            threading.Thread(target=self._sample, daemon=True).start()

    def _wait(self) -> None:
        _, status, ru = os.wait4(self.p.pid, 0)
        self.t_end = time.time()
        self.rc = os.waitstatus_to_exitcode(status)
        self.p.returncode = self.rc
        self.cpu_s = ru.ru_utime + ru.ru_stime

    def _sample(self) -> None:
        import psutil
        try:
            pr = psutil.Process(self.p.pid)
            peak = 0
            while self.t_end is None:
                peak = max(peak, pr.memory_info().rss)
                self.peak_rss_mb = peak / 2**20
                time.sleep(0.05)
        except psutil.Error:
            pass

    def wait(self, timeout=None) -> int:
        self.th.join(timeout)
        if self.t_end is None:
            self.p.kill()
            self.th.join()
            raise TimeoutError(f"{self.p.args!r} ran past {timeout} s")
        return self.rc

    @property
    def wall(self) -> float:
        return self.t_end - self.t_start


def only_run_dir(runs: Path) -> Path:
    dirs = [d for d in runs.iterdir() if d.is_dir()]
    if len(dirs) != 1:
        raise RuntimeError(f"expected one run record under {runs}, found {len(dirs)}")
    return dirs[0]


def read_events(run_dir: Path) -> list[dict]:
    out = []
    p = run_dir / "events.jsonl"
    if p.exists():
        for raw in p.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                out.append(json.loads(raw))
            except ValueError:
                pass
    return out


def log_ts(line: bytes) -> float | None:
    """Wall time of a run-record log line ('2026-12-02T13:26:01.048+00:00 out text'; older: no offset)."""
    try:
        return datetime.fromisoformat(line.split(b" ", 1)[0].decode()).timestamp()
    except (ValueError, UnicodeDecodeError):
        return None


def count_and_last(path: Path, marker: bytes) -> tuple[int, float | None]:
    """Lines containing marker in a run-record log, and the read time of the last of them."""
    n = 0
    last_ts = None
    carry = b""
    with open(path, "rb") as f:
        while True:
            chunk = f.read(1 << 24)
            if not chunk:
                break
            n += (carry + chunk).count(marker)  # carry: a marker cut by the chunk boundary
            carry = chunk[-(len(marker) - 1):]
        size = f.tell()
        f.seek(max(0, size - (1 << 16)))
        tail = f.read().split(b"\n")
    for ln in reversed(tail):
        if marker in ln:
            last_ts = log_ts(ln)
            break
    return n, last_ts


def load_stamps(d: Path, ranks: int) -> list[dict]:
    out = []
    for r in range(ranks):
        p = d / f"rank{r}.json"
        if p.exists():
            out.append(json.loads(p.read_text()))
    return out


# ---------------------------------------------------------------------------------------------- 1. overhead

def bench_overhead(cfg, work: Path, res: dict) -> None:
    steps = cfg.steps
    log(f"overhead: ddp_mlp {steps} steps, 2 gloo ranks, bare torchrun vs ddptui --no-ui, {cfg.overhead_repeats} pairs")
    bare_t, tui_t, ratios, spawn_lat, hello_lat, fails = [], [], [], [], [], []
    bare_cpu, tui_cpu, cpu_ratios, own_cpu, own_share = [], [], [], [], []
    for i in range(cfg.overhead_repeats):
        order = ("bare", "ddptui") if i % 2 == 0 else ("ddptui", "bare")
        got, failed = {}, False
        for which in order:
            if which == "bare":
                env = env_with(DDP_STEPS=steps, DDP_BACKEND="gloo", DDP_DEVICE="cpu", OMP_NUM_THREADS=1)
                t = Timed([PY, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(DDP_MLP)],
                          env=env, stdout=DEVNULL, stderr=DEVNULL, cwd=ROOT)
                rc = t.wait(600)
            else:
                runs = work / f"overhead-{i}"
                t = Timed([PY, "-m", "ddptui.tui.cli", "profiles/cpu-ddp.yaml", "--no-ui", "--runs-dir", str(runs),
                           "--set", f"steps={steps}"], stdout=DEVNULL, stderr=DEVNULL, cwd=ROOT)
                rc = t.wait(600)
                run_dir = only_run_dir(runs)
                evs = read_events(run_dir)
                summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
                if summary.get("ddptui_cpu_s") is not None:
                    own_cpu.append(summary["ddptui_cpu_s"])
                    own_share.append(100 * summary["ddptui_cpu_s"] / t.wall)  # % of one core
                ps = [e["wall"] for e in evs if e.get("kind") == "process_started"]
                hi = [e["wall"] for e in evs if e.get("kind") == "rank_hello"]
                if ps:
                    spawn_lat.append(min(ps) - t.t_start)
                if hi:
                    hello_lat.append(min(hi) - t.t_start)
                shutil.rmtree(runs, ignore_errors=True)
            if rc != 0:
                fails.append(f"{which} repeat {i}: exit {rc}")
                failed = True
            got[which] = t.wall
            got[which + "_cpu"] = t.cpu_s
            log(f"  repeat {i} {which}: {t.wall:.2f} s wall, {t.cpu_s:.2f} s CPU (all processes) (exit {rc})")
        if failed:  # a run that failed did not do the same work: its pair says nothing about overhead
            log(f"  repeat {i}: left out of the ratios")
            continue
        bare_t.append(got["bare"])
        tui_t.append(got["ddptui"])
        ratios.append(got["ddptui"] / got["bare"])
        bare_cpu.append(got["bare_cpu"])
        tui_cpu.append(got["ddptui_cpu"])
        cpu_ratios.append(got["ddptui_cpu"] / got["bare_cpu"])
    r = mmm(ratios)
    res["overhead"] = {"steps": steps, "bare_s": mmm(bare_t), "ddptui_s": mmm(tui_t), "ratio": r,
                       "ratios": ratios, "bare_cpu_s": mmm(bare_cpu), "ddptui_cpu_s": mmm(tui_cpu),
                       "cpu_ratio": mmm(cpu_ratios), "cpu_ratios": cpu_ratios, "target": 1.02, "met": r["median"] is not None and r["median"] <= 1.02,
                       "ddptui_own_cpu_s": mmm(own_cpu), "ddptui_own_cpu_share": mmm(own_share),  # share: % of one core
                       "pairs": len(ratios), "failures": fails}
    res.setdefault("startup", {})["spawn_s"] = mmm(spawn_lat)
    res["startup"]["first_hello_s"] = mmm(hello_lat)
    log(f"overhead ratio ddptui/bare: wall {fmt3(r, 3)}, CPU {fmt3(mmm(cpu_ratios), 3)} (target <= 1.02); "
        f"ddptui's own CPU {fmt3(mmm(own_cpu))} s")


# ---------------------------------------------------------------------------------------------- 2. ingest

def _ingest_profile(d: Path, n: int, mix: str, stamps: Path) -> Path:
    p = d / "bench-ingest.yaml"
    p.write_text(
        "name: bench-ingest\n"
        "description: bench printer, 2 ranks printing as fast as they can\n"
        "runner: torchrun\nnproc: 2\n"
        f"workload:\n  script: {json.dumps(str(PRINTER))}\n"
        "replica_check: false\ntimeout: 300\n"
        f"env:\n  PRINT_LINES: \"{n}\"\n  PRINT_MIX: {mix}\n  PRINT_STAMP_DIR: {json.dumps(str(stamps))}\n",
        encoding="utf-8")
    return p


def ingest_once(mode: str, mix: str, n: int, d: Path) -> dict:
    """One 2-rank printing run through `mode`; lines/s from the first rank's first write to the last line delivered."""
    if d.exists():
        shutil.rmtree(d)
    stamps = d / "stamps"
    stamps.mkdir(parents=True)
    total = 2 * n
    pr_env = dict(PRINT_LINES=n, PRINT_MIX=mix, PRINT_STAMP_DIR=stamps)
    arrived, rc, t_delivered, extra = None, 0, None, {}
    if mode == "ddptui":
        prof = _ingest_profile(d, n, mix, stamps)
        runs = d / "runs"
        t = Timed([PY, "-m", "ddptui.tui.cli", str(prof), "--no-ui", "--runs-dir", str(runs)], sample_rss=True,
                  stdout=DEVNULL, stderr=DEVNULL, cwd=ROOT)
        rc = t.wait(600)
        rd = only_run_dir(runs)
        arrived, lasts = 0, []
        for r in range(2):
            c, last = count_and_last(rd / f"rank{r}.log", f"L r{r} ".encode())
            arrived += c
            lasts.append(last)
        evs = read_events(rd)
        # Lines left unread when torchrun exits are drained in one go and all stamped with the drain's start
        # time, so the record's last timestamp is too early: the run is ingested when RunFinished is emitted.
        fin = [e["wall"] for e in evs if e.get("kind") == "run_finished"]
        exited = [e["wall"] for e in evs if e.get("kind") == "process_exited"]
        t_delivered = fin[0] if fin else t.t_end
        extra = {"engine_peak_rss_mb": t.peak_rss_mb,
                 "backlog_at_exit_s": (t_delivered - exited[0]) if exited else None,
                 "last_stamp_lag_s": (t_delivered - max(x for x in lasts if x is not None)) if any(lasts) else None}
    elif mode == "tee":
        out = d / "console.txt"
        with open(out, "wb") as f:
            t = Timed([PY, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                       "--log-dir", str(d / "tr-logs"), "--tee", "3", str(PRINTER)],
                      env=env_with(**pr_env), stdout=f, stderr=DEVNULL, cwd=ROOT)
            rc = t.wait(600)
        arrived = sum(count_lines(out, f"L r{r} ".encode()) for r in range(2))
        t_delivered = t.t_end
    elif mode == "pipe":
        cats = []
        t_start = time.time()
        for r in range(2):
            p = subprocess.Popen([PY, str(PRINTER)], env=env_with(RANK=r, **pr_env), stdout=subprocess.PIPE,
                                 stderr=DEVNULL)
            c = Timed(["cat"], stdin=p.stdout, stdout=DEVNULL)
            p.stdout.close()
            cats.append((p, c))
        for p, c in cats:
            rc = rc or p.wait(600) or c.wait(600)
        t_delivered = max(c.t_end for _, c in cats)
        t = None
    else:
        raise ValueError(mode)
    st = load_stamps(stamps, 2)
    if len(st) != 2:
        return {"mode": mode, "mix": mix, "error": f"printer stamps missing ({len(st)}/2), exit {rc}"}
    t0 = min(s["t0"] for s in st)
    t1 = max(s["t1"] for s in st)
    nbytes = sum(s["bytes"] for s in st)
    out = {"mode": mode, "mix": mix, "lines": total, "bytes": nbytes, "exit": rc,
           "producer_lines_per_s": total / max(1e-9, t1 - t0),
           "delivered_lines_per_s": total / max(1e-9, t_delivered - t0),
           "delivered_MB_per_s": nbytes / 2**20 / max(1e-9, t_delivered - t0),
           "arrived": arrived, "lost": None if arrived is None else total - arrived,
           "wall_s": t.wall if t is not None else t_delivered - t_start,
           "cpu_s": t.cpu_s if t is not None else None, **extra}
    shutil.rmtree(d, ignore_errors=True)
    return out


def bench_ingest(cfg, work: Path, res: dict) -> None:
    n = cfg.ingest_lines
    log(f"ingest: 2 ranks x {n:,} lines, modes ddptui / torchrun --tee 3 > file / pipe | cat, {cfg.repeats} repeats")
    rows = {}
    modes = ["ddptui", "tee", "pipe"]
    for i in range(cfg.repeats):
        for mix in ("short", "mix"):
            order = modes if i % 2 == 0 else list(reversed(modes))
            per = {}
            for mode in order:
                r = ingest_once(mode, mix, n, work / f"ingest-{mode}")
                rows.setdefault((mode, mix), []).append(r)
                per[mode] = r
                log(f"  repeat {i} {mix:5s} {mode:6s}: delivered {r.get('delivered_lines_per_s', 0):>12,.0f} lines/s, "
                    f"producer {r.get('producer_lines_per_s', 0):>12,.0f} lines/s, lost {r.get('lost')}, "
                    f"wall {r.get('wall_s', 0):.2f} s"
                    + (f", engine peak RSS {r['engine_peak_rss_mb']:.0f} MB, drained {r['backlog_at_exit_s']:.2f} s "
                       f"after torchrun exited" if r.get("engine_peak_rss_mb") else "") + f" {r.get('error', '')}")
            for other in ("tee", "pipe"):
                a, b = per["ddptui"].get("delivered_lines_per_s"), per[other].get("delivered_lines_per_s")
                if a and b:
                    rows.setdefault(("ratio", mix, other), []).append(a / b)
    out = {"lines_per_rank": n, "ranks": 2, "target_lines_per_s": 1_000_000, "runs": {}, "ratios": {}}
    for key, rs in rows.items():
        if key[0] == "ratio":
            out["ratios"][f"{key[1]}: ddptui/{key[2]}"] = mmm(rs)
            continue
        mode, mix = key
        ok = [r for r in rs if "error" not in r]
        out["runs"][f"{mode}/{mix}"] = {
            "mode": mode, "mix": mix,
            "delivered_lines_per_s": mmm([r["delivered_lines_per_s"] for r in ok]),
            "delivered_MB_per_s": mmm([r["delivered_MB_per_s"] for r in ok]),
            "producer_lines_per_s": mmm([r["producer_lines_per_s"] for r in ok]),
            "wall_s": mmm([r["wall_s"] for r in ok]),
            "cpu_s": mmm([r.get("cpu_s") for r in ok]),
            "engine_peak_rss_mb": mmm([r.get("engine_peak_rss_mb") for r in ok]),
            "backlog_at_exit_s": mmm([r.get("backlog_at_exit_s") for r in ok]),
            "lost": [r.get("lost") for r in ok], "errors": [r["error"] for r in rs if "error" in r],
            "exit": [r.get("exit") for r in ok]}
    dd = out["runs"].get("ddptui/short", {}).get("delivered_lines_per_s", {})
    lost = [x for k, v in out["runs"].items() if k.startswith("ddptui") for x in v["lost"]]
    out["met"] = bool(dd.get("median") and dd["median"] >= 1_000_000 and all(x == 0 for x in lost))
    res["ingest"] = out


# ---------------------------------------------------------------------------------------------- 2b/4. engine-only

def engine_run(lines: int, mix: bool, work: Path, extra=()) -> dict:
    argv = [PY, str(BENCH / "ingest_engine.py"), "--lines", str(lines), "--work", str(work), *extra]
    if mix:
        argv.append("--mix")
    p = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=900)
    if p.returncode != 0:
        return {"error": p.stderr[-2000:]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def bench_engine(cfg, work: Path, res: dict) -> None:
    n = cfg.engine_lines
    log(f"engine-only ingest: {n:,} pre-written lines (2 rank files) through Tailer + Session.ingest, {cfg.repeats} repeats")
    out = {"lines": n}
    for mix in (False, True):
        rs = []
        for i in range(cfg.repeats):
            r = engine_run(n // 2 if mix else n, mix, work / "engine")
            rs.append(r)
            log(f"  {'mix' if mix else 'short'} repeat {i}: {r.get('lines_per_s', 0):,.0f} lines/s "
                f"(cpu {r.get('cpu_seconds', 0):.2f} s of {r.get('seconds', 0):.2f} s), lost {r.get('lost')}, "
                f"rss {r.get('rss_after_mb', 0):.1f} MB {r.get('error', '')}")
        ok = [r for r in rs if "error" not in r]
        out["mix" if mix else "short"] = {
            "lines_per_s": mmm([r["lines_per_s"] for r in ok]),
            "cpu_lines_per_s": mmm([r["lines"] / r["cpu_seconds"] for r in ok if r["cpu_seconds"]]),
            "us_per_line_cpu": mmm([r["cpu_seconds"] / r["lines"] * 1e6 for r in ok]),
            "lost": [r["lost"] for r in ok], "rss_after_mb": mmm([r["rss_after_mb"] for r in ok]),
            "maxrss_mb": mmm([r["maxrss_mb"] for r in ok]), "errors": [r["error"] for r in rs if "error" in r]}
    # where the time goes: one cProfile'd run (the figures above are without the profiler)
    r = engine_run(min(n, 500_000), False, work / "engine", ["--cprofile", "14"])
    out["cprofile_top"] = r.get("cprofile", r.get("error", ""))
    res["engine"] = out


def bench_memory(cfg, work: Path, res: dict) -> None:
    log(f"memory: engine RSS after {cfg.mem_small:,} and {cfg.mem_big:,} lines through Tailer + Session + console")
    out = {"target_mb": 150}
    for n in (cfg.mem_small, cfg.mem_big):
        r = engine_run(n, False, work / "memory")
        out[str(n)] = {k: r.get(k) for k in ("rss_before_mb", "rss_after_mb", "maxrss_mb", "lines_per_s", "lost",
                                             "error")}
        log(f"  {n:,} lines: rss {r.get('rss_after_mb', 0):.1f} MB, peak {r.get('maxrss_mb', 0):.1f} MB, "
            f"{r.get('lines_per_s', 0):,.0f} lines/s, lost {r.get('lost')}")
        shutil.rmtree(work / "memory", ignore_errors=True)
    r = engine_run(cfg.mem_small, False, work / "memory", ["--tracemalloc"])
    out["tracemalloc_peak_mb"] = r.get("tracemalloc_peak_mb")
    log(f"  tracemalloc peak over {cfg.mem_small:,} lines: {fmt(r.get('tracemalloc_peak_mb'))} MB")
    shutil.rmtree(work / "memory", ignore_errors=True)
    peaks = [out[str(n)].get("maxrss_mb") for n in (cfg.mem_small, cfg.mem_big)]
    live = [v["engine_peak_rss_mb"]["max"] for k, v in res.get("ingest", {}).get("runs", {}).items()
            if k.startswith("ddptui") and v["engine_peak_rss_mb"]["n"]]
    out["live_ingest_peak_mb"] = max(live) if live else None
    out["met"] = all(p is not None and p <= 150 for p in peaks + live)
    res["memory"] = out


# ---------------------------------------------------------------------------------------------- 3. stall

def stall_once(nproc: int, stall_after: float, d: Path) -> dict:
    if d.exists():
        shutil.rmtree(d)
    t = Timed([PY, "-m", "ddptui.tui.cli", "profiles/hang.yaml", "--no-ui", "--runs-dir", str(d),
               "--set", f"nproc={nproc}", "--set", f"stall_after={stall_after}", "--set", "timeout=240"],
              stdout=DEVNULL, stderr=DEVNULL, cwd=ROOT)
    rc = t.wait(300)
    rd = only_run_dir(d)
    evs = read_events(rd)
    hang_wall = None
    log1 = rd / "rank1.log"
    if log1.exists():
        for ln in log1.read_bytes().split(b"\n"):
            if b"injecting hang at step" in ln:
                hang_wall = log_ts(ln)
                break
    stall = next((e for e in evs if e.get("kind") == "stall"), None)
    stacks = next((e for e in evs if e.get("kind") == "stacks"), None)
    verdict = next((e for e in evs if e.get("kind") == "hang_verdict"), None)
    out = {"nproc": nproc, "exit": rc, "wall_s": t.wall}
    if hang_wall is None or stall is None:
        out["error"] = f"no {'hang line' if hang_wall is None else 'StallDetected'} (exit {rc})"
        return out
    out.update({
        "detect_s": stall["wall"] - hang_wall,
        "above_stall_after_s": stall["wall"] - hang_wall - stall_after,
        "since_lag_s": stall["since"] - hang_wall,  # engine's last-progress time vs the hang line's read time
        "stacks_s": stacks["seconds"] if stacks else None,
        "stacks_done_s": (stacks["wall"] - hang_wall) if stacks else None,
        "verdict_s": (verdict["wall"] - hang_wall) if verdict else None,
        "stack_methods": sorted(set(stacks["method"].values())) if stacks else [],
        "stack_ranks": len(stacks["threads"]) if stacks else 0,
        "culprits": verdict["culprits"] if verdict else None,
    })
    shutil.rmtree(d, ignore_errors=True)
    return out


def bench_stall(cfg, work: Path, res: dict) -> None:
    sa = cfg.stall_after
    log(f"stall: hang.yaml, stall_after={sa} s, ranks {cfg.stall_ranks}, repeats {cfg.stall_repeats}")
    out = {"stall_after": sa, "target_above_s": 1.0, "target_stacks8_s": 2.0, "by_ranks": {}}
    for n in cfg.stall_ranks:
        rs = []
        for i in range(cfg.stall_repeats.get(n, 1)):
            r = stall_once(n, sa, work / f"stall-{n}")
            rs.append(r)
            log(f"  {n} ranks repeat {i}: stall +{fmt(r.get('above_stall_after_s'))} s above stall_after, "
                f"stacks {fmt(r.get('stacks_s'))} s ({','.join(r.get('stack_methods', []))}), "
                f"verdict at {fmt(r.get('verdict_s'))} s, culprits {r.get('culprits')}, wall {r['wall_s']:.1f} s "
                f"{r.get('error', '')}")
        ok = [r for r in rs if "error" not in r]
        out["by_ranks"][str(n)] = {
            "detect_s": mmm([r["detect_s"] for r in ok]),
            "above_stall_after_s": mmm([r["above_stall_after_s"] for r in ok]),
            "stacks_s": mmm([r["stacks_s"] for r in ok]),
            "stacks_done_s": mmm([r["stacks_done_s"] for r in ok]),
            "verdict_s": mmm([r["verdict_s"] for r in ok]),
            "wall_s": mmm([r["wall_s"] for r in rs]),
            "methods": sorted({m for r in ok for m in r["stack_methods"]}),
            "stack_ranks": [r.get("stack_ranks") for r in ok],
            "culprits": [r.get("culprits") for r in ok], "errors": [r["error"] for r in rs if "error" in r]}
    above = [out["by_ranks"][k]["above_stall_after_s"]["max"] for k in out["by_ranks"]]
    s8 = out["by_ranks"].get("8", {}).get("stacks_s", {}).get("max")
    out["met_detect"] = all(a is not None and a <= 1.0 for a in above)
    out["met_stacks8"] = s8 is not None and s8 <= 2.0
    res["stall"] = out


# ---------------------------------------------------------------------------------------------- 5. start-up

def bench_startup(cfg, work: Path, res: dict) -> None:
    reps = max(3, cfg.repeats + 2)
    log(f"start-up: ddptui --help and python -c pass, {reps} repeats each, interleaved")
    helps, passes = [], []
    for _ in range(reps):
        for which in ("help", "pass"):
            argv = [PY, "-m", "ddptui.tui.cli", "--help"] if which == "help" else [PY, "-c", "pass"]
            t = Timed(argv, stdout=DEVNULL, stderr=DEVNULL, cwd=ROOT)
            t.wait(60)
            (helps if which == "help" else passes).append(t.wall)
    p = subprocess.run([PY, "-X", "importtime", "-m", "ddptui.tui.cli", "--help"], capture_output=True, text=True, cwd=ROOT)
    imports = []
    for ln in p.stderr.splitlines():
        parts = ln.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            imports.append((int(parts[1]), parts[2].rstrip()))
    imports.sort(reverse=True)
    out = res.setdefault("startup", {})
    out.update({"help_s": mmm(helps), "python_pass_s": mmm(passes), "target_help_s": 0.2,
                "help_minus_pass_s": mmm([h - q for h, q in zip(helps, passes)]),
                "top_imports_us": [{"us": us, "module": m} for us, m in imports[:8]]})
    out["met_help"] = out["help_s"]["median"] is not None and out["help_s"]["median"] <= 0.2
    log(f"  --help {fmt3(out['help_s'], 3, ' s')}, python -c pass {fmt3(out['python_pass_s'], 3, ' s')}")


# ---------------------------------------------------------------------------------------------- 6. UI

def ui_latency_once(cfg) -> dict:
    code = ("import json, sys\n"
            "try:\n    from ddptui.tui.latency import measure_latency\n"
            "except ImportError as e:\n    print(json.dumps({'no_hook': str(e)})); sys.exit(0)\n"
            f"print(json.dumps(measure_latency(ranks=16, rate=1000, seconds={cfg.ui_seconds}, presses={cfg.ui_presses})))\n")
    try:
        p = subprocess.run([PY, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=180)
        last = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else ""
        return json.loads(last) if last.startswith("{") else {"error": (p.stderr or p.stdout)[-1500:]}
    except subprocess.TimeoutExpired:
        return {"error": "measure_latency ran past 180 s"}


UI_P95_MS = 100  # issue 15: keypress -> repaint p95 at 16 ranks x 1,000 lines/s
UI_CPU_PERCENT = 50  # the dashboard's share of one core meanwhile
UI_ABSORBED = 0.98  # of the lines offered, read by the UI while it answers the keys


def ui_targets(d: dict) -> dict:
    """Whether the medians over the repeats meet the targets, and how loaded the machine was (2 cores shared)."""
    p95, cpu = d["p95_ms_mmm"]["median"], d["ui_cpu_percent_mmm"]["median"]
    return {"target_p95_ms": UI_P95_MS, "target_cpu_percent": UI_CPU_PERCENT,
            "met_p95": p95 is not None and p95 <= UI_P95_MS, "met_cpu": cpu is not None and cpu <= UI_CPU_PERCENT,
            "met_absorbed": d["lines_per_s_absorbed"] >= UI_ABSORBED * d["lines_per_s_offered"],
            "load_average": round(os.getloadavg()[0], 1)}


def bench_ui(cfg, work: Path, res: dict) -> None:
    log(f"ui: ddptui.tui.latency.measure_latency (16 ranks x 1000 lines/s, {cfg.ui_presses} presses), {cfg.repeats} repeats")
    runs = []
    for i in range(cfg.repeats):
        d = ui_latency_once(cfg)
        log(f"  repeat {i}: {d}")
        runs.append(d)
        if "no_hook" in d or "error" in d:
            break
    ok = [r for r in runs if "p95_ms" in r]
    if not ok:
        d = {"not_measured": "no hook yet"} if "no_hook" in runs[-1] else runs[-1]
    else:  # the median repeat's figures, and every repeat's (the machine is shared: one run can be unlucky)
        d = dict(sorted(ok, key=lambda r: r["p95_ms"])[len(ok) // 2])
        d.update({k + "_mmm": mmm([r[k] for r in ok]) for k in ("p50_ms", "p95_ms", "ui_cpu_percent")})
        d["repeats"] = len(ok)
        d.update(ui_targets(d))
        log(f"  p95 {d['p95_ms_mmm']['median']} ms (target <= {UI_P95_MS} ms: {'met' if d['met_p95'] else 'missed'}), "
            f"CPU {d['ui_cpu_percent_mmm']['median']} % (<= {UI_CPU_PERCENT} %: {'met' if d['met_cpu'] else 'missed'}), "
            f"flood absorbed: {'yes' if d['met_absorbed'] else 'no'}; load average {d['load_average']}")
    res["ui"] = d
    d["live"] = bench_ui_live(cfg, work)


def ui_live_once(steps: int, d: Path) -> dict:
    """The real dashboard in a real terminal (tmux) on the default profile; CPU of the ddptui process from its summary."""
    from tests.support.terminal import Term
    runs = d / "runs"
    cmd = (f"unset COLUMNS LINES; cd {shlex.quote(str(ROOT))} && {shlex.quote(PY)} -m ddptui.tui.cli profiles/cpu-ddp.yaml "
           f"--runs-dir {shlex.quote(str(runs))} --set steps={steps}; echo DDPTUI-EXITED $?; sleep 30")
    term = Term(cmd)
    try:
        deadline = time.monotonic() + 300
        summary = None
        while summary is None and time.monotonic() < deadline:
            time.sleep(0.5)
            found = list(runs.glob("*/summary.json"))
            if found:
                time.sleep(0.2)  # written atomically (rename), but give the UI a moment to draw the verdict
                summary = json.loads(found[0].read_text(encoding="utf-8"))
        dash_cpu = _dashboard_cpu_s(runs)  # the run's engine is a process of its own (tui/held.py): both count
        term.keys("q")
        term.wait_for("DDPTUI-EXITED", 30)
    finally:
        term.close()
    if summary is None:
        return {"error": "the run did not finish within 300 s"}
    dur, cpu = summary["duration_s"], summary.get("ddptui_cpu_s")
    cpu = None if cpu is None or dash_cpu is None else cpu + dash_cpu
    return {"status": summary["status"], "wall_s": dur, "cpu_s": cpu, "dashboard_cpu_s": dash_cpu,
            "cpu_percent": None if cpu is None else 100 * cpu / dur}


def _dashboard_cpu_s(runs: Path) -> float | None:
    """The CPU seconds of the dashboard process itself (not its engine's, which summary.json's ddptui_cpu_s holds)."""
    import psutil
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if "ddptui.tui.cli" in cmd and str(runs) in cmd and "--engine-ready-fd" not in cmd:
            try:
                t = p.cpu_times()
            except psutil.Error:
                return None
            return t.user + t.system
    return None


def bench_ui_live(cfg, work: Path) -> dict:
    from tests.support.terminal import TMUX
    if not Path(TMUX).exists():
        return {"not_measured": "tmux not installed"}
    steps = 300 if cfg.quick else 4000
    log(f"ui live: the dashboard in tmux on cpu-ddp, {steps} steps, {cfg.repeats} repeats")
    runs = []
    for i in range(cfg.repeats):
        d = work / f"ui-live-{i}"
        d.mkdir()
        r = ui_live_once(steps, d)
        log(f"  repeat {i}: {r}")
        runs.append(r)
        shutil.rmtree(d, ignore_errors=True)
    ok = [r for r in runs if "error" not in r and r.get("cpu_percent") is not None]
    return {"steps": steps, "runs": runs, "cpu_percent": mmm([r["cpu_percent"] for r in ok]),
            "cpu_s": mmm([r["cpu_s"] for r in ok]), "wall_s": mmm([r["wall_s"] for r in ok])}


# ---------------------------------------------------------------------------------------------- report

def write_report(res: dict, cfg) -> str:
    L = []
    m = res["meta"]
    L.append("# ddptui performance (`make bench`)\n")
    L.append(f"Measured {m['date']} on {m['machine']} ({m['cpus']} CPUs, load average at start {m['load_start']}, "
             f"at end {m.get('load_end')}), torch {m.get('torch')}, Python {m['python']}; "
             f"{'QUICK smoke run, ' if cfg.quick else ''}{cfg.repeats} repeat(s); cells are min / median / max. "
             f"The machine is shared with other work: compare figures side by side within one table, "
             f"not across runs. Whole bench: {m.get('total_s', 0):.0f} s.\n")
    if m.get("kept"):
        k = m["kept"]
        by = k.get("by") or {name: {**k["meta"], "date": k["date"]} for name in k["sections"]}  # an older results.json
        runs: dict = {}
        for name in k["sections"]:
            runs.setdefault(by[name].get("date"), []).append(name)
        told = "; ".join(
            f"{', '.join(names)} from the run of {date} (load average at start {by[names[0]].get('load_start')}, at end "
            f"{by[names[0]].get('load_end')}; {by[names[0]].get('repeats')} repeat(s); that run's whole bench: "
            f"{by[names[0]].get('total_s') or 0:.0f} s)" for date, names in runs.items())
        L.append(f"Only {', '.join(s for s in res if s not in ('meta', 'errors', 'text') and s not in k['sections'])} "
                 f"measured in this run; the other sections are kept as the runs that measured them wrote them: "
                 f"{told}.\n")
    tick = lambda ok: "met" if ok else "**missed**"
    starts: list[tuple[str, int]] = []  # each section's first line in L
    starts.append(("overhead", len(L)))
    if "overhead" in res:
        o = res["overhead"]
        L.append("## 1. Overhead: one 2-rank gloo training run\n")
        L.append(f"ddp_mlp, {o['steps']} steps, bare `python -m torch.distributed.run --standalone --nproc_per_node 2` "
                 f"vs `ddptui PROFILE --no-ui > /dev/null`, {o.get('pairs', cfg.repeats)} pairs (order alternates "
                 "between pairs; a ratio is taken within each pair).\n")
        L.append("| | wall s |\n|---|---|")
        L.append(f"| bare torchrun | {fmt3(o['bare_s'])} |")
        L.append(f"| ddptui --no-ui | {fmt3(o['ddptui_s'])} |")
        L.append(f"| **ratio ddptui / bare** (per pair) | **{fmt3(o['ratio'], 3)}** |")
        L.append(f"| CPU s, all processes: bare | {fmt3(o['bare_cpu_s'])} |")
        L.append(f"| CPU s, all processes: ddptui (engine + torchrun + ranks) | {fmt3(o['ddptui_cpu_s'])} |")
        L.append(f"| **CPU ratio ddptui / bare** (per pair) | **{fmt3(o['cpu_ratio'], 3)}** |")
        if o.get("ddptui_own_cpu_s"):
            L.append(f"| CPU s of the ddptui process itself (summary.json `ddptui_cpu_s`) | {fmt3(o['ddptui_own_cpu_s'])} |")
            L.append(f"| ... as % of one core over the run | {fmt3(o['ddptui_own_cpu_share'], 1, ' %')} |")
        L.append("")
        L.append(f"Target ≤ 1.02 (median): {tick(o['met'])}."
                 + (f" Runs that failed (their pairs left out of the ratios): {o['failures']}" if o['failures'] else "") + "\n")
    starts.append(("ingest", len(L)))
    if "ingest" in res:
        g = res["ingest"]
        L.append("## 2. Ingest: ranks printing as fast as they can\n")
        L.append(f"2 ranks × {g['lines_per_rank']:,} lines each (`bench/workloads/printer.py`, ~64 KB writes; short = "
                 "~50-byte lines, mix = every 10th line ~1 KB). *Delivered* = all lines / (first rank's first write → "
                 "last line at the consumer: ddptui's read time in rank<N>.log, torchrun's exit for --tee, cat's exit "
                 "for the pipe; for ddptui RunFinished, because lines still unread when torchrun exits are drained at the end "
                 "and all stamped with the drain's start time). *Producer* = how fast the ranks themselves got their lines out. *Lost* = expected − "
                 "lines found in the record (ddptui) or the tee'd file; a pipe cannot lose lines (n/a).\n")
        L.append("| mode | lines | delivered lines/s | delivered MB/s | producer lines/s | wall s | CPU s (tree) | lost |")
        L.append("|---|---|---|---|---|---|---|---|")
        names = {"ddptui": "ddptui --no-ui (torchrun -r 3 files → engine → record + console > /dev/null)",
                 "tee": "torchrun --tee 3 > file", "pipe": "rank | cat > /dev/null (no torchrun)"}
        for key, r in g["runs"].items():
            lost = "n/a" if r["mode"] == "pipe" else ",".join(str(x) for x in r["lost"])
            L.append(f"| {names[r['mode']]} | {r['mix']} | {fmt3(r['delivered_lines_per_s'], 0)} | "
                     f"{fmt3(r['delivered_MB_per_s'], 0)} | {fmt3(r['producer_lines_per_s'], 0)} | {fmt3(r['wall_s'])} | {fmt3(r['cpu_s'])} | "
                     f"{lost}{(' errors: ' + '; '.join(r['errors'])) if r['errors'] else ''} |")
        L.append("")
        for key, r in g["runs"].items():
            if r["mode"] == "ddptui":
                L.append(f"- ddptui {r['mix']}: engine process peak RSS {fmt3(r['engine_peak_rss_mb'], 0, ' MB')}; "
                         f"still draining {fmt3(r['backlog_at_exit_s'], 2, ' s')} after torchrun exited")
        for k, v in g["ratios"].items():
            L.append(f"- delivered-rate ratio {k}: {fmt3(v, 2)}")
        L.append(f"\nTarget ≥ 1,000,000 lines/s aggregate with nothing lost: {tick(g['met'])}.\n")
    starts.append(("engine", len(L)))
    if "engine" in res:
        e = res["engine"]
        L.append("### 2b. The engine alone: read, split, parse, hint-match, record, console\n")
        L.append(f"{e['lines']:,} lines (mix: half as many) pre-written in 2 rank files, read by `runners.edge.tail.Tailer` and fed through "
                 "`Session.ingest` / `flush` (record + console to /dev/null), one process, no ranks running.\n")
        L.append("| lines | lines/s (wall) | lines/s (engine CPU) | µs CPU per line | lost |\n|---|---|---|---|---|")
        for k in ("short", "mix"):
            if k in e:
                r = e[k]
                L.append(f"| {k} | {fmt3(r['lines_per_s'], 0)} | {fmt3(r['cpu_lines_per_s'], 0)} | "
                         f"{fmt3(r['us_per_line_cpu'], 2)} | {','.join(map(str, r['lost']))} |")
        L.append("\nWhere the time goes (cProfile, short lines, by own time):\n")
        L.append("```\n" + _trim_profile(e.get("cprofile_top", "")) + "\n```\n")
    starts.append(("stall", len(L)))
    if "stall" in res:
        s = res["stall"]
        L.append("## 3. Stall: from a rank's hang to the verdict\n")
        L.append(f"`profiles/hang.yaml` (rank 1 sleeps before its backward at step 10), `--set nproc=N "
                 f"stall_after={s['stall_after']:g}`, on_stall stop. Times from the read time of rank 1's "
                 "`injecting hang` line (in the record).\n")
        L.append("| ranks | StallDetected s | above stall_after s | StacksCollected.seconds | stacks done s | "
                 "HangVerdict s | method | ranks with stacks | culprits | run wall s |")
        L.append("|---|---|---|---|---|---|---|---|---|---|")
        for n, r in s["by_ranks"].items():
            L.append(f"| {n} | {fmt3(r['detect_s'])} | {fmt3(r['above_stall_after_s'])} | {fmt3(r['stacks_s'])} | "
                     f"{fmt3(r['stacks_done_s'])} | {fmt3(r['verdict_s'])} | {','.join(r['methods'])} | {r['stack_ranks']} | "
                     f"{r['culprits']} | {fmt3(r['wall_s'], 1)}"
                     f"{(' errors: ' + '; '.join(r['errors'])) if r['errors'] else ''} |")
        L.append(f"\nTarget verdict ≤ stall_after + 1 s (detection, max): {tick(s['met_detect'])}; "
                 f"stacks of 8 ranks ≤ 2 s: {tick(s['met_stacks8'])}.\n")
    starts.append(("memory", len(L)))
    if "memory" in res:
        mm = res["memory"]
        L.append("## 4. Memory: the engine process\n")
        L.append("Pre-written rank files through Tailer + Session + console (to /dev/null); RSS by psutil after "
                 "the last line, peak = VmHWM of the engine process.\n")
        L.append("| lines ingested | RSS before MB | RSS after MB | peak RSS MB | lines/s | lost |\n|---|---|---|---|---|---|")
        for k, v in mm.items():
            if isinstance(v, dict):
                L.append(f"| {int(k):,} | {fmt(v.get('rss_before_mb'), 1)} | {fmt(v.get('rss_after_mb'), 1)} | "
                         f"{fmt(v.get('maxrss_mb'), 1)} | {fmt(v.get('lines_per_s'), 0)} | {v.get('lost')} |")
        L.append(f"\ntracemalloc peak (Python allocations while ingesting {cfg.mem_small:,} lines): "
                 f"{fmt(mm.get('tracemalloc_peak_mb'), 1)} MB. The live ddptui process in the ingest runs (section 2, "
                 f"psutil every 50 ms) peaked at {fmt(mm.get('live_ingest_peak_mb'), 0)} MB. "
                 f"Target ≤ 150 MB (both): {tick(mm['met'])}.\n")
        L.append("The pre-written-file path reads 1 MiB per file per turn and stays flat however many lines pass. "
                 "In the live runs the ranks out-print the engine, and what is still unread when torchrun exits is "
                 "drained after it ('still draining' in section 2); the drain goes one chunk at a time, so the peak "
                 "does not grow with that backlog (before the drain was chunked, the same runs peaked at "
                 "412-535 MB with short lines and ~1.25 GB with the mix).\n")
    starts.append(("startup", len(L)))
    if "startup" in res:
        st = res["startup"]
        L.append("## 5. Start-up\n")
        L.append("| | s |\n|---|---|")
        if "help_s" in st:
            L.append(f"| `python -m ddptui.tui.cli --help` (ddptui --help) | {fmt3(st['help_s'], 3)} |")
            L.append(f"| `python -c pass` | {fmt3(st['python_pass_s'], 3)} |")
            L.append(f"| difference (per pair) | {fmt3(st['help_minus_pass_s'], 3)} |")
        if "spawn_s" in st:
            L.append(f"| `ddptui --no-ui` start → ProcessStarted (torchrun spawned) | {fmt3(st['spawn_s'], 3)} |")
            L.append(f"| `ddptui --no-ui` start → first RankHello | {fmt3(st['first_hello_s'], 3)} |")
        if "help_s" in st:
            L.append(f"\nTarget `--help` ≤ 0.2 s (median): {tick(st['met_help'])}. Slowest imports (-X importtime, "
                     "cumulative µs): " + ", ".join(f"{x['module'].strip()} {x['us']:,}" for x in st["top_imports_us"][:6]) + "\n")
    starts.append(("ui", len(L)))
    if "ui" in res:
        u = res["ui"]
        L.append("## 6. Dashboard: keypress → repaint, and its CPU share\n")
        if "not_measured" in u:
            L.append("not measured: no hook yet\n")
        elif "error" in u:
            L.append(f"not measured: the hook failed: `{u['error'][-300:]}`\n")
        else:
            L.append(f"`ddptui.tui.latency.measure_latency`: {u.get('ranks')} ranks × {u.get('lines_per_s_per_rank')} lines/s "
                     f"streaming, {u.get('presses')} presses of `t`: p50 {u.get('p50_ms')} ms, p95 {u.get('p95_ms')} ms, "
                     f"max {u.get('max_ms')} ms; lines absorbed {u.get('lines_per_s_absorbed'):,}/s of "
                     f"{u.get('lines_per_s_offered'):,}/s offered; the dashboard process used "
                     f"{fmt(u.get('ui_cpu_percent'), 1, ' %')} of one core meanwhile (the load generator's thread left out).\n")
            if u.get("repeats", 1) > 1:
                L.append(f"Over {u['repeats']} repeats (the figures above are the median repeat's): p50 "
                         f"{fmt3(u['p50_ms_mmm'], 1, ' ms')}, p95 {fmt3(u['p95_ms_mmm'], 1, ' ms')}, dashboard CPU "
                         f"{fmt3(u['ui_cpu_percent_mmm'], 1, ' %')} of one core.\n")
            if "met_p95" in u:
                L.append(f"Targets (medians over the repeats): p95 ≤ {u['target_p95_ms']} ms: {tick(u['met_p95'])}; "
                         f"CPU ≤ {u['target_cpu_percent']} % of one core: {tick(u['met_cpu'])}; the flood absorbed "
                         f"(≥ {UI_ABSORBED:.0%} of the lines offered): {tick(u['met_absorbed'])}. Load average when "
                         f"measured: {u['load_average']} on {os.cpu_count()} cores.\n")
        live = u.get("live") or {}
        if live.get("cpu_percent"):
            L.append(f"A real run in a real terminal (tmux 160×50): the dashboard on `cpu-ddp`, {live['steps']} steps, "
                     f"{len(live['runs'])} repeats. CPU of the ddptui process (engine thread + Textual UI), from its "
                     f"summary: {fmt3(live['cpu_s'])} s over {fmt3(live['wall_s'], 1)} s, i.e. "
                     f"**{fmt3(live['cpu_percent'], 1, ' %')} of one core**"
                     + (f" (headless, section 1: {fmt3(res['overhead']['ddptui_own_cpu_share'], 1, ' %')})"
                        if res.get("overhead", {}).get("ddptui_own_cpu_share") else "") + ".\n")
        elif live:
            L.append(f"Live dashboard run: not measured ({live.get('not_measured') or live.get('runs')}).\n")
    for name, section in (("multinode", multinode), ("fr", fr_overhead), ("attach", attach_cost), ("many", ui_many),
                          ("viewer", ui_viewer), ("restarts", restart_pace), ("replica", replica_cost),
                          ("serve", serve_latency), ("runs", runs_list), ("compare", compare_cost)):
        starts.append((name, len(L)))
        if name in res:
            L += section.report(res[name], fmt3)
    return "\n".join(L[:starts[0][1]] + [_section_text(res, name, L[at:until]) for (name, at), (_, until)
                                         in zip(starts, starts[1:] + [("", len(L))], strict=True) if until > at]) + "\n"


def _section_text(res: dict, name: str, lines: list[str]) -> str:
    """A section's text in the report: a section kept from an earlier run (--only) as that run wrote it (its figures
    were told with that run's sizes and repeats, not this one's), else as rendered now; remembered in res["text"]."""
    text = res.setdefault("text", {})
    if name in res["meta"].get("kept", {}).get("sections", ()) and name in text:
        return text[name]
    text[name] = "\n".join(lines)
    return text[name]


def keep_sections_not_run(res: dict, old_json: Path, not_run: list[str]) -> dict:
    """With --only, the sections not run keep the figures of the previous results.json, under their own date."""
    if not not_run or not old_json.exists():
        return res
    old = json.loads(old_json.read_text(encoding="utf-8"))
    kept = [name for name in not_run if name in old]
    for name in kept:
        res[name] = old[name]
        if name in old.get("text", {}):  # its text as that run wrote it (results.json of before: rendered again)
            res.setdefault("text", {})[name] = old["text"][name]
    if kept:
        old_meta = old.get("meta", {})
        old_kept = old_meta.get("kept", {})
        old_by = old_kept.get("by") or {name: {**old_kept["meta"], "date": old_kept["date"]}
                                        for name in old_kept.get("sections", ()) if old_kept.get("meta")}
        by = {name: old_by.get(name) or {key: old_meta.get(key) for key in _RUN_KEYS} for name in kept}
        res["meta"]["kept"] = {"sections": kept, "by": by}
    return res


_RUN_KEYS = ("date", "load_start", "load_end", "repeats", "total_s")  # what the report says of the run behind a section


def _trim_profile(text: str) -> str:
    keep, on = [], False
    for ln in text.splitlines():
        if "ncalls" in ln:
            on = True
        if on and ln.strip():
            keep.append(ln.replace(str(ROOT) + "/", ""))
    return "\n".join(keep[:16])


# ---------------------------------------------------------------------------------------------- main

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="1 repeat, smaller sizes (smoke run)")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--only", default="overhead,ingest,engine,stall,memory,startup,ui,multinode,fr,attach,many,"
                                      "viewer,restarts,replica,serve,runs,compare")
    ap.add_argument("--out", default=str(BENCH / "results.md"))
    ap.add_argument("--report-only", action="store_true", help="re-render results.md from the JSON next to it")
    cfg = ap.parse_args()
    q = cfg.quick
    cfg.repeats = cfg.repeats or (1 if q else 3)
    cfg.steps = 300 if q else 10000  # about 18-20 s bare on this 2-core machine, as the issue asks (~20 s)
    cfg.overhead_repeats = 1 if q else max(cfg.repeats, 7)  # pairs: a single run here varies by +-5%
    cfg.ingest_lines = 100_000 if q else 1_000_000
    cfg.engine_lines = 200_000 if q else 1_000_000
    cfg.mem_small, cfg.mem_big = (200_000, 1_000_000) if q else (1_000_000, 10_000_000)
    cfg.stall_after = 2
    cfg.stall_ranks = (2, 4, 8)
    cfg.stall_repeats = {2: 1, 4: 1, 8: 1} if q else {2: cfg.repeats, 4: 2, 8: 2}
    cfg.ui_seconds, cfg.ui_presses = (3.0, 10) if q else (6.0, 30)
    cfg.multinode_repeats = 1 if q else cfg.repeats
    cfg.fr_steps = 300 if q else 1500  # ~7 ms a step here: ~10 s of steps a run, ~5 looks of the live view
    cfg.fr_repeats = 1 if q else max(cfg.repeats, 5)
    cfg.fr_loop_n, cfg.fr_loop_pairs = (500, 1) if q else (3000, 7)
    cfg.replica_steps, cfg.replica_pairs = (1000, 1) if q else (4000, 5)  # ~3 ms a step: ~12 s of steps a run
    cfg.attach_pairs, cfg.attach_window, cfg.attach_stack_every = (1, 8.0, 5.0) if q else (5, 20.0, 5.0)
    only = set(cfg.only.split(","))
    if cfg.report_only:
        out = Path(cfg.out)
        res = json.loads(out.with_suffix(".json").read_text(encoding="utf-8"))
        cfg.quick, cfg.repeats = res["meta"]["quick"], res["meta"]["repeats"]
        md = write_report(res, cfg)
        out.write_text(md, encoding="utf-8")
        print(md)
        return 0

    work = Path(tempfile.mkdtemp(prefix="ddptui-bench-"))
    try:
        import torch  # noqa: F401  (version only)
        tv = torch.__version__
    except Exception:
        tv = "?"
    res = {"meta": {"date": time.strftime("%Y-%m-%d %H:%M"), "machine": platform.platform(),
                    "cpus": os.cpu_count(), "python": platform.python_version(), "torch": tv,
                    "load_start": ", ".join(f"{x:.1f}" for x in os.getloadavg()), "quick": q,
                    "repeats": cfg.repeats}}
    t0 = time.monotonic()
    steps = [("startup", bench_startup), ("overhead", bench_overhead), ("ingest", bench_ingest),
             ("engine", bench_engine), ("memory", bench_memory), ("stall", bench_stall), ("ui", bench_ui),
             ("multinode", lambda c, w, r: multinode.bench(c, w, r, log, mmm)),
             ("fr", lambda c, w, r: fr_overhead.bench(c, w, r, log, mmm)),
             ("attach", lambda c, w, r: attach_cost.bench(c, w, r, log, mmm)),
             ("many", lambda c, w, r: ui_many.bench(c, w, r, log, mmm)),
             ("viewer", lambda c, w, r: ui_viewer.bench(c, w, r, log, mmm)),
             ("restarts", lambda c, w, r: restart_pace.bench(c, w, r, log, mmm)),
             ("replica", lambda c, w, r: replica_cost.bench(c, w, r, log, mmm)),
             ("serve", lambda c, w, r: serve_latency.bench(c, w, r, log, mmm)),
             ("runs", lambda c, w, r: runs_list.bench(c, w, r, log, mmm)),
             ("compare", lambda c, w, r: compare_cost.bench(c, w, r, log, mmm))]
    try:
        for name, fn in steps:
            if name in only:
                ts = time.monotonic()
                try:
                    fn(cfg, work, res)
                except Exception as e:  # one broken section must not lose the others
                    import traceback
                    traceback.print_exc()
                    res.setdefault("errors", {})[name] = f"{type(e).__name__}: {e}"
                res["meta"].setdefault("section_s", {})[name] = round(time.monotonic() - ts, 1)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    res["meta"]["total_s"] = time.monotonic() - t0
    res["meta"]["load_end"] = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    out = Path(cfg.out)
    res = keep_sections_not_run(res, out.with_suffix(".json"), [name for name, _ in steps if name not in only])
    md = write_report(res, cfg)
    if res.get("errors"):
        md += "## Sections that failed\n\n" + "\n".join(f"- {k}: {v}" for k, v in res["errors"].items()) + "\n"
    out.write_text(md, encoding="utf-8")
    out.with_suffix(".json").write_text(json.dumps(res, indent=2, default=str), encoding="utf-8")
    print(md)
    log(f"wrote {out} and {out.with_suffix('.json')} in {res['meta']['total_s']:.0f} s "
        f"(sections: {res['meta'].get('section_s')})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
