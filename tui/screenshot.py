"""Where the screenshot key (and the command palette's Screenshot) saves its SVG: the run record, else the runs folder."""
from __future__ import annotations

import time
from pathlib import Path


def shot_folder(record: str | Path | None, runs_root: Path, cwd: Path) -> Path:
    """RUN/screenshots for a run's record; without one (the picker, a run not started yet) the runs folder when it
    exists, else the working folder."""
    if record:
        return Path(record) / "screenshots"
    return Path(runs_root) if Path(runs_root).is_dir() else Path(cwd)


def shot_name(now: float) -> str:
    """<time>.svg, to the millisecond: two presses in one second keep both."""
    return time.strftime("%Y%m%d-%H%M%S", time.localtime(now)) + f"-{int(now * 1000) % 1000:03d}.svg"


def record_of(app) -> str | None:
    """The folder of the run shown: a replay's record, a live run's once the engine made it."""
    source = getattr(app, "source", None)
    if source is None:
        return None
    if getattr(source, "kind", "") == "replay" and getattr(source, "run_dir", None):
        return str(source.run_dir)
    model = getattr(app, "model", None)
    return (model.run_dir or None) if model is not None else None


def save(app, filename: str | None = None, path: str | None = None) -> str | None:
    """Save the screen as SVG (App.save_screenshot) and say where; the working folder when the record is not
    writable. Returns the file's path, None when nothing could be written."""
    from .screens.picker import PickerScreen
    on_picker = isinstance(app.screen, PickerScreen)
    folder = Path(path) if path else shot_folder(None if on_picker else record_of(app), app.runs_root, Path.cwd())
    name = filename or shot_name(time.time())
    tried = []
    for where in (folder, Path.cwd()):
        try:
            where.mkdir(parents=True, exist_ok=True)
            saved = app.save_screenshot(name, str(where))
        except OSError as exc:
            tried.append(f"{where}: {exc.strerror or exc}")
            continue
        note = f" ({'; '.join(tried)})" if tried else ""
        app.notify(f"screenshot saved: {saved}{note}", title="screenshot", timeout=8, markup=False)
        return saved
    app.notify("screenshot not saved: " + "; ".join(tried), severity="error", timeout=10, markup=False)
    return None
