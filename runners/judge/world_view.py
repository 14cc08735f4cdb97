"""A ddptui that sees only part of the world: its ranks by their global numbers, the others named unseen, not healthy."""
from __future__ import annotations

from typing import TYPE_CHECKING

from .. import events as ev
from ..evidence.words import ranks_text, unseen_words

if TYPE_CHECKING:
    from .run_state import RunState

UNSEEN_WHY = "runs on another node, not watched by this ddptui: that node's own ddptui watches it"


def renumber(s: RunState, guess: int | None, rank: int) -> None:
    """A folder the plan numbered `guess` said hello as `rank`. A ddptui that tracks every rank has both tracks already
    (the lines simply go under `rank`); one that tracks only its node's ranks moves the guessed track to `rank`."""
    if not s.partial or rank in s.tracks or not isinstance(rank, int) or rank < 0:
        return
    free = [r for r in s.tracks if r not in s.said_hello]  # still under the plan's number: no hello claimed them
    if not free:
        return
    was = guess if guess in free else min(free)
    t = s.tracks.pop(was)
    t.rank = rank
    s.tracks[rank] = t
    s.renumbered[was] = rank
    s.emit(ev.RankRenumbered(was, rank, s.wall))


def hello(s: RunState, rank: int, world) -> None:
    """A rank's hello was read: its number is its own word. Once every rank here said hello, the others are named."""
    s.said_hello.add(rank)
    if not s.partial:
        return
    if isinstance(world, int) and not isinstance(world, bool) and world > max(s.tracks) and world != s.world:
        s.world = world  # an elastic --nnodes MIN:MAX: the world the rendezvous made
    if not s.unseen_said and all(r in s.said_hello for r in s.tracks):
        announce(s)


def announce(s: RunState) -> None:
    """Say once which ranks this ddptui watches and which it cannot see, and mark those unseen (never healthy)."""
    unseen = s.unseen()
    if s.unseen_said or not unseen:
        return
    s.unseen_said = True
    s.say(f"ddptui: this ddptui watches {ranks_text(s.tracks)} of a {s.world}-rank job (its own node's torchrun "
          f"agent); {unseen_words(unseen)}: each node's ddptui watches its own ranks")
    for r in unseen:
        s.emit(ev.RankState(r, ev.RankStatus.UNSEEN, UNSEEN_WHY, s.wall))
