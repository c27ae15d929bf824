"""How library code says what it is doing without printing: the caller passes a Reporter (the CLI passes
one that prints; tests and other callers may collect the lines or ignore them)."""

from __future__ import annotations

from collections.abc import Callable

Reporter = Callable[[str], None]


def silent(line: str) -> None:
    """The default Reporter: says nothing."""
