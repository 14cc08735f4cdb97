"""Which rank a log folder belongs to when the launcher decides it at rendezvous: the first hello report read there says.

torchrun's c10d rendezvous gives node ranks in arrival order, so the plan can only guess the global rank behind
`<log-dir>/<run-id>/attempt_<n>/<local rank>/`. Both files of such a folder (stdout, stderr) are held back until the
rank's hello (the injected code's first line on stdout) names it; then they go on under that rank, in the order read.
Lines of a folder that never says hello (its program died before the injected code ran) go out under the guess once
they are HOLD_SECONDS old, or at the end: there is nothing better to attribute them by."""
from __future__ import annotations

from . import parse

HOLD_SECONDS = 5.0


def hello_rank(lines) -> int | None:
    """The rank a batch's hello report names, or None."""
    for ln in lines:
        if ln.startswith(parse.REPORT) and '"hello"' in ln:
            rep = parse.report(ln)
            if rep is not None and rep.get("k") == "hello" and isinstance(rep.get("r"), int):
                return rep["r"]
    return None


class RankLearner:
    """Per folder: the rank learned, or the batches held until it is (each with the guess it came with)."""

    def __init__(self, hold: float = HOLD_SECONDS) -> None:
        self.hold = hold
        self.learned: dict[str, int | None] = {}
        self._held: dict[str, list[tuple[float, int | None, str, list[str]]]] = {}
        self._guessed: set[str] = set()  # folders that went out under the guess, no hello read yet
        self.renamed: list[tuple[int | None, int]] = []  # (guess, rank) learned since `take_renamed`, guess != rank

    def feed(self, key: str, guess: int | None, stream: str, lines, mono: float) -> list[tuple[int | None, str, list]]:
        """A batch read from one file of folder `key`: the batches to read now, as (rank, stream, lines)."""
        rank = hello_rank(lines) if stream == "out" else None
        if key in self.learned:
            if rank is not None and key in self._guessed:  # a hello after its folder went out under the guess
                self._guessed.discard(key)
                self._rename(self.learned[key], rank)
                self.learned[key] = rank
            return [(self.learned[key], stream, lines)]
        if rank is None:
            self._held.setdefault(key, []).append((mono, guess, stream, lines))
            return self.due(mono)
        self.learned[key] = rank
        self._rename(guess, rank)
        held = self._held.pop(key, [])
        return [(rank, st, ls) for _, _, st, ls in held] + [(rank, stream, lines)] + self.due(mono)

    def _rename(self, guess: int | None, rank: int) -> None:
        if guess != rank:
            self.renamed.append((guess, rank))

    def take_renamed(self) -> list[tuple[int | None, int]]:
        """(guess, rank) of every folder whose hello named another rank than the plan guessed, since the last call:
        a ddptui that tracks only its own node's ranks renumbers their tracks by it (runners/judge/world_view.py)."""
        out, self.renamed = self.renamed, []
        return out

    def due(self, mono: float) -> list[tuple[int | None, str, list]]:
        """Batches held longer than `hold` (a folder that says no hello), under their guess."""
        out = []
        for key in [k for k, held in self._held.items() if mono - held[0][0] >= self.hold]:
            held = self._held.pop(key)
            out += [(guess, st, ls) for _, guess, st, ls in held]
            self.learned[key] = held[-1][1]  # later batches go out at once; a late hello still corrects it
            self._guessed.add(key)
        return out

    def release(self) -> list[tuple[int | None, str, list]]:
        """Everything still held, under its guess (the end of the run)."""
        out = [(guess, st, ls) for held in self._held.values() for _, guess, st, ls in held]
        self._held.clear()
        return out
