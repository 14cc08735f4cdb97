"""`ddptui runs [--runs-dir D] [--json] [filters]` and `ddptui runs prune --keep N | --older-than AGE [--dry-run]`:
the records of a runs folder, newest first, and their pruning (headless: never imports textual)."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from ..runners.edge.runs_read import read_runs, remove_record
from ..runners.evidence import runs_list as rl


def _parser(prune: bool) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ddptui runs prune" if prune else "ddptui runs",
                                description="remove old records (never a live run's)" if prune else
                                "the run records of a runs folder, newest first")
    p.add_argument("--runs-dir", default=os.environ.get("DDPTUI_RUNS", "runs"), help="the runs folder (default runs,"
                   " or $DDPTUI_RUNS)")
    if prune:
        how = p.add_mutually_exclusive_group(required=True)
        how.add_argument("--keep", type=int, metavar="N", help="keep the N newest records, remove the others")
        how.add_argument("--older-than", metavar="AGE", help="remove records started more than AGE ago (7d, 12h, 2w)")
        p.add_argument("--dry-run", action="store_true", help="say what would be removed, remove nothing")
    else:
        p.add_argument("--json", action="store_true", help="one JSON array of the records")
        p.add_argument("--status", help="only records of this status (ok, failed, stalled, live, incomplete, ...)")
        p.add_argument("--profile", help="only records of this profile (a name or a glob: 'adhoc-*')")
        p.add_argument("--since", help="only records started since then: an age (7d, 12h) or a date (2026-12-01)")
    return p


def _fail(msg: str) -> int:
    print(f"ddptui runs: {msg}", file=sys.stderr)
    return 2


def main(argv: list[str]) -> int:
    prune = bool(argv) and argv[0] == "prune"
    args = _parser(prune).parse_args(argv[1:] if prune else argv)
    root = Path(args.runs_dir)
    if not root.is_dir():
        return _fail(f"{root}: no runs folder there (--runs-dir D, or $DDPTUI_RUNS)")
    now = time.time()
    if prune:
        return _prune(root, args, now)
    try:
        since = rl.parse_since(args.since, now) if args.since else None
    except ValueError as e:
        return _fail(f"--since: {e}")
    rows = rl.select(rl.rows_of(read_runs(root), now), args.status, args.profile, since)
    if args.json:
        print(json.dumps([r.to_json() for r in rows], indent=1))
        return 0
    if not rows:
        print(f"no run records in {root}" + (" that match" if args.status or args.profile or args.since else ""))
        return 0
    print("\n".join(rl.table_lines(rows)))
    for r in rows:  # the table cuts a verdict short: what could not be read, whole, one line a record
        if r.problem:
            print(f"ddptui runs: {r.path}: {r.problem}", file=sys.stderr)
    return 0


def _prune(root: Path, args, now: float) -> int:
    if args.keep is not None and args.keep < 0:
        return _fail("--keep: expected a count of 0 or more")
    try:
        older = rl.parse_age(args.older_than) if args.older_than else None
    except ValueError as e:
        return _fail(f"--older-than: {e}")
    choice = rl.to_prune(rl.rows_of(read_runs(root), now), now, args.keep, older)
    for r in choice.keep_held:
        print(f"kept {r.path}: {r.status} ({r.verdict})")
    failed = 0
    for r in choice.remove:
        if args.dry_run:
            print(f"would remove {r.path} ({rl.started_text(r.started)}, {r.status})")
            continue
        why = remove_record(Path(r.path))
        if why is None:
            print(f"removed {r.path} ({rl.started_text(r.started)}, {r.status})")
        else:
            failed += 1
            print(f"kept {r.path}: {why}")
    n = len(choice.remove)
    verb = "would remove" if args.dry_run else "removed"
    print(f"{verb} {n - failed} record{'s' if n - failed != 1 else ''}"
          + (f", kept {len(choice.keep_held) + failed} that may not go" if choice.keep_held or failed else ""))
    return 0
