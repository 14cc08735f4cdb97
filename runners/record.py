"""The run record on disk: written as the run goes, so nothing already read is lost; read back for replay."""
from __future__ import annotations

import json
import os
import re
from datetime import datetime
from pathlib import Path
from typing import Iterator

from .events import Event, LogLines, from_json


def new_run_dir(runs_root: Path, profile_name: str) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    safe = re.sub(r"[^\w.-]+", "_", profile_name) or "run"
    base = Path(runs_root) / f"{stamp}-{safe}"
    path, n = base, 1
    while True:
        try:
            path.mkdir(parents=True)
            return path
        except FileExistsError:
            n += 1
            path = base.with_name(f"{base.name}-{n}")


def _stamp(wall: float) -> str:
    return datetime.fromtimestamp(wall).astimezone().isoformat(timespec="milliseconds")  # with its UTC offset


class RunRecord:
    def __init__(self, run_dir: Path) -> None:
        self.dir = Path(run_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._events = open(self.dir / "events.jsonl", "a", encoding="utf-8")
        self._logs: dict[int | None, object] = {}

    def write_json(self, name: str, data) -> Path:
        path = self.dir / name
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(data, indent=2, default=str), encoding="utf-8")
        os.replace(tmp, path)
        return path

    def _log(self, rank: int | None):
        f = self._logs.get(rank)
        if f is None:
            name = "launcher.log" if rank is None else f"rank{rank}.log"
            f = self._logs[rank] = open(self.dir / name, "a", encoding="utf-8", errors="replace")
        return f

    def lines(self, rank: int | None, stream: str, wall: float, lines) -> None:
        prefix = f"{_stamp(wall)} {stream} "
        self._log(rank).write(prefix + ("\n" + prefix).join(lines) + "\n")

    def event(self, ev: Event) -> None:
        self._events.write(json.dumps(ev.to_json(), default=str) + "\n")

    def flush(self) -> None:
        self._events.flush()
        for f in self._logs.values():
            f.flush()

    def close(self) -> None:
        self.flush()
        self._events.close()
        for f in self._logs.values():
            f.close()
        self._logs.clear()


_LOG_LINE = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}(?:[+-]\d\d:\d\d)?) (out|err) (.*)\Z", re.S)


def read_log(path: Path) -> Iterator[tuple[float, str, str]]:
    """(wall, stream, text) of every line of a rank<N>.log / launcher.log."""
    with open(path, encoding="utf-8", errors="replace") as f:
        for raw in f:
            m = _LOG_LINE.match(raw.rstrip("\n"))
            if m:
                yield datetime.fromisoformat(m.group(1)).timestamp(), m.group(2), m.group(3)


def replay_events(run_dir: Path) -> Iterator[Event]:
    """A finished (or crashed) run's events in time order, LogLines rebuilt from the rank logs."""
    run_dir = Path(run_dir)
    items: list[tuple[float, int, Event]] = []
    seq = 0
    ev_path = run_dir / "events.jsonl"
    if ev_path.exists():
        for raw in ev_path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                ev = from_json(json.loads(raw))
            except (ValueError, KeyError, TypeError):
                continue  # a line cut short by a crash
            items.append((getattr(ev, "wall", 0.0), seq, ev))
            seq += 1
    for log in sorted(run_dir.glob("rank*.log")) + [run_dir / "launcher.log"]:
        if not log.exists():
            continue
        rank = None if log.name == "launcher.log" else int(log.stem[4:])
        group: list[str] = []
        key = None
        for wall, stream, text in read_log(log):
            if key is not None and (wall, stream) != key:
                items.append((key[0], seq, LogLines(rank, key[1], key[0], 0.0, tuple(group))))
                seq += 1
                group = []
            key = (wall, stream)
            group.append(text)
        if group:
            items.append((key[0], seq, LogLines(rank, key[1], key[0], 0.0, tuple(group))))
            seq += 1
    items.sort(key=lambda x: (x[0], x[1]))
    for _, _, ev in items:
        yield ev


def load_summary(run_dir: Path) -> dict | None:
    p = Path(run_dir) / "summary.json"
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None

