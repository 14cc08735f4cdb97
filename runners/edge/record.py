"""The run record on disk: written as the run goes, so nothing already read is lost; read back for replay."""
from __future__ import annotations

import functools
import json
import os
import pickle
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from itertools import compress, repeat
from operator import not_
from pathlib import Path
from typing import TextIO

from ..events import Event, LogLines, Progress, RunFinished, RunStarted, from_json
from ..evidence.eventcheck import problem, record_file_problem
from .progress_line import LINE_PATTERN, progress_line


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


def event_text(e: Event) -> str:
    """An event as its line of events.jsonl (without the newline): what `event_line` reads back."""
    return json.dumps(e.to_json(), default=str)


def _stamp(wall: float) -> str:
    return datetime.fromtimestamp(wall).astimezone().isoformat(timespec="milliseconds")  # with its UTC offset


class RunRecord:
    def __init__(self, run_dir: Path) -> None:
        self.dir = Path(run_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._events = open(self.dir / "events.jsonl", "a", encoding="utf-8")
        self._logs: dict[int | None, TextIO] = {}

    def write_json(self, name: str, data) -> Path:
        path = self.dir / name
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(data, indent=2, default=str), encoding="utf-8")
        os.replace(tmp, path)
        return path

    def write_fr(self, folder: str, rank: int, dump: dict) -> Path:
        """A rank's Flight Recorder dump next to its stacks: `folder`/fr/rank_<R>, one pickled dict per rank, the
        files PyTorch's analyzer reads (`torchfrtrace FOLDER/fr --prefix rank_`)."""
        path = self.dir / folder / "fr" / f"rank_{rank}"
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "wb") as f:
            pickle.dump(dump, f, protocol=4)
        os.replace(tmp, path)
        return path

    def stacks(self, n: int, attempt: int | None, why: str, rank_files: dict[int, str], fr: dict[int, dict],
               taken: dict) -> Path:
        """The run's `n`th collection of stacks, taken for `why`: stacks/<NN>-<why>/ (stacks/<NN>-attempt<K>-<why>/ in
        attempt K of a run that has attempts: `attempt` not None, the judge's Attempts.stacks_attempt) with rank<R>.txt
        (`rank_files`), each rank's Flight Recorder dump (`write_fr`) and stacks.json (`taken`). Returns the folder."""
        tag = f"attempt{attempt}-" if attempt is not None else ""
        folder = self.dir / "stacks" / f"{n:02d}-{tag}{why.replace(' ', '-')}"
        folder.mkdir(parents=True, exist_ok=True)
        for rank, text in rank_files.items():
            (folder / f"rank{rank}.txt").write_text(text, encoding="utf-8")
        rel = folder.relative_to(self.dir)
        for rank, dump in fr.items():
            self.write_fr(str(rel), rank, dump)
        self.write_json(str(rel / "stacks.json"), taken)
        return folder

    def verdict(self, folder: str, text: str, fix: str | None) -> None:
        """The hang verdict read from a collection of stacks, next to them."""
        (Path(folder) / "verdict.txt").write_text(text + "\n" + (f"fix: {fix}\n" if fix else ""), encoding="utf-8")

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
        self._events.write(event_text(ev) + "\n")

    def sizes(self, ranks: Iterable[int | None] | None = None) -> tuple[int, dict[int | None, int]]:
        """How far events.jsonl and the logs of `ranks` (None: every log) are written, in bytes, once flushed (what
        runners/edge/feed.py's frames say)."""
        logs = self._logs if ranks is None else {r: self._logs[r] for r in ranks if r in self._logs}
        return os.fstat(self._events.fileno()).st_size, {r: os.fstat(f.fileno()).st_size for r, f in logs.items()}

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
_RANK_LOG = re.compile(r"rank(\d+)\.log\Z")


def read_log_lines(path: Path) -> list[str]:
    """The lines of a rank<N>.log / launcher.log, without their newlines. Split on \n only: a rank's line may hold a
    \r (progress bars)."""
    lines = path.read_bytes().decode("utf-8", errors="replace").split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def log_line(raw: str) -> tuple[float, str, str] | None:
    """(wall, stream, text) of one line of a rank<N>.log / launcher.log, or None when it is not in that format."""
    m = _LOG_LINE.match(raw.rstrip("\n"))
    if m:
        wall = _wall(m.group(1))
        if wall is not None:
            return wall, m.group(2), m.group(3)
    return None


def log_groups(lines: Iterable[str]) -> tuple[list[tuple[float, str, list[str]]], int]:
    """The lines of a rank<N>.log / launcher.log (without their newlines) grouped as the engine's LogLines were:
    (wall, stream, texts) for each run of lines with one stamp and stream; and how many lines are not in that format.
    A line that starts with the previous line's `stamp stream ` is not matched again (a follower of 1,024 ranks reads
    ten thousand lines a second, a handful of stamps among them)."""
    groups: list[tuple[float, str, list[str]]] = []
    bad = 0
    prefix, texts, cut = "", [], 0  # the current group's `stamp stream `, its texts, the stamp's length (0: none)
    for raw in lines:
        if cut and raw.startswith(prefix):
            texts.append(raw[cut:])
            continue
        got = log_line(raw)
        if got is None:
            bad += 1
            continue
        wall, stream, text = got
        cut = len(raw) - len(text)
        if groups and groups[-1][0] == wall and groups[-1][1] == stream:  # the same time written as another stamp
            texts = groups[-1][2]
        else:
            texts = []
            groups.append((wall, stream, texts))
        prefix = raw[:cut]
        texts.append(text)
    return groups, bad


@functools.lru_cache(maxsize=4096)
def _wall(stamp: str) -> float | None:
    """A log line's time (one stamp serves every line of a read: parsed once); None for a well-shaped but impossible
    time (month 13)."""
    try:
        return datetime.fromisoformat(stamp).timestamp()
    except ValueError:
        return None


def _read_events(path: Path, notes: list[str]) -> list[Event]:
    """The events of events.jsonl that decode and type-check; what does not is counted in `notes`."""
    out: list[Event] = []
    scan_events(path, notes, out.append)
    return out


PROGRESS_TAIL = '"kind": "progress"}'  # how a Progress event's line ends (to_json puts the kind last)
# A Progress line as RunRecord.event writes it (json.dumps of to_json, the fields in the dataclass's order), read
# without decoding each line as JSON: a long run's record is mostly these (one a rank a step when steps take longer
# than the engine's turn), and json.loads takes 5 us a line. A line of another shape (an older record's, without
# samples or step_time) is decoded and checked as any other (event_line).
_PROGRESS_LINE = re.compile("^" + LINE_PATTERN + "$", re.M)  # JSON's own number grammar, as progress_line's: a line
# JSON refuses (a rank 00, a loss 1.) is refused here too, and its stretch decoded line by line
ATTEMPT_TAIL = '"kind": "attempt_started"}\n'  # how an AttemptStarted line ends


@dataclass
class ProgressColumns:
    """Progress events of a stretch of the record, one list a field, in record order (step_time False where the
    event did not carry it), and their loss points flat: each point's event (an index into the columns), step and
    loss (an event without points but with a loss and a step: that one point)."""

    rank: list[int]
    step: list[int | None]
    wall: list[float]
    samples: list[int | None]
    step_time: list
    point_event: list[int]
    point_step: list[int]
    point_loss: list[float]


def _numbers(col: tuple[str, ...], kind: type) -> list:
    """A column of numbers as json writes them (NaN, Infinity too), null as None; in C where none is null."""
    return list(map(kind, col)) if "null" not in col else [None if x == "null" else kind(x) for x in col]


def _columns(found: list[tuple[str, ...]]) -> ProgressColumns:
    """The pattern's matches as columns, converted a column at a time (ValueError for a value that is no number)."""
    rank, step, loss, wall, _, one_step, one_loss, many, samples, step_time = zip(*found, strict=True)
    steps = _numbers(step, int)
    if "" not in one_step:  # each event one loss point: the common shape of a long run's record
        ev_idx, p_step, p_loss = list(range(len(found))), list(map(int, one_step)), list(map(float, one_loss))
    else:
        ev_idx, p_step, p_loss = [], [], []
        for i, (s1, v1, more) in enumerate(zip(one_step, one_loss, many, strict=True)):
            if s1:
                pts = [(int(s1), float(v1))]
            elif more:
                pts = json.loads("[" + more + "]")
            elif loss[i] != "null" and steps[i] is not None:
                pts = [(steps[i], float(loss[i]))]
            else:
                continue
            for s, v in pts:
                ev_idx.append(i)
                p_step.append(int(s))
                p_loss.append(float(v))
    return ProgressColumns(list(map(int, rank)), steps, list(map(float, wall)), _numbers(samples, int),
                           _numbers(step_time, float), ev_idx, p_step, p_loss)


def event_columns(events: list[Progress]) -> ProgressColumns:
    """Progress events decoded one by one (and checked: event_line), as columns."""
    ev_idx, p_step, p_loss = [], [], []
    for i, e in enumerate(events):
        pts = e.losses or (((e.step, e.loss),) if e.loss is not None and e.step is not None else ())
        for s, v in pts:
            ev_idx.append(i)
            p_step.append(int(s))
            p_loss.append(float(v))
    return ProgressColumns([e.rank for e in events], [e.step for e in events], [e.wall for e in events],
                           [e.samples for e in events], [e.step_time for e in events], ev_idx, p_step, p_loss)


def scan_events(path: Path, notes: list[str], on_event: Callable[[Event], None],
                on_progress: Callable[[ProgressColumns], None] | None = None) -> None:
    """events.jsonl's events in order, each handed to `on_event`; with `on_progress`, the Progress events of each
    stretch between two attempts go to it instead, as columns (read by a pattern where the lines have the shape
    RunRecord writes, else decoded and checked as any event), after the stretch's other events. What does not decode
    or check is counted in `notes`, as replay says it."""
    text = path.read_bytes().decode("utf-8", errors="replace")
    cut = not text.endswith("\n") and bool(text)  # a last line without its newline was being written when ddptui stopped
    total = text.count("\n") + (1 if cut else 0)
    bad: list[tuple[int, str]] = []
    cuts, at = [], text.find(ATTEMPT_TAIL) if on_progress is not None else -1
    while at >= 0:  # each attempt's Progress events apart, its AttemptStarted first: they are that attempt's steps
        cuts.append(text.rfind("\n", 0, at) + 1)
        at = text.find(ATTEMPT_TAIL, at + 1)
    start, first_line = 0, 1
    for end in [*cuts, len(text)]:
        stretch = text[start:end]
        lines = stretch.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        slow: list[Progress] = []
        tails = 0
        rest: Iterable[tuple[int, str]] = enumerate(lines)
        if on_progress is not None:  # the Progress lines set apart in C: a long run's record is mostly these
            is_tail = list(map(str.endswith, lines, repeat(PROGRESS_TAIL)))
            tails = is_tail.count(True)
            rest = compress(rest, map(not_, is_tail))
        for n, line in rest:
            i = first_line + n
            if not line.strip():
                continue
            got = event_line(line)
            if got == NOT_JSON and cut and i == total:
                notes.append(f"events.jsonl: line {i}, the last, is cut short (ddptui stopped while writing it)")
            elif isinstance(got, str):
                bad.append((i, got))
            else:
                on_event(got)
        if tails and on_progress is not None:
            found = _PROGRESS_LINE.findall(stretch)
            columns = None
            if len(found) == tails:
                try:
                    columns = _columns(found)
                except (ValueError, TypeError):
                    columns = None
            if columns is None:  # a line of another shape among them: each decoded and checked on its own
                for n, line in enumerate(lines):
                    if line.endswith(PROGRESS_TAIL):
                        got = event_line(line)
                        if isinstance(got, Progress):
                            slow.append(got)
                        else:
                            bad.append((first_line + n, got if isinstance(got, str) else f"{got.kind} ends as progress"))
                columns = event_columns(slow)
            on_progress(columns)
        start, first_line = end, first_line + len(lines)
    if bad:
        bad.sort()
        (i, why), n = bad[0], len(bad)
        notes.append(f"events.jsonl: {n} malformed line{'s' if n > 1 else ''} left out "
                     f"(line {i}: {why}{'; ...' if n > 1 else ''})")


NOT_JSON = "not JSON"
BIG_LINE = 1 << 18  # characters: a line this long is decoded in steps (a 1,024-rank collectives event of a record
# written before its `members` table: 1.3 MB; ~40 kB since)
_WS = re.compile(r"[ \t\n\r]*")


def _ws(s: str, i: int) -> int:
    """Where the JSON whitespace at s[i] ends."""
    m = _WS.match(s, i)
    return m.end() if m else i
_FLAT_ARRAY = re.compile(r"\[[^\[\]{}\"]*\]")  # no nested array, object or string: its first ] ends it
_scan = json.JSONDecoder().scan_once  # type: ignore[attr-defined]  # one JSON value at an index: (value, end)


def loads_in_steps(line: str):
    """json.loads(line), the same value or the same error; a long line's objects (three levels down) are decoded one
    member at a time, so that no single call holds the interpreter for the whole line (json.loads of a 1.3 MB line
    is 25 ms in which a viewer's screen cannot repaint), and a flat array of numbers met again in the line (a process
    group's members, once per rank) is decoded once and copied."""
    if len(line) < BIG_LINE:
        # the decoder's scanner straight away, without json.loads's layers of Python around it (a quarter of the
        # cost of a Progress line); a line the engine wrote has no whitespace at its start
        try:
            value, end = _scan(line, 0)
            if end == len(line) or _ws(line, end) == len(line):
                return value
        except (ValueError, StopIteration):
            pass
        return json.loads(line)  # the same value or the same error, as json says it
    try:
        i = _ws(line, 0)
        if line[i:i + 1] != "{":
            raise ValueError(i)
        value, i = _object_in_steps(line, i, 3, {})
        if _ws(line, i) != len(line):
            raise ValueError(i)
        return value
    except (ValueError, StopIteration, IndexError):
        return json.loads(line)  # what is wrong with it, said as json says it


def _object_in_steps(s: str, i: int, depth: int, seen: dict[str, list]) -> tuple[dict, int]:
    """The JSON object at s[i] ("{"), its members that are objects decoded the same way `depth` levels down; `seen`:
    the flat arrays decoded so far in this line, by their text."""
    out: dict = {}
    i = _ws(s, i + 1)
    if s[i:i + 1] == "}":
        return out, i + 1
    while True:
        if s[i:i + 1] != '"':
            raise ValueError(i)
        key, i = json.decoder.scanstring(s, i + 1)  # type: ignore[attr-defined]  # the C one where there is one
        i = _ws(s, i)
        if s[i:i + 1] != ":":
            raise ValueError(i)
        i = _ws(s, i + 1)
        c = s[i:i + 1]
        if depth and c == "{":
            out[key], i = _object_in_steps(s, i, depth - 1, seen)
        elif c == "[" and (flat := _FLAT_ARRAY.match(s, i)) is not None and flat.end() - i > 64:
            text = flat.group()
            got = seen.get(text)
            if got is None:
                got, end = _scan(s, i)
                if end != flat.end():
                    raise ValueError(i)
                seen[text] = got
            out[key], i = list(got), flat.end()
        else:
            out[key], i = _scan(s, i)
        i = _ws(s, i)
        c = s[i:i + 1]
        if c == "}":
            return out, i + 1
        if c != ",":
            raise ValueError(i)
        i = _ws(s, i + 1)


def event_line(line: str) -> Event | str:
    """The event one line of events.jsonl holds, or why it holds none (NOT_JSON: it does not decode)."""
    if line.endswith(PROGRESS_TAIL) and (progress := progress_line(line)) is not None:
        return progress
    try:
        d = loads_in_steps(line)
    except RecursionError:  # the decoder's nesting is bounded by the interpreter's recursion limit
        return "JSON nested too deep"
    except ValueError:
        return NOT_JSON
    try:
        return _decode_problem(d)
    except RecursionError:
        return "a value nested too deep"


def _decode_problem(d) -> Event | str:
    """The event a decoded JSON line holds, or why it holds none."""
    kind = d.get("kind") if isinstance(d, dict) else None
    if not isinstance(kind, str):
        return "not an event (no \"kind\")"
    try:
        e = from_json(d)
    except KeyError:
        return f"unknown event kind {kind!r}"
    except (TypeError, ValueError) as exc:
        return f"{kind}: {exc}"
    return problem(e) or e


def replay_events(run_dir: Path, problems: list[str] | None = None) -> Iterator[Event]:
    """A finished (or crashed) run's events in time order, LogLines rebuilt from the rank logs.

    Whatever cannot be read is left out, and said in `problems` (one phrase each): malformed or cut lines, stray
    files, a record without its summary (its ddptui was killed, or still runs)."""
    run_dir = Path(run_dir)
    notes = problems if problems is not None else []
    items: list[tuple[float, int, Event]] = []
    ev_path = run_dir / "events.jsonl"
    if ev_path.exists():
        for seq, e in enumerate(_read_events(ev_path, notes)):
            items.append((getattr(e, "wall", 0.0), seq, e))
    seq = len(items)
    logs: list[tuple[int | None, Path]] = []
    for log in sorted(run_dir.glob("rank*.log")):
        m = _RANK_LOG.match(log.name)
        if m:
            logs.append((int(m.group(1)), log))
        else:
            notes.append(f"{log.name} left out (not rank<N>.log)")
    if (run_dir / "launcher.log").exists():
        logs.append((None, run_dir / "launcher.log"))
    for rank, log in logs:
        groups, skipped = log_groups(read_log_lines(log))
        for wall, stream, texts in groups:
            items.append((wall, seq, LogLines(rank, stream, wall, 0.0, tuple(texts))))
            seq += 1
        if skipped:
            notes.append(f"{log.name}: {skipped} line{'s' if skipped > 1 else ''} not in the record's "
                         "format left out")
    kinds = {type(e) for _, _, e in items}
    if RunStarted not in kinds:
        notes.append("events.jsonl has no run_started event")
    if not (run_dir / "summary.json").exists():
        notes.append("no summary.json: the run did not finish (its ddptui was killed, or is still running)")
    else:
        why = _file_problem(run_dir / "summary.json")
        if why:
            notes.append(why)
        elif RunFinished not in kinds:
            notes.append("events.jsonl has no run_finished event")
    if (run_dir / "plan.json").exists():  # an attached job's record has none
        why = _file_problem(run_dir / "plan.json")
        if why:
            notes.append(why)
    items.sort(key=lambda x: (x[0], x[1]))
    for _, _, e in items:
        yield e


def _file_problem(path: Path) -> str | None:
    """What is wrong with one of the record's JSON files (summary.json, plan.json), in words, or None."""
    try:
        d = json.loads(path.read_bytes().decode("utf-8", errors="replace"))
    except OSError as e:
        return f"{path.name} is unreadable ({e.strerror or e})"
    except RecursionError:
        return f"{path.name} is malformed (JSON nested too deep)"
    except ValueError:
        return f"{path.name} is malformed (not JSON)"
    try:
        why = record_file_problem(path.name, d)
    except RecursionError:
        why = "a value nested too deep"
    return f"{path.name} is malformed ({why})" if why else None


