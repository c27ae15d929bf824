"""Errors written for people: each names the file, the field, the bad value and what is valid."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from pathlib import Path


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
        where = ": ".join(part for part in (self.file, self.field) if part)
        lines = [f"{where}: {message}" if where else message]
        if self.value is not None:
            lines.append(f"  got: {self.value!r}")
        if self.valid is not None:
            close = difflib.get_close_matches(str(self.value), self.valid, n=1)
            if close:
                lines.append(f"  did you mean: {close[0]!r}?")
            lines.append(f"  valid: {', '.join(self.valid) if self.valid else '(none)'}")
        if self.hint:
            lines.append(f"  hint: {self.hint}")
        return "\n".join(lines)


class RefusedError(FactoryError):
    """The data says this combination cannot work (a known-bad pin, an unsupported platform)."""


class DockerError(FactoryError):
    """The Docker Engine, a build, a container or a registry failed; the message says which and why."""
