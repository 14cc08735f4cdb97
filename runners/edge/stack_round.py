"""One round of stack taking: every rank's stacks (here, or through srun on its node) and its Flight Recorder dump
(through its debug server, on a thread of its own) at the same moment."""
from __future__ import annotations

import concurrent.futures
import time
from dataclasses import dataclass

from . import fr_client, remote_stacks, stacks
from .locality import on_this_host, this_host


@dataclass(frozen=True)
class Round:
    results: dict  # rank -> stack_types.StackResult
    fr_dumps: dict  # rank -> its normalised Flight Recorder dump
    fr_said: dict  # rank -> "recorded" | "unavailable: why"
    seconds: float


def take(targets: list[stacks.Target], hosts: dict[int, tuple[str, str]], job_id: str | None, world: int | None,
         socks: dict[int, str], no_socket: str, groups: dict, method: str, pyspy: str | None) -> Round:
    """`hosts`: rank -> (host, node); `socks`: rank -> its debug server, `no_socket` why a rank has none; `groups`:
    the collective groups the ranks said (fr_records.known_groups)."""
    t0 = time.monotonic()
    here = this_host()
    # a stopped rank's debug server cannot answer: not asked (one here is seen at once; one on another node by the srun
    # that would run py-spy there)
    stopped = {t.rank for t in targets if on_this_host(hosts[t.rank][0]) and stacks.stopped_state(t.pid)}
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        fr_job = pool.submit(fr_client.take, [t.rank for t in targets],
                             {r: sock for r, sock in socks.items() if r not in stopped}, hosts, here, job_id, world,
                             no_socket, groups)
        # ranks on other nodes are dumped there, through srun in their job (runners/edge/remote_stacks.py)
        results = remote_stacks.collect_everywhere(targets, hosts, here, job_id, method=method, pyspy=pyspy)
        fr_dumps, fr_said = fr_job.result()
    for rank, res in results.items():
        if res.state and rank not in fr_dumps:
            fr_said[rank] = f"unavailable: rank {rank} is stopped (State: {res.state})"
    return Round(results, fr_dumps, fr_said, time.monotonic() - t0)
