"""The moment now, as each input to the judge carries it (the judge itself never reads a clock)."""
from __future__ import annotations

import time

from ..judge.run_state import Now


def now() -> Now:
    return Now(time.monotonic(), time.time())
