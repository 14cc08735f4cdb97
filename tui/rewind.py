"""A record's RunModel as it was after any of its events: folded from the nearest kept checkpoint, so stepping back
and forth through a long record never folds it from its start again."""
from __future__ import annotations

import bisect
import copy
from collections.abc import Sequence

from ..runners import events as ev
from .model import RunModel

CHECKPOINT_EVERY = 20_000  # events between two kept models: a copy costs ~0.2 s, folding 20,000 events ~0.1 s (docs/dashboard.md)


class Rewind:
    """model_at(i): a fresh RunModel that folded events[0..i]; a copy of the model is kept every `every` events the
    first time a fold passes it, and later folds start from the nearest one at or before i."""

    def __init__(self, events: Sequence[ev.Event], every: int = CHECKPOINT_EVERY) -> None:
        self.events, self.every = events, max(1, every)
        self._kept: dict[int, RunModel] = {}  # n -> the model that folded events[:n] (n a multiple of every)
        self._marks: list[int] = []  # sorted keys of _kept

    def model_at(self, index: int) -> RunModel:
        upto = max(0, min(len(self.events), index + 1))  # events folded: [0, upto)
        k = bisect.bisect_right(self._marks, upto) - 1
        if k >= 0:
            n = self._marks[k]
            model = copy.deepcopy(self._kept[n])
        else:
            n, model = 0, RunModel()
        while n < upto:
            end = min(upto, (n // self.every + 1) * self.every)
            model.apply(self.events[n:end])
            n = end
            if n % self.every == 0 and n not in self._kept:
                self._kept[n] = copy.deepcopy(model)
                bisect.insort(self._marks, n)
        model.take_changes()
        return model
