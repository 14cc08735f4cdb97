"""Dashboard scenes as batches of real events (a hang, a crash, replicas that differ, a Slurm job, 64 ranks), fixed walls."""
from __future__ import annotations

from ddptui.runners import events as ev


T0 = 1_700_000_000.0


def hang_scenario(world: int = 2, steps: int = 10) -> list[list[ev.Event]]:
    """Batches of a 2-rank run where rank 1 sleeps at step 3 and rank 0 waits in all_reduce."""
    t = T0
    b: list[list[ev.Event]] = [[
        ev.RunStarted("/runs/x-hang", "hang", "torchrun", world, steps, t),
        ev.ProcessStarted("torchrun", 4242, tuple(range(world)), t),
    ]]
    b.append([ev.RankHello(r, 5000 + r, "host-a", world, t + 0.5) for r in range(world)]
             + [ev.RankState(r, "running", "", t + 0.5) for r in range(world)])
    for s in range(1, 4):
        b.append([ev.LogLines(r, "out", t + s, s, (f"[rank {r}] step {s} loss {1.0 / s:.3f}",)) for r in range(world)]
                 + [ev.Progress(r, s, 1.0 / s + 0.01 * r, t + s, "hook") for r in range(world)])
    b.append([ev.LogLines(None, "err", t + 3.5, 3.5, ("W torchrun: some launcher warning",)),
              ev.Resources({r: 50.0 + r for r in range(world)}, {r: (100 + r) << 20 for r in range(world)}, t + 4),
              ev.HintRaised("gloo-timeout", "Collective timeout", "A rank stopped calling the collective.",
                            "Find the rank that is elsewhere (stacks view).", 0, "gloo timeout", t + 4)])
    b.append([ev.StallDetected((1,), (), t + 3, 5.0, t + 8), ev.RankState(1, "stalled", "no step for 5s", t + 8),
              ev.RankState(0, "stalled", "waiting in all_reduce", t + 8)])
    threads = {
        0: [{"thread": "MainThread", "idle": False, "frames": [
            ["<module>", "/w/hang_ddp.py", 60], ["backward", "/venv/torch/_tensor.py", 521],
            ["all_reduce", "/venv/torch/distributed/distributed_c10d.py", 2200]]}],
        1: [{"thread": "MainThread", "idle": False, "frames": [
            ["<module>", "/w/hang_ddp.py", 58], ["culprit_wait", "/w/hang_ddp.py", 31]]},
            {"thread": "Thread-2", "idle": True, "frames": [["run", "/usr/lib/python3.11/threading.py", 975]]}],
    }
    b.append([ev.StacksCollected({0: "py-spy", 1: "py-spy"}, threads, 0.42, "/runs/x-hang/stacks/1", t + 9),
              ev.HangVerdict("rank 1 is in culprit_wait (hang_ddp.py:31) at step 3 while rank 0 waits in all_reduce",
                             (1,), (0,), {1: {"category": "sleep", "func": "culprit_wait", "file": "/w/hang_ddp.py",
                                              "line": 31, "code": "time.sleep(600)", "step": 3},
                                          # as runners.evidence.hang_verdict.classify(rank 0's threads).to_dict(3) says
                                          0: {"category": "collective", "detail": "all_reduce", "func": "all_reduce",
                                              "file": "/venv/torch/distributed/distributed_c10d.py", "line": 2200,
                                              "code": "", "thread": "MainThread", "calls": None, "worker": None,
                                              "step": 3}}, t + 9,
                             path="/runs/x-hang/stacks/1")])
    b.append([ev.RankState(r, "killed", "stopped after the stall", t + 10) for r in range(world)]
             + [ev.ProcessExited("torchrun", tuple(range(world)), -15, "SIGTERM", t + 10),
                ev.ReplicaVerdict("unavailable", "no digests (run stopped)", None, (), (), {}, t + 10),
                ev.RunFinished("stalled", 3, "/runs/x-hang/summary.json", t + 10, {"status": "stalled"})])
    return b


def crash_scenario() -> list[list[ev.Event]]:
    t = T0
    return [
        [ev.RunStarted("/runs/x-crash", "crash", "torchrun", 2, 10, t),
         ev.RankState(0, "running", "", t), ev.RankState(1, "running", "", t)],
        [ev.LogLines(1, "err", t + 1, 1, ("Traceback (most recent call last):", "RuntimeError: injected crash on rank 1 at step 2"))],
        [ev.RankState(1, "failed", "exit 1", t + 2), ev.ProcessExited("rank1", (1,), 1, None, t + 2),
         ev.RankState(0, "failed", "SIGABRT", t + 2.5), ev.ProcessExited("rank0", (0,), -6, "SIGABRT", t + 2.5),
         ev.CrashVerdict("rank 1 raised RuntimeError: injected crash on rank 1 at step 2 (ddp_mlp.py:88)", 1, (0,),
                         "exit 1", ("  File \"ddp_mlp.py\", line 88, in main", "RuntimeError: injected crash on rank 1 at step 2"), t + 3),
         ev.RunFinished("failed", 1, "/runs/x-crash/summary.json", t + 3, {})],
    ]


def diverge_scenario() -> list[list[ev.Event]]:
    t = T0
    params = ("net.0.weight", "net.0.bias", "net.2.weight")
    same = ("aa11bb22cc33dd44", "ee55ff6600112233", "4455667788990011")
    return [
        [ev.RunStarted("/runs/x-div", "diverge", "env", 3, 5, t)]
        + [ev.Progress(r, 5, 0.5, t + 1, "hook") for r in range(3)],
        [ev.ReplicaVerdict("differ", "rank 2 differs from the majority at net.0.bias", "net.0.bias", (2,), params,
                           {0: same, 1: same, 2: (same[0], "deadbeefdeadbeef", "0000000000000000")}, t + 2),
         ev.RunFinished("replicas differ", 4, "/runs/x-div/summary.json", t + 2, {})]
        + [ev.ProcessExited(f"rank{r}", (r,), 3 if r == 2 else 0, None, t + 2) for r in range(3)]
        + [ev.RankState(r, "exited" if r != 2 else "failed", "", t + 2) for r in range(3)],
    ]


def multinode_scenario(nodes: int = 2, per: int = 2, cyclic: bool = False, pending_only: bool = False,
                       lost: bool = False) -> list[list[ev.Event]]:
    """A Slurm job of `nodes` x `per` ranks: pending (Priority), then running; srun's cyclic placement puts rank r on
    node r % nodes, block on node r // per. `lost`: the last node drops out at step 3."""
    t, world = T0, nodes * per
    b: list[list[ev.Event]] = [[ev.RunStarted("/runs/x-slurm", "slurm-ddp", "slurm", world, 20, t),
                                ev.ProcessStarted("sbatch", 4100, tuple(range(world)), t),
                                ev.JobState("12", "PENDING", "Priority", (), t + 0.2)]]
    if pending_only:
        return b
    names = tuple(f"node{n}" for n in range(nodes))
    node_of = {r: (r % nodes if cyclic else r // per) for r in range(world)}
    b.append([ev.JobState("12", "RUNNING", "", names, t + 2)]
             + [ev.RankHello(r, 7000 + r, f"node{node_of[r]}", world, t + 3, node=f"node{node_of[r]}")
                for r in range(world)]
             + [ev.RankState(r, "running", "", t + 3) for r in range(world)])
    for s in range(1, 4):
        b.append([ev.LogLines(r, "out", t + 3 + s, 3 + s, (f"step {s} loss {1.0 / s:.3f}",)) for r in range(world)]
                 + [ev.Progress(r, s, None, t + 3 + s, "hook") for r in range(world)])  # no loss: the chart
    # redraws at most once a second (tui/redraw.py), and a snapshot must not depend on when it did
    b.append([ev.Resources({r: 90.0 for r in range(world)}, {r: 200 << 20 for r in range(world)}, t + 6.5)])
    if lost:
        gone = tuple(r for r in range(world) if node_of[r] == nodes - 1)
        b.append([ev.NodeLost(names[-1], gone, f"the srun task on {names[-1]} exited (node unreachable)", t + 7)]
                 + [ev.RankState(r, "failed", "node lost", t + 7) for r in gone])
    return b


def many_ranks(n: int = 64, t: float = 1000.0) -> list:
    """A 64-rank run (fixed walls): every rank at step 10 printing, rank 17 failed, rank 40 behind in collectives at
    step 3, rank 50 slow."""
    b = [ev.RunStarted("/runs/many", "many", "torchrun", n, 100, t)] + [ev.RankState(r, "running", "", t) for r in range(n)]
    b += [ev.RankHello(r, 5000 + r, "host", n, t + 0.5, f"node{r // 8}") for r in range(n)]
    b += [ev.LogLines(r, "out", t + 1, 0.0, (f"rank {r} step {10 if r != 40 else 3} loss {0.5 + r / 1000:.3f}",))
          for r in range(n)]
    b += [ev.Progress(r, 10 if r != 40 else 3, 0.5 + r / 1000, t + 1, "hook") for r in range(n)]
    b += [ev.Resources({r: 50.0 + r for r in range(n)}, {r: (200 + r) << 20 for r in range(n)}, t + 1)]
    b += [ev.RankState(17, "failed", "exit 1", t + 2), ev.ProcessExited("rank17", (17,), 1, None, t + 2),
          ev.LogLines(17, "err", t + 2, 0.0, ("RuntimeError: injected failure on rank 17",)),
          ev.RankState(50, "slow", "", t + 2), ev.CollectiveProgress({}, (40,), t + 2)]
    return [b]


def batched(rank: int, last: int, wall: float, n: int = 10) -> ev.Progress:
    """What the engine sends once per turn: every step since the rank's previous event, read at one time."""
    pts = tuple((s, 1.0 / s) for s in range(last - n + 1, last + 1))
    return ev.Progress(rank, last, pts[-1][1], wall, "report", pts)


def told(rank: int, last: int, wall: float, samples: int | None, n: int = 10) -> ev.Progress:
    e = batched(rank, last, wall, n)
    return ev.Progress(e.rank, e.step, e.loss, e.wall, e.source, e.losses, samples)
