"""Run-time settings: the placeholders recipes, strategies and the factory write on purpose ($HEAD_IP,
$IFACE_NAME, $PREFILL_NODE_1, ...), what each means and its default. Every format writes them its own way
(compose: a variable that names what to set, factory.render.compose); every other `$` is text: a recipe's
`${HOME}` or `$(cmd)` reaches vLLM as written, and never reads the operator's environment.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from factory.base.placeholders import PLACEHOLDER, Setting, known_setting

__all__ = ["PLACEHOLDER", "Setting", "known_setting", "placeholder_names", "setting"]


def setting(name: str) -> Setting:
    found = known_setting(name)
    if found is None:
        raise KeyError(f"${name} is not a setting the factory knows")
    return found


def _placeholders(text: str) -> Iterator[tuple[re.Match[str], str]]:
    """The known settings a text names, with where: every other `$NAME` is text."""
    for match in PLACEHOLDER.finditer(text):
        name = match.group("braced") or match.group("bare")
        if known_setting(name) is not None:
            yield match, name


def placeholder_names(texts: Iterable[str]) -> list[str]:
    """The settings the texts use, in order of first use."""
    names: dict[str, None] = {}
    for text in texts:
        for _, name in _placeholders(text):
            names[name] = None
    return list(names)


def example_value(value: str, examples: dict[str, str]) -> str:
    """A value with its placeholders filled from `examples` (else the default, else a stand-in): for
    checking a command with vLLM's parser without a cluster."""

    def fill(match: re.Match[str]) -> str:
        name = match.group("braced") or match.group("bare")
        known = known_setting(name)
        if known is None:
            return match.group(0)
        return examples.get(name) or known.default or "10.0.0.1"

    return PLACEHOLDER.sub(fill, value)


class MissingSetting(ValueError):
    """A setting with no default that the environment does not give."""


def host_value(value: str, environ: dict[str, str] | None) -> str:
    """A value with its settings filled as compose fills them: from the environment when set there (and not
    empty), else the default; a setting with no default and no value raises MissingSetting, naming it."""
    given = environ or {}

    def fill(match: re.Match[str]) -> str:
        name = match.group("braced") or match.group("bare")
        known = known_setting(name)
        if known is None:
            return match.group(0)
        found = given.get(name) or known.default
        if found is None:
            raise MissingSetting(f"set {name}: {known.why}")
        return found

    return PLACEHOLDER.sub(fill, value)
