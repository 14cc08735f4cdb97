"""What `ddptui runs` reads of each record in a runs folder: summary.json, the first and last lines of events.jsonl
and whether an engine holds it (control.look), never the logs; and a record's removal for `runs prune`."""
from __future__ import annotations

import json
import os
import pwd
import shutil
from pathlib import Path

from ..evidence import slurm_state
from ..evidence.runs_list import Seen
from ..launch.plan import SlurmJob
from . import control
from .slurm_job import SlurmJobWatch

HEAD = 65536  # bytes read from the start of events.jsonl: its first line is run_started (a few hundred bytes)
TAIL = 65536  # bytes read from its end: the last line of a record that has no summary (its last event's time)


def _json(path: Path, problems: list[str]) -> dict | None:
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        problems.append(f"{path.name} unreadable ({e.strerror or e})")
        return None
    try:
        d = json.loads(text)
    except ValueError:
        problems.append(f"{path.name} is cut short or not JSON ({len(text)} bytes)")
        return None
    return d if isinstance(d, dict) else None


def _line(raw: bytes) -> dict | None:
    try:
        d = json.loads(raw)
    except ValueError:
        return None
    return d if isinstance(d, dict) else None


def _events(path: Path, want_last: bool, problems: list[str]) -> tuple[dict | None, dict | None]:
    """The first event, and the last complete one when asked (a record without its summary: live or cut)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None, None
    except OSError as e:
        problems.append(f"{path.name} unreadable ({e.strerror or e})")
        return None, None
    try:
        size = os.fstat(fd).st_size
        head = os.pread(fd, HEAD, 0)
        first = _line(head.split(b"\n", 1)[0]) if head else None
        if head and first is None:
            problems.append(f"{path.name}: its first line is not an event")
        if size <= HEAD:
            tail = head
        else:  # the last byte says whether the last line is whole; the last line itself only when asked
            tail = os.pread(fd, TAIL, size - TAIL) if want_last else os.pread(fd, 1, size - 1)
    finally:
        os.close(fd)
    if tail and not tail.endswith(b"\n"):
        problems.append(f"{path.name} ends in a cut line (the engine was killed while writing, or the file was cut)")
    last = None
    if want_last and tail:
        lines = tail.rstrip(b"\n").split(b"\n")
        complete = lines if tail.endswith(b"\n") else lines[:-1]
        for raw in reversed(complete[1:] if size > TAIL else complete):  # (a line the window starts inside: not whole)
            last = _line(raw)
            if last is not None:
                break
    return first, last


def read_record(run_dir: Path) -> Seen:
    """What the list needs of one record (a handful of small reads)."""
    run_dir = Path(run_dir)
    problems: list[str] = []
    try:
        st = os.stat(run_dir)
        mtime, owner = st.st_mtime, st.st_uid
    except OSError:
        mtime, owner = 0.0, -1
    if not os.access(run_dir, os.R_OK | os.X_OK):  # another user's record, kept from you: listed, not read
        return Seen(str(run_dir), None, None, None, "unreadable",
                    f"{run_dir}: the folder is unreadable (permission denied{_whose(owner)})", (), mtime, owner)
    summary = _json(run_dir / "summary.json", problems)
    try:
        state = control.decide(control.look(run_dir))
    except OSError as e:
        state = control.RecordState("unreadable", f"{run_dir}: {e.strerror or e}{_whose(owner)}")
    first, last = _events(run_dir / "events.jsonl", summary is None, problems)
    profile = _json(run_dir / "profile.json", problems) if summary is None or not summary.get("ranks") else None
    return Seen(str(run_dir), summary, first, last, state.state, state.line, tuple(problems), mtime, owner, profile)


def _whose(uid: int) -> str:
    if uid in (-1, os.getuid()):
        return ""
    try:
        return f": it belongs to {pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f": it belongs to uid {uid}"


def read_runs(runs_root: Path) -> list[Seen]:
    """Every folder of the runs folder that is, or looks like, a record (one scandir; the rest read per record)."""
    out = []
    try:
        entries = list(os.scandir(runs_root))
    except OSError:
        return []
    for entry in entries:
        if entry.name.startswith(".") or not entry.is_dir(follow_symlinks=False):
            continue
        out.append(read_record(Path(entry.path)))
    return out


def remove_record(run_dir: Path) -> str | None:
    """Remove a finished record; why not (in words) when its engine holds it now or it is no record."""
    run_dir = Path(run_dir)
    state = control.decide(control.look(run_dir, ping=False))
    if state.state not in ("finished", "dead"):
        return state.line
    if control.lock_held(run_dir):
        return f"{run_dir}: an engine holds it now"
    held = slurm_holds(run_dir)
    if held:
        return held
    try:
        shutil.rmtree(run_dir)
    except OSError as e:
        return f"{run_dir}: {e.strerror or e}"
    return None


def slurm_holds(run_dir: Path) -> str | None:
    """Why a finished record's Slurm job keeps it: Slurm still holds the job (a requeued batch job pending for its
    next attempt, whose engine writes into this record again); None when it does not, or no Slurm answers."""
    try:
        job = json.loads((run_dir / "summary.json").read_text()).get("job")
    except (OSError, ValueError, AttributeError):
        return None
    job_id = job.get("id") if isinstance(job, dict) else None
    if not isinstance(job_id, str) or not job_id:
        return None
    info = SlurmJobWatch(SlurmJob("sbatch", "srun", "", job_id)).poll()
    if info is None or info.state in slurm_state.ENDED:
        return None
    return f"{run_dir}: its Slurm job {job_id} is {info.state} (a requeued job's next attempt writes into it)"
