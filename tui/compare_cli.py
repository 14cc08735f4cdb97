"""`ddptui compare A B [C...]` and `ddptui export RUN`: records read (events.jsonl only), their figures side by side
or their steps and events written as CSV / JSON; the Compare screen only on a terminal without --no-ui."""
from __future__ import annotations

import argparse
import gc
import json
import sys
from pathlib import Path

from . import compare_table, export_rows
from .compare_read import read_all
from .record_tables import NotARecord, check_record, export_record


def _fail(cmd: str, msg: str) -> int:
    print(f"ddptui: {cmd}: {msg}", file=sys.stderr)
    return 2


def compare_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="ddptui compare", description="compare run records side by side: pace, step "
                                "time p50/p95 per rank, samples/s, time to first step, losses at matching steps, "
                                "verdicts (the Compare screen on a terminal; a table with --no-ui or into a pipe)")
    p.add_argument("runs", nargs="+", metavar="RUN_DIR")
    p.add_argument("--no-ui", action="store_true", help="print the table (the default when stdout is no terminal)")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    args = p.parse_args(argv)
    if len(args.runs) < 2:
        return _fail("compare", "give at least two run records to compare")
    if not (args.no_ui or args.json) and sys.stdout.isatty() and sys.stdin.isatty():
        try:  # the screen reads the records itself, in a thread
            for r in args.runs:
                check_record(Path(r))
        except NotARecord as e:
            return _fail("compare", str(e))
        from .screens.compare import run_compare_app
        return run_compare_app([Path(r) for r in args.runs])
    gc.disable()  # a short-lived command building a few million small objects: collections would only cost
    try:
        runs = read_all(args.runs)
    except NotARecord as e:
        return _fail("compare", str(e))
    for figs, problems in runs:
        if problems:
            print(f"ddptui: compare: {figs.path}: " + "; ".join(problems), file=sys.stderr)
    c = compare_table.compare_figures([figs for figs, _ in runs])
    if args.json:
        json.dump(compare_table.to_json(c), sys.stdout, indent=2, allow_nan=False, default=str)
        sys.stdout.write("\n")
    else:
        for line in compare_table.table_lines(c):
            print(line)
    return 0


def export_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="ddptui export", description="write a run record's losses, step times and "
                                "samples/s per rank and step, and its events, as CSV or JSON (pandas.read_csv / "
                                "read_json load them as they are)")
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--format", choices=export_rows.FORMATS, default="csv")
    p.add_argument("--out", metavar="FILE", help="the steps table's file (the events go beside it as NAME-events.EXT);"
                   " default RUN_DIR/export/steps.EXT and events.EXT")
    args = p.parse_args(argv)
    try:
        steps, events, run = export_record(Path(args.run_dir), args.format, args.out)
    except NotARecord as e:
        return _fail("export", str(e))
    except OSError as e:
        return _fail("export", f"cannot write {e.filename or args.out}: {e.strerror or e}")
    if run.problems:
        print(f"ddptui: export: {run.path}: " + "; ".join(run.problems) + "; exported what is there", file=sys.stderr)
    print(f"steps: {steps}\nevents: {events}")
    return 1 if run.problems else 0
