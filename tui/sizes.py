"""Terminal size classes on the app, so app.tcss compacts the screens at 80x24 and spreads them out at 220x60."""
from __future__ import annotations

NARROW_BELOW = 120  # columns: the picker's list narrows, its fields share one row
WIDE_FROM = 200
SHORT_BELOW = 36  # rows: inputs and buttons lose their borders, margins go
TALL_FROM = 56

CLASSES = ("-term-narrow", "-term-wide", "-term-short", "-term-tall")


def size_classes(width: int, height: int) -> dict[str, bool]:
    """Which of CLASSES a terminal of this size gets (Textual's own breakpoints reach only the first screen:
    a pushed screen gets its classes at the next resize, so they are set on the app, every screen's ancestor)."""
    return {"-term-narrow": width < NARROW_BELOW, "-term-wide": width >= WIDE_FROM,
            "-term-short": height < SHORT_BELOW, "-term-tall": height >= TALL_FROM}


PANE_WIDE = 72  # columns a pane keeps when a wide terminal gets more columns of panes: a stamp and ~60 characters


def wide_columns(cols: int, ranks: int, width: int, grouped: bool = False) -> int:
    """Columns of the rank grid on a terminal `width` wide: more than `cols` (RunModel.columns) when it is wide
    and that saves rows of panes (taller panes, more of each log) while each stays PANE_WIDE; a grid grouped by
    node keeps its columns (each row begins with a node's first rank)."""
    if grouped or width < WIDE_FROM:
        return cols
    best = cols
    for c in range(cols + 1, ranks + 1):
        if width // c < PANE_WIDE:
            break
        if -(-ranks // c) < -(-ranks // best):
            best = c
    return best
