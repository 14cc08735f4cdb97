"""A profile problem, located: which file, line and column, and which field."""
from __future__ import annotations

from dataclasses import dataclass


class ProfileError(Exception):
    """A profile problem, located: ``str(err)`` is one line ``where: field 'x': message``."""

    def __init__(self, file: str | None, line: int | None, col: int | None, field: str | None,
                 message: str, *, show_field: bool = True):
        self.file, self.line, self.col, self.field = file, line, col, field
        self.message = " ".join(message.split())  # always one line
        self._show_field = show_field and field is not None
        super().__init__(str(self))

    @property
    def where(self) -> str:
        if self.file is None:
            return ""
        return f"{self.file}:{self.line}:{self.col}" if self.line is not None else self.file

    def __str__(self) -> str:
        body = f"field '{self.field}': {self.message}" if self._show_field else self.message
        return f"{self.where}: {body}" if self.where else body


@dataclass(frozen=True)
class _Loc:
    file: str
    line: int | None = None
    col: int | None = None

    def error(self, field: str | None, message: str, *, show_field: bool = True) -> ProfileError:
        return ProfileError(self.file, self.line, self.col, field, message, show_field=show_field)
