"""Search of log lines (the `/` key): a query's words (text or `re:` pattern, rank and stream scopes) and its matches."""
from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

STREAMS = {"out": "out", "stdout": "out", "err": "err", "stderr": "err", "ddptui": "ddptui"}
_SCOPE = re.compile(r"(?:^|(?<=\s))(rank|stream):(\S*)(?=\s|$)")
SYNTAX = "text, or re:PATTERN; rank:N and stream:out|err|ddptui narrow it"


class QueryError(ValueError):
    """A query that cannot search: its one line says why (shown in the search box)."""


@dataclass(frozen=True)
class Query:
    """What a search looks for: `pattern` (case-insensitive; a plain text is escaped), on the lines of `ranks`
    (None: every rank and the launcher) and `streams` ("out", "err", "ddptui": lines not from a rank)."""

    text: str
    pattern: re.Pattern
    ranks: frozenset[int] | None = None
    streams: frozenset[str] | None = None

    def allows(self, rank: int | None, stream: str) -> bool:
        """Whether a line of this rank (None: the launcher's or ddptui's own) and stream is searched at all."""
        if self.ranks is not None and rank not in self.ranks:
            return False
        if self.streams is None:
            return True
        return (rank is None and "ddptui" in self.streams) or stream in self.streams

    def spans(self, text: str) -> list[tuple[int, int]]:
        """(start, end) of every match in `text`; a query of scopes alone matches whole lines."""
        if not self.pattern.pattern:
            return [(0, len(text))] if text else [(0, 0)]
        return [(m.start(), m.end()) for m in self.pattern.finditer(text) if m.end() > m.start()]


def parse_query(raw: str) -> Query | None:
    """The query typed in the search box; None when it is empty; QueryError (one line) when it cannot search."""
    ranks: set[int] = set()
    streams: set[str] = set()
    for kind, value in _SCOPE.findall(raw):
        if kind == "rank":
            if not value.isdigit():
                raise QueryError(f"rank:{value}: a rank is a number (rank:0)")
            ranks.add(int(value))
        else:
            if value.lower() not in STREAMS:
                raise QueryError(f"stream:{value}: a stream is out, err or ddptui")
            streams.add(STREAMS[value.lower()])
    text = _SCOPE.sub("", raw).strip()
    if not text and not ranks and not streams:
        return None
    if text.startswith("re:"):
        try:
            pattern = re.compile(text[3:], re.IGNORECASE)
        except re.error as e:
            raise QueryError(f"bad regular expression: {e}") from None
    else:
        pattern = re.compile(re.escape(text), re.IGNORECASE)
    return Query(raw, pattern, frozenset(ranks) if ranks else None, frozenset(streams) if streams else None)


Match = tuple[int, int, int]  # (row, start, end) in the rows searched


def occurrences(rows: Sequence, query: Query, text_of: Callable[[object], tuple[int | None, str, str]],
                first: int = 0) -> list[Match]:
    """Every match of `query` in `rows`, in order: text_of(row) gives (rank, stream, text); rows are numbered from
    `first` (a bounded buffer numbers its rows since the run began, so a match keeps its number as rows leave)."""
    out: list[Match] = []
    for i, row in enumerate(rows):
        rank, stream, text = text_of(row)
        if query.allows(rank, stream):
            out.extend((first + i, s, e) for s, e in query.spans(text))
    return out


def step_match(found: Sequence[Match], current: tuple[int, int] | None, forward: bool) -> int | None:
    """The index in `found` of the match after (forward) or before `current` (row, start), wrapping around; from no
    current match, the first (forward) or the last. None when nothing matches."""
    if not found:
        return None
    if current is None:
        return 0 if forward else len(found) - 1
    keys = [(r, s) for r, s, _ in found]
    if forward:
        return next((i for i, k in enumerate(keys) if k > current), 0)
    return next((i for i in range(len(keys) - 1, -1, -1) if keys[i] < current), len(found) - 1)
