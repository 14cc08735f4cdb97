"""Engine-only ingest: pre-written rank files read by the engine's Tailer and fed to Session.ingest/flush.

Separates ingest speed (read, split, parse, hint-match, record, console emit) from how fast ranks print.
Run as a subprocess so RSS is this path's alone; prints one JSON object.

  python bench/ingest_engine.py --lines 1000000 [--mix] [--ranks 2] [--work DIR] [--tracemalloc] [--cprofile N]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def rss_mb() -> float:
    import psutil
    return psutil.Process().memory_info().rss / 2**20


def vm_hwm_mb() -> float:
    """Peak RSS of this process image (VmHWM). ru_maxrss would inherit the parent's RSS at fork+exec."""
    try:
        for ln in open("/proc/self/status"):
            if ln.startswith("VmHWM:"):
                return int(ln.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def prewrite(work: Path, ranks: int, per_rank: int, mix: bool) -> list[Path]:
    out = []
    for r in range(ranks):
        p = work / f"mix{int(mix)}-{per_rank}-rank{r}.out"
        if not p.exists() or p.stat().st_size == 0:
            env = dict(os.environ, PRINT_RANK=str(r), RANK=str(r), PRINT_LINES=str(per_rank),
                       PRINT_MIX="mix" if mix else "short")
            with open(str(p) + ".tmp", "wb") as f:
                subprocess.run([sys.executable, str(ROOT / "bench" / "workloads" / "printer.py")],
                               stdout=f, env=env, check=True)
            os.replace(str(p) + ".tmp", p)
        out.append(p)
    return out


def count_lines(path: Path, marker: bytes) -> int:
    n = 0
    carry = b""
    with open(path, "rb") as f:
        while True:
            chunk = f.read(1 << 24)
            if not chunk:
                return n
            n += (carry + chunk).count(marker)  # carry: a marker cut by the chunk boundary
            carry = chunk[-(len(marker) - 1):]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=1_000_000, help="total over all ranks")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--mix", action="store_true")
    ap.add_argument("--work", default="/tmp/ddptui-bench/ingest")
    ap.add_argument("--tracemalloc", action="store_true")
    ap.add_argument("--cprofile", type=int, default=0, help="print the top N functions by cumulative time")
    ap.add_argument("--keep", action="store_true", help="keep the run record")
    a = ap.parse_args()
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    per_rank = a.lines // a.ranks
    files = prewrite(work, a.ranks, per_rank, a.mix)

    from ddptui.runners import events as ev
    from ddptui.runners.edge.tail import Tailer
    from ddptui.runners.launch.profile.load import load_profile
    from ddptui.runners.session import Session
    from ddptui.tui.console import Console

    profile = load_profile(ROOT / "profiles" / "cpu-ddp.yaml", [f"nproc={a.ranks}"])
    console = Console(out=open(os.devnull, "w"), color=False)
    seen = {"lines": 0}

    def emit(batch):
        for e in batch:
            if isinstance(e, ev.LogLines):
                seen["lines"] += len(e.lines)
        console.handle(batch)

    runs = work / "runs"
    s = Session(profile, runs, emit=emit)
    s.begin(a.ranks)  # ranks tracked and hints matched as in a run, with nothing started
    tailer = Tailer()
    for r, p in enumerate(files):
        tailer.add(str(p), r, "out")
    rss0 = rss_mb()
    if a.tracemalloc:
        import tracemalloc
        tracemalloc.start()
    prof = None
    if a.cprofile:
        import cProfile
        prof = cProfile.Profile()
        prof.enable()
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    turns = 0
    while True:
        got = tailer.poll()
        if not got:
            break
        wall, mono = time.time(), time.monotonic()
        for rank, stream, lines in got:
            s.ingest(rank, stream, lines, wall, mono)
        s.flush()
        turns += 1
    for rank, stream, lines in tailer.drain():
        s.ingest(rank, stream, lines, time.time(), time.monotonic())
    s.flush()
    s.record.flush()
    secs = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    if prof is not None:
        prof.disable()
    peak_tm = None
    if a.tracemalloc:
        import tracemalloc
        peak_tm = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
    rss1 = rss_mb()
    maxrss = vm_hwm_mb()
    tailer.close()
    s.record.close()
    got_lines = {r: count_lines(s.run_dir / f"rank{r}.log", f"L r{r} ".encode()) for r in range(a.ranks)}
    result = {
        "lines": per_rank * a.ranks, "mix": a.mix, "ranks": a.ranks, "seconds": secs, "cpu_seconds": cpu,
        "lines_per_s": per_rank * a.ranks / secs, "turns": turns, "emitted": seen["lines"],
        "recorded": got_lines, "lost": per_rank * a.ranks - sum(got_lines.values()),
        "rss_before_mb": rss0, "rss_after_mb": rss1, "maxrss_mb": maxrss, "tracemalloc_peak_mb": peak_tm,
        "bytes": sum(p.stat().st_size for p in files),
    }
    if not a.keep:
        import shutil
        shutil.rmtree(s.run_dir, ignore_errors=True)
    if prof is not None:
        import io
        import pstats
        buf = io.StringIO()
        st = pstats.Stats(prof, stream=buf)
        st.sort_stats("tottime").print_stats(a.cprofile)
        result["cprofile"] = buf.getvalue()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
