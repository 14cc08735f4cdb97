"""The ranks' Flight Recorder dumps and tracebacks through torch's per-rank debug server, here or on their node."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from ..evidence.fr_records import normalise_all
from . import srun_exec
from .fr_relay import DebugServerError, post, post_all

DUMP_TIMEOUT = 5.0  # seconds for a rank's debug server to answer (it answers from a C++ thread in ~10 ms when hung)
RELAY = Path(__file__).with_name("fr_relay.py")


def fr_trace(path: str, timeout: float = DUMP_TIMEOUT) -> dict:
    """One rank's full Flight Recorder dump as torch's fr_trace_json gives it (parsed JSON)."""
    return _fr_json(post(path, "fr_trace_json", timeout))


def traceback_text(path: str, timeout: float = DUMP_TIMEOUT) -> str:
    """Every Python thread of the rank, faulthandler-style text (torch's dump_traceback handler)."""
    return post(path, "dump_traceback", timeout).decode("utf-8", "replace")


def _fr_json(body: bytes | str) -> dict:
    try:
        d = json.loads(body)
    except ValueError as e:
        raise DebugServerError(f"the Flight Recorder dump is not JSON ({e})") from e
    if not isinstance(d, dict) or not isinstance(d.get("entries", []), list):
        raise DebugServerError("the Flight Recorder dump has no entries list")
    return d


def ask_everywhere(socks: dict[int, str], hosts: dict[int, tuple[str, str]], here: str, job_id: str | None,
                   handler: str, timeout: float = DUMP_TIMEOUT) -> dict[int, bytes | str]:
    """rank -> the body its debug server gave for `handler`, or why there is none (a str), every rank at the same
    time: ranks on this machine through their socket, the others through `srun --overlap` in the job on their node
    (one srun per node, running fr_relay.py there). hosts: rank -> (host, node) from the hellos."""
    local = {r: p for r, p in socks.items() if srun_exec.is_local(hosts.get(r, ("", ""))[0], here)}
    by_node: dict[str, dict[int, str]] = {}
    for r, p in socks.items():
        if r not in local:
            host, node = hosts[r]
            by_node.setdefault(node or host, {})[r] = p
    out: dict[int, bytes | str] = {}
    if by_node:
        import concurrent.futures
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            far = pool.submit(ask_remote, by_node, job_id, handler, timeout)
            out.update(_ask_local(local, handler, timeout))
            out.update(far.result())
    else:
        out.update(_ask_local(local, handler, timeout))
    return out


def _ask_local(socks: dict[int, str], handler: str, timeout: float) -> dict[int, bytes | str]:
    got = post_all(list(dict.fromkeys(socks.values())), handler, timeout)
    return {r: (str(got[p]) if isinstance(got[p], Exception) else got[p]) for r, p in socks.items()}


def relay_argv(python: str, handler: str, timeout: float, paths: list[str]) -> list[str]:
    """The relay run on a node: its source passed inline (-c), so nothing of ddptui need be installed there; -S: no
    site-packages, only the standard library."""
    return [python, "-S", "-c", RELAY.read_text(encoding="utf-8"), handler, f"{timeout:g}", *paths]


def ask_remote(by_node: dict[str, dict[int, str]], job_id: str | None, handler: str, timeout: float,
                srun: str = "srun") -> dict[int, bytes | str]:
    out: dict[int, bytes | str] = {}
    exe = shutil.which(srun) if job_id else None
    if exe is None:
        for node, socks in by_node.items():
            why = (f"rank runs on {node}, not here, and there is no Slurm job to reach it through" if not job_id
                   else f"{srun} not found here, needed to reach {node}")
            out.update({r: why for r in socks})
        return out
    assert job_id is not None  # srun is looked for only for a job
    # the node's own python3: a rank's interpreter may not be on it under that path, python3 is on any node that
    # runs Python ranks
    argvs = {node: srun_exec.srun_argv(exe, job_id, node, relay_argv("python3", handler, timeout,
                                                                          list(dict.fromkeys(socks.values()))))
             for node, socks in by_node.items()}
    ran = srun_exec.run_all(argvs, srun_exec.srun_env(dict(os.environ)), timeout + srun_exec.REMOTE_TIMEOUT)
    for node, (rc, text, err) in ran.items():
        o = srun_exec.outcome(node, rc, text, err, timeout + srun_exec.REMOTE_TIMEOUT, "the debug server relay")
        answers: dict[str, bytes | str] = {}
        for ln in o.out.splitlines():
            try:
                d = json.loads(ln)
                answers[d["sock"]] = d["body"].encode("utf-8") if "body" in d else str(d["error"])
            except (ValueError, KeyError, TypeError, AttributeError):
                continue
        for r, p in by_node[node].items():
            out[r] = answers.get(p) or (o.error or f"the debug server relay on {node} said nothing about {p}")
    return out


def dump_everywhere(socks: dict[int, str], hosts: dict[int, tuple[str, str]], here: str, job_id: str | None,
                    timeout: float = DUMP_TIMEOUT) -> dict[int, dict | str]:
    """rank -> its Flight Recorder dump (parsed, as torch gives it), or why there is none."""
    out: dict[int, dict | str] = {}
    for r, got in ask_everywhere(socks, hosts, here, job_id, "fr_trace_json", timeout).items():
        if isinstance(got, str):
            out[r] = got
            continue
        try:
            out[r] = _fr_json(got)
        except DebugServerError as e:
            out[r] = str(e)
    return out


def take(ranks: list[int], socks: dict[int, str], hosts: dict[int, tuple[str, str]], here: str, job_id: str | None,
         world: int | None, no_socket: str, known: dict[str, list[int]] | None = None, timeout: float = DUMP_TIMEOUT
         ) -> tuple[dict[int, dict], dict[int, str]]:
    """Every rank's dump as the record keeps it: (rank -> normalised dump, rank -> "recorded" | "unavailable: why")
    over `ranks`; `no_socket` is why a rank without a socket has none; `known`: group name -> ranks, as the ranks
    said (see `memberships`)."""
    got = dump_everywhere({r: socks[r] for r in ranks if socks.get(r)}, hosts, here, job_id, timeout) if socks else {}
    dumps = normalise_all({r: d for r, d in got.items() if isinstance(d, dict)}, world, known)
    said = {r: "recorded" if r in dumps else f"unavailable: {got.get(r, no_socket)}" for r in ranks}
    return dumps, said
