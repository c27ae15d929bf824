"""Serve arguments: assembled in the recipes site's order, where a later duplicate flag wins.

The site orders them base_args, variant, strategy and parallel size, strategy_overrides,
hardware_overrides, features. The image's entrypoint carries the parts that do not depend on the
strategy and the compose file appends the rest, so duplicates are resolved here, once, with the
site's precedence: whichever part comes later keeps the flag.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Flag:
    name: str  # as written, e.g. --no-enable-prefix-caching
    values: tuple[str, ...]
    part: str  # which part of the recipe set it: base, variant, strategy, hardware, feature, node

    @property
    def key(self) -> str:
        """`--no-x` and `--x` set one option; `--x=v` and `--x v` too."""
        bare = self.name.split("=", 1)[0]
        return "--" + bare.removeprefix("--").removeprefix("no-")

    def tokens(self) -> list[str]:
        return [self.name, *self.values]


def split_flags(args: Sequence[str], part: str) -> list[Flag]:
    """Group a flat argument list into flags with their values (tokens after a --flag that are not flags)."""
    flags: list[Flag] = []
    for token in args:
        if token.startswith("--") or not flags:
            flags.append(Flag(token, (), part))
        else:
            last = flags[-1]
            flags[-1] = Flag(last.name, (*last.values, token), last.part)
    return flags


def resolve(parts: Sequence[tuple[str, Sequence[str]]]) -> list[Flag]:
    """Flags of all parts in order, each option kept once: where the later part put it."""
    ordered: dict[str, Flag] = {}
    for part, args in parts:
        for flag in split_flags(args, part):
            ordered.pop(flag.key, None)
            ordered[flag.key] = flag
    return list(ordered.values())


def flatten(flags: Sequence[Flag]) -> list[str]:
    return [token for flag in flags for token in flag.tokens()]
