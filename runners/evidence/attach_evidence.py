"""What an attached rank's own output says about its death: ranks without ddptui's hooks send no exception report."""
from __future__ import annotations

import re

_PREFIX = re.compile(r"^\[(?:rank|default)\d*\]:")  # torch's own per-rank prefix ("[rank1]: ...")
_TRACEBACK = "Traceback (most recent call last):"
_EXC = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Warning|Failure)|[A-Za-z_][\w.]*Error\b)"
                  r"(?::\s?(.*))?$")
_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+)')


def _strip(line: str) -> str:
    return _PREFIX.sub("", line, count=1).removeprefix(" ") if line.startswith("[") else line


def traceback_report(err_lines) -> dict | None:
    """{"type", "msg", "where", "tb"} (the injected exception report's shape) from the last uncaught Python traceback in
    a dead rank's last stderr lines: the traceback header, its frames, then `Type: message`; None when the lines end
    without one (a signal, an exit without an exception, a traceback cut before its last line)."""
    lines = [_strip(ln) for ln in err_lines]
    start = max((i for i, ln in enumerate(lines) if ln.strip() == _TRACEBACK), default=None)
    if start is None:
        return None
    tb = lines[start:]
    frames = [m for m in (_FRAME.match(ln) for ln in tb) if m]
    for ln in tb[1:]:
        m = _EXC.match(ln.strip())
        if m and not ln.startswith(" "):
            where = f"{frames[-1].group(1)}:{frames[-1].group(2)}" if frames else ""
            return {"type": m.group(1), "msg": (m.group(2) or "").strip(), "where": where, "tb": tb[-15:]}
    return None
