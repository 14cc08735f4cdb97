"""`make bench` section viewer (--only viewer): the dashboard as a viewer in another process (`ddptui attach RUN_DIR`,
tui/follow.py following the record a synthetic engine writes and flushes each turn, and the feed it publishes) beside
the dashboard in the engine's process, at 16 ranks x 1,000 lines/s and at 1,024 ranks x 10 lines/s: keypress -> repaint and the dashboard's CPU.

  .venv/bin/python bench/ui_viewer.py write RUN_DIR RANKS RATE SECONDS PERIOD   # the engine's side (run.py starts it)
  .venv/bin/python bench/ui_viewer.py [--quick]                                  # the section alone, figures printed
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from figures import fmt3, mmm

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
SIZE = (160, 50)
LOADS = ((16, 1000, 0.02), (1024, 10, 0.25))  # ranks, lines/s per rank, the engine's turn


def write(run_dir: Path, ranks: int, rate: int, seconds: float, period: float) -> None:
    """The engine's part of a run, without ranks: a synthetic run's events written into a record as the engine
    writes them (RunRecord, flushed every turn), its control channel served and each turn's batch published to the
    viewers that take its feed (runners/run_loop.py _flush)."""
    from ddptui.runners import events as ev
    from ddptui.runners.edge.control import Channel
    from ddptui.runners.edge.feed import Feed
    from ddptui.runners.edge.record import RunRecord
    from ddptui.tui.synthetic import SyntheticSource
    record = RunRecord(run_dir)
    source = SyntheticSource(ranks=ranks, lines_per_s=rate, seconds=seconds, period=period)
    feed = Feed()
    channel = Channel(run_dir, lambda: None, lambda why: source.request_stop(), feed.add).open()

    def emit(batch: list) -> None:
        for e in batch:
            if isinstance(e, ev.LogLines):
                record.lines(e.rank, e.stream, e.wall, e.lines)
            else:
                record.event(e)
        record.flush()
        feed.publish(batch, record)
    source.prepare(emit)
    try:
        source.run()
    finally:
        channel.close()
        feed.close()
        record.close()


def _latency(ranks: int, rate: int, period: float, seconds: float, presses: int, follow: str | None) -> dict:
    code = ("import json\nfrom ddptui.tui.latency import measure_latency\n"
            f"print(json.dumps(measure_latency(ranks={ranks}, rate={rate}, seconds={seconds}, presses={presses}, "
            f"size={SIZE}, period={period}, follow={follow!r})))\n")
    try:
        p = subprocess.run([PY, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300 + seconds * 4)
    except subprocess.TimeoutExpired:
        return {"error": "ran past its bound"}
    last = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else ""
    return json.loads(last) if last.startswith("{") else {"error": (p.stderr or p.stdout)[-1500:]}


def viewer_once(ranks: int, rate: int, period: float, seconds: float, presses: int) -> dict:
    """The viewer: a writer process started, its record followed by a fresh dashboard process."""
    from ddptui.runners.edge.control import lock_held
    with tempfile.TemporaryDirectory(prefix="ddptui-viewer-") as tmp:
        run = Path(tmp) / "run"
        run.mkdir()
        writer = subprocess.Popen([PY, str(Path(__file__).resolve()), "write", str(run), str(ranks), str(rate),
                                   str(seconds + 60), str(period)], cwd=ROOT)
        try:
            end = time.monotonic() + 30
            while not (lock_held(run) and (run / "events.jsonl").stat().st_size if (run / "events.jsonl").exists()
                       else False):
                if time.monotonic() > end or writer.poll() is not None:
                    return {"error": "the record writer did not start"}
                time.sleep(0.05)
            return _latency(ranks, rate, period, seconds, presses, str(run))
        finally:
            writer.terminate()
            writer.wait(30)


def bench(cfg, work, res: dict, log, mmm) -> None:
    seconds, presses = cfg.ui_seconds, cfg.ui_presses
    out: dict = {"size": list(SIZE), "loads": {}}
    log(f"viewer: a viewer in another process vs the dashboard in the engine's process, {presses} presses, "
        f"{cfg.repeats} repeats alternating")
    for ranks, rate, period in LOADS:
        pairs = []
        for i in range(cfg.repeats):
            order = ("viewer", "in-process") if i % 2 == 0 else ("in-process", "viewer")
            got = {}
            for kind in order:
                got[kind] = (viewer_once(ranks, rate, period, seconds, presses) if kind == "viewer"
                             else _latency(ranks, rate, period, seconds, presses, None))
                log(f"  {ranks} ranks x {rate} lines/s, {kind}, repeat {i}: {got[kind]}")
            pairs.append(got)
        ok = [p for p in pairs if all("p95_ms" in p[k] for k in p)]
        d: dict = {"rate": rate, "period": period, "repeats": len(ok)}
        if ok:
            for kind in ("viewer", "in-process"):
                d[kind] = {k: mmm([p[kind].get(k, 0.0) for p in ok])
                           for k in ("p50_ms", "p95_ms", "ui_cpu_percent", "read_cpu_percent", "lines_per_s_absorbed")}
            d["ratio_p95"] = mmm([p["viewer"]["p95_ms"] / p["in-process"]["p95_ms"] for p in ok])
            d["ratio_cpu"] = mmm([p["viewer"]["ui_cpu_percent"] / p["in-process"]["ui_cpu_percent"] for p in ok
                                  if p["in-process"]["ui_cpu_percent"]])
            d["ratio_cpu_unread"] = mmm([(p["viewer"]["ui_cpu_percent"] - p["viewer"].get("read_cpu_percent", 0.0))
                                         / p["in-process"]["ui_cpu_percent"] for p in ok
                                         if p["in-process"]["ui_cpu_percent"]])
        else:
            d["error"] = next((p[k].get("error") for p in pairs for k in p if "error" in p[k]), "not run")
        out["loads"][str(ranks)] = d
    res["viewer"] = out


def report(d: dict, fmt3) -> list[str]:
    L = ["## A viewer in another process beside the dashboard in the engine's process\n"]
    L.append("`bench/ui_viewer.py`: the same presses of `t` as section 10 (`measure_latency`). In-process: the "
             "synthetic engine in the dashboard's process (CPU: the dashboard, the generator's thread left out). "
             "Viewer: a second process writes the record as the engine does (RunRecord, flushed every turn, the "
             "control channel served, each turn's batch published to the feed: runners/edge/feed.py) and a fresh "
             "dashboard process follows it (tui/follow.py: the record up to where the feed starts, then the feed's "
             "frames; CPU: the whole viewer, its reading of the record and the feed included).\n")
    L.append("| load | | viewer | in-process | ratio viewer / in-process |\n|---|---|---|---|---|")
    for ranks, x in d.get("loads", {}).items():
        name = f"{int(ranks):,} ranks x {x.get('rate')} lines/s"
        if "error" in x:
            L.append(f"| {name} | error: {x['error'][:80]} | | | |")
            continue
        for key, words, unit, ratio in (("p95_ms", "keypress -> repaint p95", " ms", "ratio_p95"),
                                        ("p50_ms", "p50", " ms", None),
                                        ("ui_cpu_percent", "CPU, % of one core", " %", "ratio_cpu"),
                                        ("read_cpu_percent", "of it reading the record and the feed", " %", None),
                                        ("lines_per_s_absorbed", "lines/s folded", "", None)):
            if key not in x["viewer"]:  # results of an older bench, before the reading was said apart
                continue
            r = f"**{fmt3(x[ratio], 2)}**" if ratio else ""
            L.append(f"| {name} | {words} | {fmt3(x['viewer'][key], 1, unit)} | "
                     f"{fmt3(x['in-process'][key], 1, unit)} | {r} |")
        if "ratio_cpu_unread" in x:
            L.append(f"| {name} | CPU less the reading (not the target's measure) | | | "
                     f"{fmt3(x['ratio_cpu_unread'], 2)} |")
    L.append("\nTarget: ratio ≤ 1.1 for p95 and CPU (the viewer's CPU with its reading of the record).\n")
    return L



if __name__ == "__main__" and len(sys.argv) >= 7 and sys.argv[1] == "write":
    write(Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6]))
elif __name__ == "__main__":
    from types import SimpleNamespace
    quick = "--quick" in sys.argv
    cfg = SimpleNamespace(ui_seconds=4.0 if quick else 8.0, ui_presses=15 if quick else 30, repeats=1 if quick else 2)
    res: dict = {}
    bench(cfg, None, res, lambda s: print(s, flush=True), mmm)
    print(json.dumps(res))
    print("\n".join(report(res["viewer"], fmt3)))
