"""`make bench` section 7: 2 nodes x 2 ranks under a real Slurm cluster vs the same 4 ranks on one node, side by side:
time from launch to every rank's hello, and the time to take every rank's stacks when one rank hangs."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable

# The same hang (rank 3 sleeps before its backward at step 10: on node 2 under Slurm's block layout) and the same
# stall bound for both; only where the 4 ranks run differs.
COMMON = ["--set", "fault.rank=3", "--set", "fault.step=10", "--set", "on_stall=stop"]
LOCAL = ["profiles/hang.yaml", "--set", "nproc=4"]
SLURM = ["slurm-hang", "--set", "nnodes=2", "--set", "nproc=2"]


def _events(run_dir: Path) -> list[dict]:
    path = run_dir / "events.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


def figures(events: list[dict], t_launch: float, world: int) -> dict:
    """From one run's events: launch -> every rank's hello, and the stall's stacks (time, ranks, methods)."""
    hellos = {e["rank"]: e["wall"] for e in events if e["kind"] == "rank_hello"}
    stacks = next((e for e in events if e["kind"] == "stacks" and e.get("why", "stall") == "stall"), None)
    verdict = next((e for e in events if e["kind"] == "hang_verdict"), None)
    finished = next((e for e in events if e["kind"] == "run_finished"), None)
    out = {"hellos": len(hellos), "culprits": verdict["culprits"] if verdict else None}
    if verdict and finished:
        out["end_s"] = finished["wall"] - verdict["wall"]  # teardown: scancel and Slurm's KillWait, or torchrun's
    if len(hellos) == world:
        out["hello_s"] = max(hellos.values()) - t_launch
    if stacks:
        methods = sorted({str(m) for m in stacks["method"].values()})
        out["remote_ranks"] = remote_ranks(Path(stacks["path"]))
        out.update({"stacks_s": stacks["seconds"], "stack_ranks": sum(
            1 for m in stacks["method"].values() if not str(m).startswith("unavailable")), "methods": methods})
    return out


def remote_ranks(folder: Path) -> int:
    """Ranks whose stack file says it was taken on another node (`rank N pid P on NODE (method)`)."""
    return sum(1 for f in folder.glob("rank*.txt") if re.search(r"^rank \d+ pid \d+ on \S+ \(", f.read_text(), re.M))


def once(argv_tail: list[str], work: Path, env: dict, stall_after: float, wrap=lambda argv: argv) -> dict:
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    argv = [PY, "-m", "ddptui.tui.cli", *argv_tail, *COMMON, "--set", f"stall_after={stall_after}", "--no-ui",
            "--runs-dir", str(work)]
    t_launch = time.time()
    p = subprocess.Popen(wrap(argv), cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    err = []
    reader = threading.Thread(target=lambda: err.append(p.stderr.read()), daemon=True)
    reader.start()
    try:
        rc = p.wait(timeout=300)
    except subprocess.TimeoutExpired:
        p.terminate()
        rc = p.wait(timeout=60)
    reader.join(5)
    wall = time.time() - t_launch
    runs = list(work.iterdir())
    out = {"exit": rc, "wall_s": wall}
    if len(runs) != 1:
        out["error"] = f"no run record (exit {rc}): {''.join(err)[-300:]}"
        return out
    out.update(figures(_events(runs[0]), t_launch, 4))
    if "hello_s" not in out or "stacks_s" not in out:
        out["error"] = f"{out['hellos']} hellos, stacks {'taken' if 'stacks_s' in out else 'not taken'} (exit {rc})"
    return out


def bench(cfg, work: Path, res: dict, log, mmm) -> None:
    sys.path.insert(0, str(ROOT))
    from tests.support.slurm_cluster import SlurmCluster, cannot_run

    # Namespaced hosts where this machine can make them: ddptui on node0, so node1's ranks are dumped there through
    # srun --overlap in the job; else both slurmd on this host (every rank's stack then taken locally).
    namespaced = cannot_run(namespaced=True) is None
    why = cannot_run(namespaced=False)
    if why:
        res["multinode"] = {"not_measured": why}
        return
    stall_after = cfg.stall_after
    cluster = SlurmCluster(namespaced=namespaced)
    log(f"multinode: starting a Slurm cluster (slurmctld + 2 slurmd, {'namespaced hosts' if namespaced else 'one host'})")
    cluster.start()
    env = {**os.environ, **cluster.env}
    env.pop("SLURM_JOB_ID", None)
    pairs = []
    try:
        for i in range(cfg.multinode_repeats):
            order = [("slurm", SLURM), ("local", LOCAL)]
            if i % 2:
                order.reverse()
            pair = {}
            for kind, tail in order:
                wrap = (lambda argv: cluster.hosts.wrap(0, argv)) if kind == "slurm" and namespaced else (lambda argv: argv)
                pair[kind] = once(tail, work / f"multinode-{kind}", env, stall_after, wrap)
                cluster.wait_no_jobs(timeout=60)
                r = pair[kind]
                log(f"  {kind} repeat {i}: hellos {r.get('hello_s', '-')} s, stacks {r.get('stacks_s', '-')} s "
                    f"({r.get('stack_ranks')} ranks, {r.get('methods')}), culprits {r.get('culprits')}, exit {r['exit']}, "
                    f"wall {r['wall_s']:.1f} s {r.get('error', '')}")
            pairs.append(pair)
    finally:
        cluster.stop()
        cluster.remove_root()
    res["multinode"] = summarize(pairs, stall_after, mmm)
    res["multinode"]["date"] = time.strftime("%Y-%m-%d %H:%M")
    res["multinode"]["cluster_start_s"] = cluster.start_s
    res["multinode"]["namespaced"] = namespaced


def summarize(pairs: list[dict], stall_after: float, mmm) -> dict:
    ok = [p for p in pairs if "error" not in p["slurm"] and "error" not in p["local"]]
    out = {"stall_after": stall_after, "pairs": len(pairs), "pairs_ok": len(ok), "runs": pairs}
    for kind in ("slurm", "local"):
        out[kind] = {"hello_s": mmm([p[kind]["hello_s"] for p in ok]),
                     "stacks_s": mmm([p[kind]["stacks_s"] for p in ok]),
                     "wall_s": mmm([p[kind]["wall_s"] for p in pairs]),
                     "stack_ranks": [p[kind].get("stack_ranks") for p in pairs],
                     "remote_ranks": [p[kind].get("remote_ranks") for p in pairs],
                     "end_s": mmm([p[kind].get("end_s") for p in ok]),
                     "methods": sorted({m for p in pairs for m in p[kind].get("methods", [])}),
                     "culprits": [p[kind].get("culprits") for p in pairs],
                     "errors": [p[kind]["error"] for p in pairs if "error" in p[kind]]}
    out["hello_ratio"] = mmm([p["slurm"]["hello_s"] / p["local"]["hello_s"] for p in ok])
    out["stacks_ratio"] = mmm([p["slurm"]["stacks_s"] / p["local"]["stacks_s"] for p in ok if p["local"]["stacks_s"]])
    return out


def report(m: dict, fmt3) -> list[str]:
    L = ["## 7. Multi-node: 2 nodes × 2 ranks under Slurm vs 4 ranks on one node\n"]
    if "not_measured" in m:
        return L + [f"not measured: {m['not_measured']}\n"]
    where = ("on two namespaced hosts node0/node1 (own hostname and address each), ddptui on node0, so node1's ranks "
             "are dumped there through `srun --overlap` in the job" if m.get("namespaced") else
             "with both slurmd on this host (every rank's stack taken locally)")
    L.append(f"Measured {m.get('date')}. A real Slurm 22.05 cluster on this machine (slurmctld + 2 slurmd {where}; "
             f"up in {m.get('cluster_start_s', 0):.1f} s), `ddptui slurm-hang --no-ui` (sbatch, srun one "
             "task per rank, 2 nodes × 2 ranks) vs `ddptui profiles/hang.yaml --set nproc=4 --no-ui` (torchrun, one "
             f"node), both with rank 3 hanging at step 10 and stall_after={m['stall_after']:g} s; {m['pairs']} pairs, "
             "order alternating, ratios per pair. *Hellos* = ddptui's launch → the last of the 4 ranks' hello reports "
             "(under Slurm: sbatch, scheduling, srun's step launch on both nodes included). *Stacks* = "
             "StacksCollected.seconds, every rank's stack when the stall is called (under Slurm: through the job's "
             "allocation on each node). Both \"nodes\" share this machine's 2 cores.\n")
    L.append("| | launch → every hello s | stacks of every rank s | ranks with stacks (of them taken on another node) "
             "| method | culprits | verdict → run finished s | run wall s |")
    L.append("|---|---|---|---|---|---|---|---|")
    for kind, name in (("slurm", "Slurm, 2 nodes × 2 ranks"), ("local", "one node, 4 ranks (torchrun)")):
        r = m[kind]
        L.append(f"| {name} | {fmt3(r['hello_s'])} | {fmt3(r['stacks_s'])} | {r['stack_ranks']} "
                 f"({r.get('remote_ranks')}) | {', '.join(r['methods'])} | {r['culprits']} | {fmt3(r.get('end_s'), 1)} "
                 f"| {fmt3(r['wall_s'], 1)}"
                 f"{(' errors: ' + '; '.join(r['errors'])) if r['errors'] else ''} |")
    L.append(f"| **ratio Slurm / one node** (per pair) | **{fmt3(m['hello_ratio'])}** | **{fmt3(m['stacks_ratio'])}** "
             "| | | | | |")
    L.append("")
    return L
