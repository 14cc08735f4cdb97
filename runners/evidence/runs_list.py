"""`ddptui runs`, decided from what was read of each record (runners/edge/runs_read.py reads it): a row per record,
newest first, the filters, which records a prune removes, and the table in words. Pure: no file, no clock."""
from __future__ import annotations

import fnmatch
import re
from dataclasses import asdict, dataclass
from datetime import datetime


@dataclass(frozen=True)
class Seen:
    """One record as read: `summary` and `profile` (summary.json's and profile.json's JSON, None when absent or not
    read), `first`/`last` (events.jsonl's first and last events, None when absent or not read), `state` and
    `state_line` (runners/edge/control.decide's, or `unreadable`), `problems` (what could not be read, in words: a cut
    file, a file kept from you), `mtime` (the folder's) and `owner` (its uid)."""

    path: str
    summary: dict | None
    first: dict | None
    last: dict | None
    state: str
    state_line: str
    problems: tuple[str, ...]
    mtime: float
    owner: int
    profile: dict | None = None

# an engine holds the record now, or may (its engine on another host): never removed
HELD = ("live", "busy", "two-engines", "foreign", "elsewhere")
REMOVABLE = ("finished", "dead")  # a run that ended (or whose engine died): its record may go
VERDICT_WIDTH = 72


@dataclass(frozen=True)
class RunRow:
    """One record as the list says it. `status`: the summary's (ok, failed, stalled, ...), else `live`, `incomplete`
    (its engine died), `unreadable`, `no events` (a folder with no events.jsonl yet); `state`: control.decide's;
    `problem`: what could not be read, in one line ("" when all was)."""

    name: str
    path: str
    started: float | None
    duration: float | None
    runner: str
    ranks: int | None
    nodes: int | None
    status: str
    verdict: str
    state: str
    problem: str = ""

    @property
    def held(self) -> bool:
        return self.state in HELD

    @property
    def when(self) -> float:
        return self.started if self.started is not None else 0.0

    def to_json(self) -> dict:
        return {**asdict(self), "live": self.held}


def verdict_of(summary: dict) -> str:
    """The run's one-line verdict from its summary.json: what went wrong first, else how it ended."""
    for e in summary.get("preflight") or []:
        if isinstance(e, dict) and e.get("message"):
            return f"preflight: {e['message']}"
    lost = summary.get("nodes_lost") or {}
    if isinstance(lost, dict) and lost:
        node, why = next(iter(lost.items()))
        return f"node {node} lost ({why.get('why', '?') if isinstance(why, dict) else why})"
    for key in ("crash", "hang", "divergence", "own_exit"):
        part = summary.get(key)
        if isinstance(part, dict) and part.get("text"):
            return str(part["text"])
    stall = summary.get("stall")
    if isinstance(stall, dict) and stall.get("reason"):
        return f"stalled: {stall['reason']}"
    slow = summary.get("slow")
    if isinstance(slow, dict):
        v = slow.get("verdict")
        text = slow.get("text") or (v.get("text") if isinstance(v, dict) else v)
        if text:
            return str(text)
    replica = summary.get("replica")
    if isinstance(replica, dict) and replica.get("status") not in (None, "identical", "skipped") and replica.get("text"):
        return str(replica["text"])
    status = summary.get("status", "?")
    steps = [r.get("steps") for r in (summary.get("ranks") or {}).values() if isinstance(r, dict)]
    done = max((s for s in steps if isinstance(s, int)), default=None)
    return f"{status}" + (f" after {done} steps" if done is not None else "")


def _nodes(summary: dict | None, profile: dict | None) -> int | None:
    ranks = (summary or {}).get("ranks") or {}
    names = {r.get("node") or r.get("host") for r in ranks.values() if isinstance(r, dict)} - {None}
    if names:
        return len(names)
    n = (profile or {}).get("nnodes")
    return n if isinstance(n, int) else None


def _num(d: dict | None, key: str) -> float | None:
    v = (d or {}).get(key)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def row_of(seen: Seen, now: float) -> RunRow:
    """A record's row (now: the clock, for a live run's duration so far)."""
    s, first, last = seen.summary, seen.first, seen.last
    folder = seen.path.rstrip("/").rsplit("/", 1)[-1]
    problem = "; ".join(seen.problems)
    if seen.state == "unreadable":
        why = seen.state_line.split(": ", 1)[-1]
        return RunRow(folder, seen.path, None, None, "?", None, None, "unreadable", why, seen.state, why)
    started = _num(first, "wall") if first and first.get("kind") == "run_started" else None
    name = str((s or {}).get("profile") or (first or {}).get("profile") or (seen.profile or {}).get("name") or folder)
    runner = str((s or {}).get("runner") or (first or {}).get("runner") or (seen.profile or {}).get("runner") or "?")
    ranks = (s or {}).get("world_size") or (first or {}).get("world_size")
    ranks = ranks if isinstance(ranks, int) else None
    nodes = _nodes(s, seen.profile)
    if s is not None:
        duration = _num(s, "duration_s")
        status = str(s.get("status", "?"))
        verdict = verdict_of(s)
        if seen.state in HELD:  # a requeued batch job's engine writing its next attempt
            status = "live"
    elif seen.state in HELD:
        duration = now - started if started is not None else None
        status = "live" if seen.state == "live" else seen.state
        verdict = seen.state_line.split(": ", 1)[-1]
    elif seen.state == "not-a-record":
        duration, status, verdict = None, "no events", seen.state_line.split(": ", 1)[-1]
    else:  # the engine died before the summary (killed), or the record was cut
        end = _num(last, "wall")
        duration = end - started if end is not None and started is not None else None
        status = "incomplete"
        verdict = seen.state_line.split(": ", 1)[-1]
    if problem:
        verdict = f"{problem}; {verdict}" if status in ("incomplete", "unreadable") or s is None else verdict
    return RunRow(name, seen.path, started if started is not None else seen.mtime or None, duration, runner, ranks,
                  nodes, status, verdict, seen.state, problem)


def rows_of(seen: list[Seen], now: float) -> list[RunRow]:
    """Every record's row, newest first."""
    return sorted((row_of(x, now) for x in seen), key=lambda r: (r.when, r.path), reverse=True)


# -- filters and prune -----------------------------------------------------------------------------------------------

_AGE = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])\Z")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_age(text: str) -> float:
    """'7d', '12h', '30m', '90s', '2w' in seconds; ValueError (its message one line) otherwise."""
    m = _AGE.match(text.strip())
    if not m:
        raise ValueError(f"expected an age such as 7d, 12h, 30m, 2w, got {text!r}")
    return float(m.group(1)) * _UNIT[m.group(2)]


def parse_since(text: str, now: float) -> float:
    """--since: an age ('7d': that long ago) or a date/time ('2026-12-01', '2026-12-01 08:00') in local time."""
    try:
        return now - parse_age(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        raise ValueError(f"expected an age (7d, 12h) or a date (2026-12-01[ 08:00]), got {text!r}") from None


def select(rows: list[RunRow], status: str | None = None, profile: str | None = None,
           since: float | None = None) -> list[RunRow]:
    """The rows a filter keeps: status (`live` for every run an engine holds now), profile (a name or a glob such as
    'adhoc-*'), started at or after `since`."""
    out = []
    for r in rows:
        if status is not None and r.status != status and not (status == "live" and r.held):
            continue
        if profile is not None and not fnmatch.fnmatchcase(r.name, profile):
            continue
        if since is not None and (r.started is None or r.started < since):
            continue
        out.append(r)
    return out


@dataclass(frozen=True)
class PruneChoice:
    remove: tuple[RunRow, ...]
    keep_held: tuple[RunRow, ...]  # would have gone, but an engine holds them (a live run) or they are not ours to read


def to_prune(rows: list[RunRow], now: float, keep: int | None = None, older_than: float | None = None) -> PruneChoice:
    """Which records a prune removes: past the `keep` newest, or started more than `older_than` seconds before `now`;
    never a record an engine holds, an unreadable one, or a folder that is no record yet."""
    newest = sorted(rows, key=lambda r: (r.when, r.path), reverse=True)
    gone: list[RunRow] = []
    held: list[RunRow] = []
    for i, r in enumerate(newest):
        old = (keep is not None and i >= keep) or (older_than is not None and r.when < now - older_than)
        if not old:
            continue
        (gone if r.state in REMOVABLE else held).append(r)
    return PruneChoice(tuple(gone), tuple(held))


# -- in words ------------------------------------------------------------------------------------------------------

def started_text(wall: float | None) -> str:
    return datetime.fromtimestamp(wall).strftime("%Y-%m-%d %H:%M:%S") if wall else "?"


def duration_text(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    s = int(round(seconds))
    if s < 60:
        return f"{seconds:.1f}s" if seconds < 10 else f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def world_text(r: RunRow) -> str:
    ranks = "?" if r.ranks is None else str(r.ranks)
    return f"{ranks}×{r.nodes}" if r.nodes is not None else ranks


def cut(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 1] + "…"


HEADER = ("STARTED", "DURATION", "NAME", "RUNNER", "RANKS", "STATUS", "VERDICT", "PATH")


def table_lines(rows: list[RunRow], verdict_width: int = VERDICT_WIDTH) -> list[str]:
    """The headless table: one line a record, newest first, columns as wide as their widest cell."""
    cells = [HEADER] + [(started_text(r.started), duration_text(r.duration), r.name, r.runner, world_text(r), r.status,
                         cut(r.verdict, verdict_width), r.path) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(HEADER) - 1)]
    return ["  ".join(c[i].ljust(widths[i]) for i in range(len(HEADER) - 1)) + "  " + c[-1] for c in cells]
