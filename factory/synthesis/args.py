"""Flag lists as the recipes site treats them: a flag and its value travel together, and when a flag
appears twice the later one wins (shell semantics), so later parts of a recipe override earlier ones."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Unit:
    """One flag with its value (if the next token is not itself a flag), or a lone positional token."""

    flag: str | None
    value: str | None = None

    def tokens(self) -> list[str]:
        if self.flag is None:
            return [self.value or ""]
        return [self.flag] if self.value is None else [self.flag, self.value]


def units(args: Sequence[str]) -> list[Unit]:
    """Pair each `-x`/`--x` token with the token after it, unless that one starts with `-` too."""
    found: list[Unit] = []
    count = len(args)
    index = 0
    while index < count:
        token = args[index]
        if token[:1] == "-":
            if index + 1 < count and args[index + 1][:1] != "-":
                found.append(Unit(token, args[index + 1]))
                index += 2
                continue
            found.append(Unit(token))
        else:
            found.append(Unit(None, token))
        index += 1
    return found


def dedupe(args: Sequence[str]) -> list[str]:
    """Keep the last occurrence of each flag (exact spelling), in its place; keep every positional."""
    parsed = units([arg for arg in args if arg])
    seen: set[str] = set()
    keep = [False] * len(parsed)
    for index in range(len(parsed) - 1, -1, -1):
        unit = parsed[index]
        if unit.flag is None:
            keep[index] = True
        elif unit.flag not in seen:
            seen.add(unit.flag)
            keep[index] = True
    return [token for unit, kept in zip(parsed, keep, strict=True) if kept for token in unit.tokens()]


def flag_value(args: Sequence[str], flag: str) -> str | None:
    """The value the last occurrence of `flag` carries (`--port 9000` or `--port=9000`, as argparse reads
    both; the last one wins, as in argparse), or None."""
    value = None
    for unit in units(args):
        if unit.flag == flag:
            value = unit.value
        elif unit.flag is not None and unit.flag.startswith(f"{flag}="):
            value = unit.flag[len(flag) + 1 :]
    return value


def int_value(text: str | None) -> int | None:
    """A number as vLLM's argparse reads it (`type=int`, Python's int()): `+8080` and ` 8080` are 8080;
    `²`, which str.isdigit() accepts, int() refuses, and so does vLLM. None for anything int() refuses."""
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return None
