"""The error file torch's @record writes for a failed rank (torchrun's log names it), read back as an exception report."""
from __future__ import annotations

import json

from ..evidence.launcher_log import error_file_report


def recorded_error(path: str | None) -> dict | None:
    """The exception a rank recorded in its error file, or None when there is none or it cannot be read."""
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            return error_file_report(json.load(fh))
    except (OSError, ValueError):
        return None
