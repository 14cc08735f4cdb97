"""A rank's start-up phases as `phase` reports, so a rank not yet training says what it waits for."""
from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

import ddptui_postimport
import ddptui_report

# The words the engine accepts (runners/judge/ingest.py PHASES), in the order a rank goes through them
IMPORTING, SETTING_UP, RENDEZVOUS, FIRST_STEP = "importing torch", "setting up", "rendezvous", "waiting for first step"


def say(phase: str) -> None:
    ddptui_report.emit("phase", phase=phase)  # never raises


class _TorchImportStarts:
    """A sys.meta_path entry that only notices the program begin to import torch (seconds on a loaded machine) and
    says so once; it finds nothing itself. It leaves once torch is imported, not here: the import system is looping
    over sys.meta_path while it asks, and removing an entry then would make it skip the next finder."""

    def __init__(self) -> None:
        self.said = False

    def find_spec(self, name, path=None, target=None):
        if name == "torch" and not self.said:
            self.said = True
            say(IMPORTING)
        return None


def _remove(finder: Any) -> None:
    try:
        sys.meta_path.remove(finder)
    except ValueError:
        pass


def wrap_init(c10d: Any) -> Callable[[], None]:
    """Wrap distributed_c10d.init_process_group (post-import, before torch.distributed re-exports it): rendezvous
    while in it, waiting for the first step once it returned. Returns what undoes the wrapping."""
    orig = c10d.init_process_group

    @functools.wraps(orig)
    def init_process_group(*args, **kwargs):
        say(RENDEZVOUS)
        out = orig(*args, **kwargs)
        say(FIRST_STEP)
        return out

    c10d.init_process_group = init_process_group

    def undo() -> None:
        if c10d.init_process_group is init_process_group:
            c10d.init_process_group = orig

    return undo


def install(undo: list, rendezvous: bool = True) -> None:
    """Watch this rank's start-up; `undo` gets what takes it back (in a fork child that is not the rank).
    rendezvous=False (XLA: replicas rendezvous in PJRT, and each replica thread says it waits for its first step
    itself): only the import of torch, said by the process for every rank it hosts (its reports have no rank)."""

    def patch(c10d: Any) -> None:
        undo.append(wrap_init(c10d))

    if rendezvous:
        undo.append(ddptui_postimport.when_imported("torch.distributed.distributed_c10d", patch))
    if "torch" in sys.modules:
        return
    finder = _TorchImportStarts()

    def imported(mod: Any) -> None:
        _remove(finder)
        say(SETTING_UP)

    undo.append(ddptui_postimport.when_imported("torch", imported))
    sys.meta_path.insert(0, finder)  # in front of the post-import finder: it asks the others, this one included
    undo.append(functools.partial(_remove, finder))
