"""ddptui's heartbeat in the run record while it watches a batch job, and the batch script's watcher that cancels the
job once the beat stops (ddptui killed outright, its machine lost): no Slurm job trains on with nobody watching.

Why not Slurm's own: nothing ties a batch job to its submitter (`sbatch --wait` killed leaves the job running), and an
allocation's tie to srun/salloc (InactiveLimit) is off unless the cluster's admin set it. The run directory is on a
filesystem the nodes share already (the rank files are read from it). The watcher times the beat by its own clock
(the file changed or not), never by comparing the two machines' clocks."""
from __future__ import annotations

import os
import shlex
import threading
from pathlib import Path

PERIOD = 5.0  # seconds between beats, and between the watcher's looks
UNWATCHED_AFTER = 60  # seconds without a new beat after which the job cancels itself
ENV = "DDPTUI_UNWATCHED_AFTER"  # overrides UNWATCHED_AFTER (whole seconds >= 10)
MIN_AFTER = 10


def unwatched_after(environ=None) -> int:
    """The bound in force: $DDPTUI_UNWATCHED_AFTER when it is whole seconds >= 10, else UNWATCHED_AFTER."""
    value = (os.environ if environ is None else environ).get(ENV, "").strip()
    return int(value) if value.isdigit() and int(value) >= MIN_AFTER else UNWATCHED_AFTER


def path(run_dir: Path | str) -> Path:
    return Path(run_dir) / "slurm" / "heartbeat"


def watcher_lines(beat: Path | str, after: int) -> list[str]:
    """bash for the batch script, before its srun: a background loop that scancels the job when `beat` has not
    changed for `after` seconds; `$watcher` is its pid (the script ends it once srun returns)."""
    hb = shlex.quote(str(beat))
    look = int(PERIOD)
    return [
        f"# ddptui watches this job and rewrites its heartbeat every {look} s: {beat}",
        f"# When that has not changed for {after} s (ddptui was killed, or its machine lost), nobody watches the job:",
        f"# it cancels itself ({ENV} sets the seconds).",
        f"( last=; since=$SECONDS; while sleep {look}; do now=$(cat {hb} 2>/dev/null)",
        '  if [ "$now" != "$last" ]; then last=$now; since=$SECONDS',
        f"  elif [ $((SECONDS - since)) -ge {after} ]; then",
        f'    echo "ddptui: no heartbeat from ddptui for {after} s: nobody watches this job; scancel $SLURM_JOB_ID" >&2',
        '    scancel "$SLURM_JOB_ID"; since=$SECONDS; fi; done ) &',
        "watcher=$!",
    ]


class Heartbeat:
    """A thread rewriting the beat file every PERIOD s while ddptui lives: a counter and the wall time (whole file,
    by rename, so a reader never sees half of it)."""

    def __init__(self, beat: Path | str, period: float = PERIOD) -> None:
        self.path, self.period = Path(beat), period
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ddptui-heartbeat", daemon=True)
        self.count = 0
        self.error: str | None = None

    def start(self) -> Heartbeat:
        self.beat()  # the first before the job is submitted: the watcher starts from it
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def beat(self) -> None:
        import time
        self.count += 1
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(f"{self.count} {time.time():.3f} pid {os.getpid()}\n")
            os.replace(tmp, self.path)
            self.error = None
        except OSError as e:  # a filesystem hiccup: the next beat tries again (the bound allows several misses)
            self.error = f"{self.path}: {e.strerror or e}"

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            self.beat()
