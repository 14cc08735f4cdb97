"""Pure decisions of NO_COLOR and terminal sizes: readable greys (tui/nocolor.py), status markers (tui/marks.py),
size classes (tui/sizes.py)."""
from __future__ import annotations

import pytest

from rich.color import Color as RichColor
from rich.segment import Segment
from rich.style import Style
from textual.color import Color
from textual.filter import ANSIToTruecolor, Monochrome, NoColor

from ddptui.tui.marks import mark, marked
from ddptui.tui.nocolor import (READABLE, STRONG_CONTRAST, TEXT_CONTRAST, contrast, hue_meant, readable_filters,
                                readable_grey, readable_style)
from ddptui.tui.sizes import size_classes

pytestmark = pytest.mark.any_python

DARK = Color(0x12, 0x12, 0x12)  # textual-dark's background
RED = "#ff0000"


def _grey(style: Style) -> int:
    return style.color.get_truecolor().red


def test_contrast_is_wcags():
    assert round(contrast(0, 255), 1) == 21.0 and contrast(0x80, 0x80) == 1.0
    assert contrast(0x3b, 0x12) < 2  # what Textual's Monochrome made of red text on the dark theme


def test_a_grey_that_reads_is_kept_and_one_that_does_not_moves_just_far_enough():
    assert readable_grey(0xe0, 0x12) == 0xe0
    g = readable_grey(0x3b, 0x12)
    assert contrast(g, 0x12) >= TEXT_CONTRAST and contrast(g - 1, 0x12) < TEXT_CONTRAST  # the nearest that reads
    light = readable_grey(0xd0, 0xf0)  # light theme: darker
    assert light < 0xd0 and contrast(light, 0xf0) >= TEXT_CONTRAST
    mid = readable_grey(0x80, 0x77)  # a mid-grey background: whichever side reaches it
    assert contrast(mid, 0x77) >= TEXT_CONTRAST


def test_what_a_colour_meant():
    assert hue_meant(RichColor.parse("#797979")) == ""  # $text-muted: a shade
    assert hue_meant(RichColor.parse(RED)) == "alarm" and hue_meant(RichColor.parse("#ba3c5b")) == "alarm"  # $error
    assert hue_meant(RichColor.parse("#ffa62b")) == "hue"  # $warning: bold, not reverse (a chart series, "replay")
    assert hue_meant(RichColor.parse("#4ebf71")) == "hue"  # green: ok


def test_readable_style_keeps_shades_lifts_colours_and_reverses_bold_alarms():
    muted = readable_style(Style(color=RichColor.parse("#3b3b3b")), DARK)
    assert contrast(_grey(muted), 0x12) >= TEXT_CONTRAST and not muted.bold and not muted.reverse
    red = readable_style(Style(color=RichColor.parse(RED)), DARK)  # stderr, a traceback's error line
    assert red.bold and not red.reverse and contrast(_grey(red), 0x12) >= STRONG_CONTRAST
    failed = readable_style(Style(color=RichColor.parse(RED), bold=True), DARK)  # "failed"
    assert failed.reverse and contrast(_grey(failed), 0x12) >= STRONG_CONTRAST
    already = readable_style(Style(color=RichColor.parse(RED), bold=True, reverse=True), DARK)
    assert already.reverse  # never un-reversed
    plain = Style(color=RichColor.parse("#e0e0e0"))
    assert readable_style(plain, DARK) == Monochrome().apply([Segment("x", plain)], DARK)[0].style


def test_the_filter_lifts_text_and_leaves_drawing_grey():
    dark_red = Style(color=RichColor.parse("#800000"), bgcolor=RichColor.parse("#121212"))
    text, border = READABLE.apply([Segment("failed", dark_red), Segment("━━━", dark_red)], DARK)
    assert contrast(_grey(text.style), 0x12) >= TEXT_CONTRAST
    assert _grey(border.style) == Color(0x80, 0, 0).monochrome.r  # borders, bars: Textual's own grey


def test_only_textuals_monochrome_is_replaced():
    ansi = ANSIToTruecolor(None)
    mono, none = Monochrome(), NoColor()
    assert readable_filters([ansi, mono]) == [ansi, READABLE]
    assert readable_filters([ansi, none]) == [ansi, none]  # an ANSI theme: the terminal's own colours, nothing to do
    assert readable_filters([ansi]) == [ansi]  # colour: untouched


def test_status_markers():
    assert marked("failed (exit 1)") == "✗ failed (exit 1)" and marked("failed (SIGABRT)") == "✗ failed (SIGABRT)"
    assert marked("exited ok") == "✓ exited ok" and marked("ok") == "✓ ok"
    assert marked("stalled") == "⚠ stalled" and marked("slow") == "⚠ slow"
    assert marked("killed") == "■ killed" and marked("stopped") == "■ stopped"
    assert marked("replicas differ") == "✗ replicas differ"
    assert marked("running") == "running" and marked("live") == "live" and mark("starting") == ""


def test_size_classes_at_the_three_sizes():
    on = lambda w, h: {k for k, v in size_classes(w, h).items() if v}  # noqa: E731
    assert on(80, 24) == {"-term-narrow", "-term-short"}
    assert on(160, 48) == set()
    assert on(220, 60) == {"-term-wide", "-term-tall"}


def test_wide_terminals_get_more_columns_when_that_saves_rows_of_panes():
    from ddptui.tui.sizes import wide_columns
    assert wide_columns(2, 3, 220) == 3  # 3 ranks: one row of three 73-column panes instead of two rows
    assert wide_columns(2, 4, 220) == 2  # 3 columns would still need two rows: no gain
    assert wide_columns(2, 3, 160) == 2  # not wide
    assert wide_columns(3, 8, 300) == 4  # 4 x 75 columns: two rows instead of three
    assert wide_columns(2, 3, 220, grouped=True) == 2  # by node: each row starts a node
    assert wide_columns(4, 16, 220) == 4  # 5 columns would be 44 wide
