"""Errors written for people: each names the file, the field, the bad value and what is valid."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from pathlib import Path

# How much of a bad value an error quotes: enough to recognise it, never a page (an expanded alias bomb
# once printed a 312 MB line).
SHOWN = 200
_UNPRINTABLE = re.compile(r"[^\x20-\x7e]")


def shown(value: object) -> str:
    """A value as an error quotes it: repr'd, capped at SHOWN characters, and every character outside
    printable ASCII escaped, so a newline cannot start a line and a look-alike letter shows as what it is."""
    text = value if isinstance(value, str) else None
    if text is not None and len(text) > SHOWN:
        return f"{text[:SHOWN]!a}... ({len(text)} characters)"
    quoted = ascii(value)
    if len(quoted) > SHOWN:
        return f"{quoted[:SHOWN]}... ({len(quoted)} characters)"
    return quoted


def escaped(text: str) -> str:
    """A name (a field path, a file) as an error prints it: unprintable characters escaped, capped."""
    if len(text) > SHOWN:
        text = text[:SHOWN] + "..."
    return _UNPRINTABLE.sub(lambda match: ascii(match.group())[1:-1], text)


class FactoryError(Exception):
    """A problem the user can fix; the CLI prints it without a traceback and exits non-zero."""


class InputError(FactoryError):
    """Bad input data: a recipe, strategy, taxonomy or catalog file, or a command-line choice."""

    def __init__(
        self,
        message: str,
        *,
        file: Path | str | None = None,
        field: str | None = None,
        value: object = None,
        valid: Iterable[str] | None = None,
        hint: str | None = None,
    ) -> None:
        self.file = str(file) if file is not None else None
        self.field = field
        self.value = value
        self.valid = sorted(valid) if valid is not None else None
        self.hint = hint
        super().__init__(self._format(message))

    def _format(self, message: str) -> str:
        where = ": ".join(escaped(part) for part in (self.file, self.field) if part)
        lines = [f"{where}: {message}" if where else message]
        if self.value is not None:
            lines.append(f"  got: {shown(self.value)}")
        if self.valid is not None:
            close = difflib.get_close_matches(str(self.value)[:SHOWN], self.valid, n=1)
            if close:
                lines.append(f"  did you mean: {shown(close[0])}?")
            lines.append(f"  valid: {', '.join(map(escaped, self.valid)) if self.valid else '(none)'}")
        if self.hint:
            lines.append(f"  hint: {self.hint}")
        return "\n".join(lines)


class RefusedError(FactoryError):
    """The data says this combination cannot work (a known-bad pin, an unsupported platform)."""


class DockerError(FactoryError):
    """The Docker Engine, a build, a container or a registry failed; the message says which and why."""
