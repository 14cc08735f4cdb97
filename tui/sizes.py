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
