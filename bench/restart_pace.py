"""`make bench` section 12: time from torchrun's restart to the new attempt's ranks shown (issue 25, part 2).

`ddptui --no-ui -- torchrun --standalone --nproc-per-node 2 --max-restarts 2` on tests/fixtures/restarts_crash_then_kill.py
(rank 1 raises in attempt 0, rank 0 is SIGKILLed in attempt 1, attempt 2 trains to the end), with LOGLEVEL=INFO so that
torchrun's agent prints its `Worker group FAILED. N/M attempts left; will restart worker group` line. For each restart:
from that line's own stamp (torchrun's clock) to the first and to the last RankHello of the new attempt the engine
emitted (the ranks shown), and to its AttemptStarted."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from ddptui.runners.evidence.launcher_log import glog_line

ROOT = Path(__file__).resolve().parent.parent

WORKLOAD = ROOT / "tests" / "fixtures" / "restarts_crash_then_kill.py"
RESTART = re.compile(r"Worker group \w+\. \d+/\d+ attempts left; will restart worker group")


def once(work: Path) -> list[dict]:
    runs = Path(tempfile.mkdtemp(prefix="restart-", dir=work))
    subprocess.run([sys.executable, "-m", "ddptui.tui.cli", "--runs-dir", str(runs), "--no-ui", "--", sys.executable,
                    "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "--max-restarts", "2",
                    str(WORKLOAD)], cwd=ROOT, env={**os.environ, "LOGLEVEL": "INFO"}, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=300)
    (run,) = list(runs.iterdir())
    restarts = []
    for ln in (run / "launcher.log").read_text(errors="replace").splitlines():
        stamped = glog_line(ln.split(" err ", 1)[-1])
        if stamped is not None and RESTART.search(stamped[1]):
            restarts.append(stamped[0])
    events = [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines()]
    out, attempt = [], 0
    hellos: dict[int, list[float]] = {}
    started: dict[int, float] = {}
    for e in events:
        if e["kind"] == "attempt_started":
            attempt = e["attempt"]
            started[attempt] = e["wall"]
        elif e["kind"] == "rank_hello":
            hellos.setdefault(attempt, []).append(e["wall"])
    for n, line_wall in enumerate(restarts, start=1):
        if n in started and hellos.get(n):
            out.append({"attempt": n, "first_rank_s": min(hellos[n]) - line_wall,
                        "all_ranks_s": max(hellos[n]) - line_wall, "attempt_started_s": started[n] - line_wall})
    return out


def bench(cfg, work: Path, res: dict, log, mmm) -> None:
    reps = 1 if cfg.quick else max(2, cfg.repeats - 1)
    log(f"restarts: torchrun --max-restarts 2 under ddptui, {reps} run(s), 2 restarts each")
    got = []
    for i in range(reps):
        r = once(work)
        got += r
        log(f"  run {i}: " + ", ".join(f"attempt {x['attempt']}: first rank {x['first_rank_s']:.2f} s, all "
                                       f"{x['all_ranks_s']:.2f} s" for x in r))
    res["restarts"] = {"samples": got, "first_rank_s": mmm([x["first_rank_s"] for x in got]),
                       "all_ranks_s": mmm([x["all_ranks_s"] for x in got]),
                       "attempt_started_s": mmm([x["attempt_started_s"] for x in got])}


def report(r: dict, fmt3) -> list[str]:
    return ["## 12. Restarts: from torchrun's restart to the new attempt's ranks shown\n",
            "`torchrun --standalone --nproc-per-node 2 --max-restarts 2` on a program that fails in attempts 0 and 1 "
            "(an exception, a SIGKILL), under `ddptui --no-ui`, LOGLEVEL=INFO; from the stamp of torchrun's `Worker "
            "group FAILED ... will restart worker group` line to the engine's RankHello of the new attempt (its read "
            "time). This is mostly torchrun's own restart (stopping the group, the rendezvous, spawning) and the "
            "ranks' interpreter start-up; the engine reads a rank file at most 0.25 s late.\n",
            "| | s |\n|---|---|",
            f"| first rank of the new attempt shown | {fmt3(r['first_rank_s'])} |",
            f"| every rank of it shown | {fmt3(r['all_ranks_s'])} |",
            f"| AttemptStarted emitted | {fmt3(r['attempt_started_s'])} |", ""]
