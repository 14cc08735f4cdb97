"""`make bench` section many (--only many): the dashboard at 1,024 ranks (compact view) beside 16 ranks (pane grid) in
the same run: keypress -> repaint and CPU while each rank prints 10 lines/s with a loss, and the process's memory
after 10 M lines went through the model and the view.

  .venv/bin/python bench/ui_many.py memory RANKS LINES   # one memory measurement, a JSON line (run.py starts these)
"""
from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
RATE = 10  # lines/s per rank, each with a loss
PERIOD = 0.25  # the engine's read turn while ranks trickle: one batch holds every rank's lines and progress
SIZE = (160, 50)
LINES_PER_EVENT = 10  # a rank's lines per LogLines in the memory feed (a second of output at 10 lines/s)
WINDOW = 30_000  # lines the feed may run ahead of the model (3 batches at 1,024 ranks): the queue never holds the memory


def _run(code: str, timeout: float, argv: list[str] | None = None) -> dict:
    try:
        p = subprocess.run(argv or [PY, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"ran past {timeout:.0f} s"}
    last = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else ""
    return json.loads(last) if last.startswith("{") else {"error": (p.stderr or p.stdout)[-1500:]}


def latency_once(ranks: int, seconds: float, presses: int) -> dict:
    """measure_latency in a fresh process (its CPU share is that process's own)."""
    return _run("import json\nfrom ddptui.tui.latency import measure_latency\n"
                f"print(json.dumps(measure_latency(ranks={ranks}, rate={RATE}, seconds={seconds}, presses={presses}, "
                f"size={SIZE}, period={PERIOD})))\n", 300 + seconds * 4)


def memory_once(ranks: int, lines: int) -> dict:
    return _run("", 1800, [PY, str(Path(__file__).resolve()), "memory", str(ranks), str(lines)])


# -- the memory measurement (in its own process) ----------------------------------------------------

def _rss() -> tuple[int, int]:
    """(VmRSS, VmHWM) of this process, bytes."""
    got = {}
    for ln in Path("/proc/self/status").read_text().splitlines():
        k, _, v = ln.partition(":")
        if k in ("VmRSS", "VmHWM"):
            got[k] = int(v.split()[0]) * 1024
    return got["VmRSS"], got["VmHWM"]


class Feed:
    """A source for DdpApp: `lines` distinct lines over `ranks` ranks, LINES_PER_EVENT per rank per batch, a step and
    its loss with each, as fast as the dashboard folds them (never more than WINDOW lines ahead of its model)."""

    kind = "synthetic"

    def __init__(self, ranks: int, lines: int, model_lines) -> None:
        self.ranks, self.lines, self.model_lines = ranks, lines, model_lines
        self.sent = 0
        self.stop = threading.Event()
        self.started = threading.Event()  # RunStarted is out: the baseline is taken before any line
        self.go = threading.Event()
        self.emit = lambda batch: None

    def prepare(self, emit) -> None:
        self.emit = emit

    def run(self) -> int:
        from ddptui.runners import events as ev
        t = time.time()
        self.emit([ev.RunStarted("/runs/bench-many", "bench-many", "synthetic", self.ranks, None, t)]
                  + [ev.RankState(r, "running", "", t) for r in range(self.ranks)])
        self.started.set()
        self.go.wait(60)
        step = 0
        while self.sent < self.lines and not self.stop.is_set():
            while self.sent - self.model_lines() > WINDOW and not self.stop.is_set():
                time.sleep(0.005)
            t = time.time()
            batch = []
            for r in range(self.ranks):
                batch.append(ev.LogLines(r, "out", t, 0.0, tuple(
                    f"rank {r} step {step + i} loss {1.0 / (1 + step + i):.6f} tokens/s {12000 + (r * 7 + i) % 997}"
                    for i in range(LINES_PER_EVENT))))
                batch.append(ev.Progress(r, step + LINES_PER_EVENT, 1.0 / (1 + step), t, "hook",
                                         tuple((step + i, 1.0 / (1 + step + i) + r * 1e-4)
                                               for i in range(LINES_PER_EVENT))))
            step += LINES_PER_EVENT
            self.sent += self.ranks * LINES_PER_EVENT
            self.emit(batch)
        self.emit([ev.RunFinished("ok", 0, "", time.time())])
        return 0

    def request_stop(self) -> None:
        self.stop.set()

    def request_dump(self) -> bool:
        return False

    def again(self):
        return self


async def _memory(ranks: int, lines: int) -> dict:
    import gc

    from ddptui.tui.app import DdpApp
    app = DdpApp(source=None, show_picker=False)
    feed = Feed(ranks, lines, lambda: app.model.lines_seen if app.model is not None else 0)
    async with app.run_test(size=SIZE) as pilot:
        app.start_source(feed)
        while not (feed.started.is_set() and app.model.world_size == ranks and app.drawn):
            await pilot.pause(0.05)
        await pilot.pause(0.5)
        gc.collect()
        base, _ = _rss()
        t0 = time.perf_counter()
        feed.go.set()
        while app.running or not app.drawn:
            await pilot.pause(0.1)
        wall = time.perf_counter() - t0
        gc.collect()
        rss, peak = _rss()
        screen = app.screen
        m = app.model
        out = {"ranks": ranks, "lines": m.lines_seen, "seconds": round(wall, 1),
               "view": "compact" if getattr(screen, "compact_on", False) else "grid",
               "lines_kept_per_rank": m.lines_kept, "loss_points_kept_per_rank": m.loss_kept,
               "lines_held": sum(len(rv.lines) for rv in m.ranks.values()),
               "loss_points_held": sum(len(rv.losses) for rv in m.ranks.values()),
               "rss_mb": round(rss / 2**20, 1), "rss_peak_mb": round(peak / 2**20, 1),
               "rss_before_lines_mb": round(base / 2**20, 1), "grown_mb": round((rss - base) / 2**20, 1)}
    return out


# -- the section --------------------------------------------------------------------------------------

def bench(cfg, work, res: dict, log, mmm) -> None:
    lines = 1_000_000 if cfg.quick else 10_000_000
    seconds, presses = cfg.ui_seconds, cfg.ui_presses
    out: dict = {"rate": RATE, "period": PERIOD, "size": list(SIZE), "latency": {}, "memory": {}}
    log(f"many: 1,024 ranks (compact) and 16 ranks (grid) x {RATE} lines/s, {presses} presses, "
        f"{cfg.repeats} repeats alternating; then memory after {lines:,} lines")
    runs: dict[int, list] = {1024: [], 16: []}
    for i in range(cfg.repeats):
        for ranks in ((1024, 16) if i % 2 == 0 else (16, 1024)):
            d = latency_once(ranks, seconds, presses)
            log(f"  latency {ranks} ranks, repeat {i}: {d}")
            runs[ranks].append(d)
    for ranks, rs in runs.items():
        ok = [r for r in rs if "p95_ms" in r]
        if not ok:
            out["latency"][str(ranks)] = {"error": rs[-1].get("error", "?") if rs else "not run"}
            continue
        out["latency"][str(ranks)] = {k: mmm([r[k] for r in ok]) for k in
                                      ("p50_ms", "p95_ms", "max_ms", "ui_cpu_percent", "lines_per_s_absorbed")}
        out["latency"][str(ranks)]["repeats"] = len(ok)
    pairs = [(a, b) for a, b in zip(runs[1024], runs[16]) if "p95_ms" in a and "p95_ms" in b]
    if pairs:
        out["ratio_p95"] = mmm([a["p95_ms"] / b["p95_ms"] for a, b in pairs])
        out["ratio_cpu"] = mmm([a["ui_cpu_percent"] / b["ui_cpu_percent"] for a, b in pairs if b["ui_cpu_percent"]])
    for ranks in (1024, 16):
        d = memory_once(ranks, lines)
        log(f"  memory {ranks} ranks after {lines:,} lines: {d}")
        out["memory"][str(ranks)] = d
    res["many"] = out


def report(d: dict, fmt3) -> list[str]:
    L = ["## 10. Many ranks: the compact view at 1,024 ranks beside the pane grid at 16\n"]
    L.append(f"`bench/ui_many.py`: `measure_latency` with a synthetic engine sending every {d['period']} s (its read "
             f"turn while ranks trickle) each rank's {d['rate']} lines/s, its steps and losses, and every rank's "
             f"collectives; presses of `t` (timeline <-> ranks) at {d['size'][0]}x{d['size'][1]}, 1,024 and 16 ranks "
             "alternating in one run. CPU: the dashboard process, the generator's thread left out.\n")
    L.append("| | 1,024 ranks (compact view) | 16 ranks (pane grid) |\n|---|---|---|")
    lat = d.get("latency", {})
    a, b = lat.get("1024", {}), lat.get("16", {})
    for key, words, unit, digits in (("p50_ms", "keypress -> repaint p50", " ms", 1),
                                     ("p95_ms", "keypress -> repaint p95", " ms", 1), ("max_ms", "max", " ms", 1),
                                     ("ui_cpu_percent", "dashboard CPU, % of one core", " %", 1),
                                     ("lines_per_s_absorbed", "lines/s folded", "", 0)):
        L.append(f"| {words} | {fmt3(a.get(key, {}), digits, unit) if key in a else a.get('error', '-')} | "
                 f"{fmt3(b.get(key, {}), digits, unit) if key in b else b.get('error', '-')} |")
    if d.get("ratio_p95"):
        L.append(f"| **ratio 1,024 / 16** (per pair): p95 | **{fmt3(d['ratio_p95'], 2)}** | |")
        L.append(f"| **ratio 1,024 / 16** (per pair): CPU | **{fmt3(d['ratio_cpu'], 2)}** | |")
    L.append("")
    p95 = (a.get("p95_ms") or {}).get("median")
    cpu = (a.get("ui_cpu_percent") or {}).get("median")
    if p95 is not None:
        L.append(f"Targets at 1,024 ranks (medians): p95 ≤ 100 ms: {'met' if p95 <= 100 else '**missed**'} "
                 f"({p95:.1f} ms); dashboard ≤ 50 % of one core: "
                 f"{'met' if cpu is not None and cpu <= 50 else '**missed**'} ({cpu:.1f} %).\n")
    mem = d.get("memory", {})
    if mem:
        L.append("Memory: a fresh dashboard process folds distinct lines (10 per rank per batch, a step and a loss "
                 "with each) as fast as it can, never more than 30k lines ahead of its model, the Ranks tab shown; "
                 "RSS after every line was drawn (VmRSS; VmHWM the peak).\n")
        L.append("| | 1,024 ranks | 16 ranks |\n|---|---|---|")
        m1, m2 = mem.get("1024", {}), mem.get("16", {})
        for key, words in (("lines", "lines fed"), ("view", "view"), ("lines_kept_per_rank", "lines kept per rank"),
                           ("lines_held", "lines held"), ("loss_points_held", "loss points held"),
                           ("rss_before_lines_mb", "RSS before the first line, MB"), ("rss_mb", "RSS after, MB"),
                           ("rss_peak_mb", "peak RSS, MB"), ("grown_mb", "grown by, MB"), ("seconds", "fed in, s")):
            v1, v2 = m1.get(key, m1.get("error", "-")), m2.get(key, m2.get("error", "-"))
            L.append(f"| {words} | {f'{v1:,}' if isinstance(v1, int) else v1} | {f'{v2:,}' if isinstance(v2, int) else v2} |")
        L.append("")
        if "rss_mb" in m1:
            L.append(f"Target: the compact view's memory after {m1['lines']:,} lines within 150 MB: "
                     f"{'met' if m1['rss_mb'] <= 150 else '**missed**'} ({m1['rss_mb']} MB, the whole process). Above "
                     "64 ranks each rank keeps fewer lines and loss points (a 128k budget of each shared out, at "
                     "least 100 a rank: tui/compact.py kept_per_rank); zoom shows what a rank kept.\n")
    return L


if __name__ == "__main__" and len(sys.argv) >= 4 and sys.argv[1] == "memory":
    import asyncio
    print(json.dumps(asyncio.run(_memory(int(sys.argv[2]), int(sys.argv[3])))))
