"""A terminal that went away (SIGHUP: its window or SSH session closed): stop writing to it, so the run can still be
stopped and its summary written, with no traceback."""
from __future__ import annotations

import errno
import os
import termios

STD_FDS = (0, 1, 2)


def terminals(fds=STD_FDS) -> set[int]:
    """The fds that are terminals now: taken at start, because a hung-up terminal no longer says it is one."""
    return {fd for fd in fds if _isatty(fd)}


def _isatty(fd: int) -> bool:
    try:
        return os.isatty(fd)
    except OSError:
        return False


def hung_up(fd: int) -> bool:
    """A terminal that was hung up: the kernel answers EIO to everything on it (a live one answers, a file or pipe
    says ENOTTY)."""
    try:
        termios.tcgetattr(fd)
    except termios.error as e:
        return bool(e.args) and e.args[0] == errno.EIO
    return False


def detach(fds) -> list[int]:
    """Put /dev/null in place of each output among `fds` (1, 2) that is a hung-up terminal, so writes succeed and
    are dropped; returns every hung-up fd among `fds`. Input (0) is left as is: a hung-up terminal reads as
    end-of-file at once, and whoever reads it must stop (a pipe in its place would block a read already past its
    select for good). Safe in a signal handler."""
    gone = []
    for fd in sorted(fds):
        if not hung_up(fd):
            continue
        gone.append(fd)
        if fd != 0:
            try:
                to_devnull(fd)
            except OSError:
                pass
    return gone


def to_devnull(fd: int) -> None:
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, fd)
    finally:
        os.close(null)


def output_gone(stream, error: OSError) -> bool:
    """A write to `stream` failed because nobody can read it any more (a hung-up terminal: EIO; a pipe whose reader
    left: EPIPE): its fd now goes to /dev/null, so what is still buffered and what comes later is dropped quietly
    (the run record keeps every line). False for any other error."""
    if error.errno not in (errno.EIO, errno.EPIPE):
        return False
    try:
        to_devnull(stream.fileno())
    except (OSError, ValueError, AttributeError):
        pass
    return True
