"""A run record read for compare and export (events.jsonl through runners.edge.record's reader, no rank log), and its
steps and events tables written beside it: the I/O both the commands and the dashboard's screens use."""
from __future__ import annotations

from pathlib import Path

from ..runners.edge.record import scan_events
from . import export_rows
from .run_series import RunFolder, RunSeries


class NotARecord(Exception):
    """The one line a command prints for a path that is not a run record."""


def check_record(run_dir: Path) -> None:
    """NotARecord for a path that is no record."""
    if not (run_dir / "events.jsonl").is_file():
        raise NotARecord(f"{run_dir}: not a ddptui run record (no events.jsonl)")


def read_run(path: str | Path) -> RunSeries:
    """A record's steps, losses and events (runners.edge.record's reader); NotARecord for a path that is none."""
    run_dir = Path(path)
    check_record(run_dir)
    problems: list[str] = []
    folder = RunFolder(run_dir.resolve().name or str(run_dir), str(run_dir))
    try:
        scan_events(run_dir / "events.jsonl", problems, folder.event, folder.progress)
    except OSError as e:
        raise NotARecord(f"{run_dir}: cannot read events.jsonl: {e.strerror or e}") from None
    run = folder.result()
    run.problems = problems
    return run


def export_paths(run_dir: Path, fmt: str, out: str | None) -> tuple[Path, Path]:
    """Where the steps and the events tables go: OUT and OUT's name + '-events' beside it, or RUN/export/."""
    if out:
        steps = Path(out)
        return steps, steps.with_name(f"{steps.stem}-events{steps.suffix or '.' + fmt}")
    return run_dir / "export" / f"steps.{fmt}", run_dir / "export" / f"events.{fmt}"


def export_record(run_dir: Path, fmt: str, out: str | None = None) -> tuple[Path, Path, RunSeries]:
    """Write a record's steps and events tables (export_rows); their paths and the run read. NotARecord, OSError."""
    run = read_run(run_dir)
    steps_path, events_path = export_paths(Path(run_dir), fmt, out)
    steps_path.parent.mkdir(parents=True, exist_ok=True)
    for path, rows, cols in ((steps_path, export_rows.step_rows(run), export_rows.STEP_COLUMNS),
                             (events_path, export_rows.event_rows(run), export_rows.EVENT_COLUMNS)):
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "w", encoding="utf-8", newline="") as f:
            export_rows.write(rows, cols, fmt, f)
        tmp.replace(path)
    return steps_path, events_path, run
