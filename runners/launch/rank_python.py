"""The interpreter a profile's ranks run on when it names none: $DDPTUI_PYTHON if set, else ddptui's own."""
from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping

ENV = "DDPTUI_PYTHON"


def default_python(environ: Mapping[str, str] | None = None) -> str:
    """Absolute path of the ranks' interpreter for a workload without `python`/`venv`.

    DDPTUI_PYTHON lets ddptui run on one Python (say 3.13, no torch) while the ranks run on another that has torch;
    a value with a `/` is a path, otherwise a name on PATH. Raises ValueError with one line when it names nothing
    runnable."""
    environ = os.environ if environ is None else environ
    value = environ.get(ENV, "")
    if not value:
        return sys.executable
    if os.sep in value or value.startswith("~"):
        exe = os.path.abspath(os.path.expanduser(value))
        if not os.path.isfile(exe):
            raise ValueError(f"{ENV}={value}: interpreter not found: {exe}")
        if not os.access(exe, os.X_OK):
            raise ValueError(f"{ENV}={value}: interpreter is not executable: {exe}")
        return exe
    found = shutil.which(value, path=environ.get("PATH"))
    if found is None:
        raise ValueError(f"{ENV}={value}: interpreter '{value}' not found on PATH")
    return os.path.abspath(found)
