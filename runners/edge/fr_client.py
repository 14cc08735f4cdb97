"""The ranks' Flight Recorder dumps and tracebacks through torch's per-rank debug server, here or on their node."""
from __future__ import annotations

import ast
import json
import os
import shutil
from pathlib import Path

from ddptui.runners.edge import remote_stacks
from ddptui.runners.edge.fr_relay import DebugServerError, post, post_all

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
        raise DebugServerError(f"the Flight Recorder dump is not JSON ({e})")
    if not isinstance(d, dict) or not isinstance(d.get("entries", []), list):
        raise DebugServerError("the Flight Recorder dump has no entries list")
    return d


def ask_everywhere(socks: dict[int, str], hosts: dict[int, tuple[str, str]], here: str, job_id: str | None,
                   handler: str, timeout: float = DUMP_TIMEOUT) -> dict[int, bytes | str]:
    """rank -> the body its debug server gave for `handler`, or why there is none (a str), every rank at the same
    time: ranks on this machine through their socket, the others through `srun --overlap` in the job on their node
    (one srun per node, running fr_relay.py there). hosts: rank -> (host, node) from the hellos."""
    local = {r: p for r, p in socks.items() if remote_stacks.is_local(hosts.get(r, ("", ""))[0], here)}
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
    # the node's own python3: a rank's interpreter may not be on it under that path, python3 is on any node that
    # runs Python ranks
    argvs = {node: remote_stacks.srun_argv(exe, job_id, node, relay_argv("python3", handler, timeout,
                                                                          list(dict.fromkeys(socks.values()))))
             for node, socks in by_node.items()}
    ran = remote_stacks.run_all(argvs, remote_stacks.srun_env(dict(os.environ)), timeout + remote_stacks.REMOTE_TIMEOUT)
    for node, (rc, text, err) in ran.items():
        o = remote_stacks.outcome(node, rc, text, err, timeout + remote_stacks.REMOTE_TIMEOUT, "the debug server relay")
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


# ---- the dump in the form PyTorch's analyzer (torchfrtrace) reads ------------------------------------------------
def _int(v):
    if isinstance(v, str) and v.lstrip("-").isdigit():
        return int(v)
    return v


def status_names(dump: dict) -> dict[str, str]:
    """pg_status key -> the group's name. Flight Recorder keys pg_status by the rank's own group id (`pg_id`, counted
    per process: a rank outside a subgroup skips it), the entries and the other ranks by the group's name; the
    entries carry both. The default group is id 0, name "0"."""
    out = {"0": "0"}
    for e in dump.get("entries") or []:
        pg = e.get("process_group") if isinstance(e, dict) else None
        if isinstance(pg, (list, tuple)) and len(pg) == 2 and e.get("pg_id") is not None:
            out[str(e["pg_id"])] = str(pg[0])
    return out


def groups_of(dump: dict) -> dict[str, str]:
    """Process group name -> description, from the entries (gloo's pg_config is keyed '' whatever the group), a
    pg_config keyed by real names (NCCL's) and the pg_status keys the entries name."""
    names: dict[str, str] = {}
    for e in dump.get("entries") or []:
        pg = e.get("process_group") if isinstance(e, dict) else None
        if isinstance(pg, (list, tuple)) and len(pg) == 2:
            names.setdefault(str(pg[0]), str(pg[1]))
    for key, cfg in (dump.get("pg_config") or {}).items():
        if key != "" and isinstance(cfg, dict):
            names.setdefault(str(key), str(cfg.get("desc", "undefined")))
    ids = status_names(dump)
    for key in dump.get("pg_status") or {}:
        if str(key) in ids:
            names.setdefault(ids[str(key)], "default_pg" if ids[str(key)] == "0" else "undefined")
    return names


def known_groups(collectives: dict[int, dict]) -> dict[str, list[int]]:
    """Group name -> ranks from the ranks' live `coll` reports (rank -> RankTrack.collectives: pg -> {"ranks"...})."""
    out: dict[str, list[int]] = {}
    for groups in collectives.values():
        for name, g in (groups or {}).items():
            ranks = _ranks(g.get("ranks")) if isinstance(g, dict) else None
            if ranks:
                out.setdefault(str(name), ranks)
    return out


def _ranks(text) -> list[int] | None:
    try:
        v = ast.literal_eval(text) if isinstance(text, str) else text
    except (ValueError, SyntaxError):
        return None
    return sorted(int(x) for x in v) if isinstance(v, (list, tuple)) and v else None


def memberships(dumps: dict[int, dict], world: int | None = None, known: dict[str, list[int]] | None = None
                ) -> dict[str, list[int]]:
    """Group name -> its ranks over every rank's dump: what the ranks said of their groups themselves (`known`: the
    live `coll` reports, read from torch's own group table), else a pg_config keyed by the group's name (NCCL's),
    else every rank for the default group when the world size is known, else the ranks whose dump names the group
    (gloo's dumps do not say a subgroup's members: a member that never reached the group's first collective is
    missing from them)."""
    named: dict[str, list[int]] = {}
    seen: dict[str, set[int]] = {}
    descs: dict[str, str] = {}
    for rank, d in dumps.items():
        for name, desc in groups_of(d).items():
            seen.setdefault(name, set()).add(rank)
            descs.setdefault(name, desc)
            cfg = (d.get("pg_config") or {}).get(name)
            got = _ranks(cfg.get("ranks")) if isinstance(cfg, dict) else None
            if got:
                named.setdefault(name, got)
    out = {}
    for name, ranks in seen.items():
        if (known or {}).get(name):
            out[name] = sorted(int(r) for r in known[name])
        elif name in named:
            out[name] = named[name]
        elif descs[name] == "default_pg" and world:
            out[name] = list(range(world))
        else:
            out[name] = sorted(ranks)
    return out


def normalise(dump: dict, members: dict[str, list[int]] | None = None) -> dict:
    """A dump as torch gave it, in the form torchfrtrace's loader and builder take: pg_config keyed by the groups'
    real names (as the entries name them) with their description and ranks (`members`: name -> ranks, see
    `memberships`); pg_status keyed by the same names (`status_names`; a group id no entry names goes under
    "pg_id <id>"), its numbers as ints; everything else kept as it was."""
    out = dict(dump)
    raw = dump.get("pg_config") or {}
    cfg = {}
    for name, desc in groups_of(dump).items():
        ranks = (members or {}).get(name)
        if ranks is None:
            ranks = _ranks(raw.get(name, {}).get("ranks")) if isinstance(raw.get(name), dict) else None
        cfg[name] = {"name": name, "desc": desc, "ranks": str(list(ranks or []))}
    out["pg_config"] = cfg
    ids = status_names(dump)
    out["pg_status"] = {ids.get(str(k), f"pg_id {k}"): ({kk: _int(vv) for kk, vv in v.items()} if isinstance(v, dict) else v)
                        for k, v in (dump.get("pg_status") or {}).items()}
    return out


def normalise_all(dumps: dict[int, dict], world: int | None = None, known: dict[str, list[int]] | None = None
                  ) -> dict[int, dict]:
    """Every rank's dump normalised with the same group memberships (torchfrtrace checks they agree)."""
    members = memberships(dumps, world, known)
    return {r: normalise(d, members) for r, d in dumps.items()}



# ---- one collection for the record -------------------------------------------------------------------------------
def why_no_socket(asked: bool, possible: bool) -> str:
    """Why a rank has no debug socket to dump: `asked` the profile's flight_recorder, `possible` not an XLA run."""
    if not asked:
        return "flight_recorder: false in the profile"
    if not possible:
        return "XLA has no Flight Recorder"
    return ("the rank started no debug server (it had not returned from init_process_group, or its torch has "
            "no _WorkerServer)")


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
