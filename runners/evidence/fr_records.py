"""Flight Recorder dumps in the form PyTorch's analyzer (torchfrtrace) reads: group names, memberships, normalised entries."""
from __future__ import annotations

import ast


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
            ranks = ranks_of(g.get("ranks")) if isinstance(g, dict) else None
            if ranks:
                out.setdefault(str(name), ranks)
    return out


def ranks_of(text) -> list[int] | None:
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
            got = ranks_of(cfg.get("ranks")) if isinstance(cfg, dict) else None
            if got:
                named.setdefault(name, got)
    out = {}
    for name, ranks in seen.items():
        if known and known.get(name):
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
            ranks = ranks_of(raw.get(name, {}).get("ranks")) if isinstance(raw.get(name), dict) else None
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


def why_no_socket(asked: bool, possible: bool) -> str:
    """Why a rank has no debug socket to dump: `asked` the profile's flight_recorder, `possible` not an XLA run."""
    if not asked:
        return "flight_recorder: false in the profile"
    if not possible:
        return "XLA has no Flight Recorder"
    return ("the rank started no debug server (it had not returned from init_process_group, or its torch has "
            "no _WorkerServer)")
