"""NO_COLOR that still reads: Textual's grey conversion keeps every text at least 4.5:1 against its background."""
from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache

from rich.color import Color as RichColor
from rich.segment import Segment
from rich.style import Style
from textual.color import Color
from textual.filter import LineFilter, Monochrome, monochrome_style

# WCAG 2's minimum contrast for normal text (AA). Textual's Monochrome turns a colour into the grey of its
# luminance: red text on the dark theme comes out #3b3b3b on #121212 (1.6:1), tracebacks and "failed" vanish.
TEXT_CONTRAST = 4.5
STRONG_CONTRAST = 10.0  # what a coloured word reads at without its colour: about the theme's own text (#e0e0e0)
_TEXT = re.compile(r"\w")  # a segment with a letter or digit is text; borders, bars and chart dots keep their grey


def _linear(c: int) -> float:
    v = c / 255
    return v / 12.92 if v <= 0.04045 else ((v + 0.055) / 1.055) ** 2.4


def _encoded(lin: float) -> int:
    v = lin * 12.92 if lin <= 0.0031308 else 1.055 * lin ** (1 / 2.4) - 0.055
    return max(0, min(255, round(v * 255)))


def luminance(grey: int) -> float:
    """WCAG relative luminance of the grey (grey, grey, grey)."""
    return _linear(grey)


def contrast(a: int, b: int) -> float:
    """WCAG contrast ratio of two greys (1 to 21)."""
    la, lb = sorted((luminance(a), luminance(b)))
    return (lb + 0.05) / (la + 0.05)


def readable_grey(fg: int, bg: int, want: float = TEXT_CONTRAST) -> int:
    """`fg` if it reads on `bg`, else the grey nearest to it that does: lighter on a dark background, darker on a
    light one (the other way when that side cannot reach `want`: the one of the two with more contrast)."""
    if contrast(fg, bg) >= want:
        return fg
    lb = luminance(bg)
    lighter = _encoded(min(1.0, want * (lb + 0.05) - 0.05))
    darker = _encoded(max(0.0, (lb + 0.05) / want - 0.05))
    lighter = next((g for g in range(lighter, 256) if contrast(g, bg) >= want), 255)  # rounding: the first that reads
    darker = next((g for g in range(darker, -1, -1) if contrast(g, bg) >= want), 0)
    options = [g for g in (lighter, darker) if contrast(g, bg) >= want]
    if not options:
        return max((lighter, darker), key=lambda g: contrast(g, bg))
    return min(options, key=lambda g: abs(g - fg))


def _grey(c: RichColor) -> int:
    return Color.from_rich_color(c).monochrome.r


def hue_meant(c: RichColor) -> str:
    """What a text colour said that its grey cannot: "" (a shade: muted, dimmed), "hue" (a colour: green ok, yellow
    warning, a chart series), "alarm" (red: failed, an error)."""
    h, s, v = Color.from_rich_color(c).hsv
    if s < 0.35 or v < 0.25:
        return ""
    return "alarm" if h * 360 <= 20 or h * 360 >= 330 else "hue"


@lru_cache(4096)
def readable_style(style: Style, background: Color) -> Style:
    """Textual's monochrome style for text, kept readable and its colour's meaning kept in weight:

    a shade is moved to the nearest grey that reads on its background; a colour becomes bold text as bright as
    the theme's; a red that was already bold (a status: failed, killed) becomes reverse."""
    mono = monochrome_style(style)
    if mono.color is None or mono.color.triplet is None:
        return mono
    bg = _grey(mono.bgcolor) if mono.bgcolor is not None and mono.bgcolor.triplet is not None else background.monochrome.r
    fg = _grey(mono.color)
    meant = hue_meant(style.color) if style.color is not None and style.color.triplet is not None else ""
    if not meant:
        g = readable_grey(fg, bg)
        return mono if g == fg else mono + Style(color=RichColor.from_rgb(g, g, g))
    g = readable_grey(fg, bg, STRONG_CONTRAST)
    if meant == "alarm" and style.bold:
        return mono + Style(color=RichColor.from_rgb(g, g, g), reverse=True)
    return mono + Style(color=RichColor.from_rgb(g, g, g), bold=True)


class ReadableMonochrome(Monochrome):
    """Monochrome (what Textual applies under NO_COLOR) whose text never falls below TEXT_CONTRAST."""

    def apply(self, segments: list[Segment], background: Color) -> list[Segment]:
        _Segment, text, readable, mono = Segment, _TEXT.search, readable_style, monochrome_style
        return [_Segment(t, (readable(s, background) if text(t) else mono(s)) if s is not None else None, None)
                for t, s, _ in segments]


READABLE = ReadableMonochrome()


def readable_filters(filters: Sequence[LineFilter]) -> list[LineFilter]:
    """The app's line filters with Textual's Monochrome (NO_COLOR on a truecolor theme) made readable."""
    return [READABLE if type(f) is Monochrome else f for f in filters]
