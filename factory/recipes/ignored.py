"""Keys a recipe sets that the recipes site does not read: kept out of every command, listed per recipe.

Upstream adds keys every few weeks (a note in an override, a label inside `omni`), and the site renders a
recipe regardless. So here an unknown key in a schema-keyed mapping never stops a recipe: the schema keeps
it aside (factory.recipes.schema), and this module lists it with a "did you mean" where a known key is
close, and what it asked for where that is plain (a feature marked unsupported on some hardware). A key
of a per-hardware map that names no hardware, brand or generation is ignored the same way: the site looks
hardware up by name and never finds it. `--strict` (CI, on the project's own recipes) refuses them.
Free-form maps (environment, `docker_image` by brand, omni `axes`) are values, not schema: never listed.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from factory.base.errors import InputError
from factory.recipes.schema import Recipe

# Names come from other people's files: shown escaped, and cut, so no key can flood or forge a line.
MAX_NAME = 60
MAX_LISTED = 12


@dataclass(frozen=True)
class IgnoredKey:
    field: str  # the dotted path of the key, escaped and cut for printing
    why: str  # not in the schema here, or names no hardware
    suggestion: str | None = None  # a known key close to it
    asks: str | None = None  # what it asked for, where the factory can tell

    def line(self) -> str:
        text = f"{self.field}: {self.why}; ignored, as the site ignores it"
        if self.suggestion:
            text += f" (did you mean {self.suggestion!r}?)"
        if self.asks:
            text += f"; it asks {self.asks}, which is not applied, as on the site"
        return text


def shown(name: object) -> str:
    """A key as it may be printed: JSON-escaped (no control characters) and at most MAX_NAME long."""
    text = json.dumps(str(name), ensure_ascii=True)[1:-1]
    return text if len(text) <= MAX_NAME else text[: MAX_NAME - 3] + "..."


def ignored_keys(recipe: Recipe, hardware: Iterable[str]) -> tuple[IgnoredKey, ...]:
    """Every key of the recipe the site does not read, in file order."""
    return extra_keys(recipe) + tuple(_unknown_hardware(recipe, set(hardware)))


def extra_keys(model: BaseModel) -> tuple[IgnoredKey, ...]:
    """The keys of a recipe or a strategy file that no field of the schema here reads; the first few with a
    "did you mean" (only those are printed: a lookup for each of 200,000 keys took seconds)."""
    return tuple(
        IgnoredKey(
            field, WHY_UNKNOWN, _close(key, known, 0.75) if index < MAX_LISTED else None, _asks(key, value)
        )
        for index, (field, key, value, known) in enumerate(_extras(model, ""))
    )


def _close(key: object, known: list[str], cutoff: float) -> str | None:
    """The known name closest to `key` (compared as printed: its first MAX_NAME characters), if any is."""
    close = difflib.get_close_matches(str(key)[:MAX_NAME], known, n=1, cutoff=cutoff)
    return close[0] if close else None


def refuse(ignored: tuple[IgnoredKey, ...], path: Path) -> None:
    """--strict: the first ignored key is an error naming file, field and the near key."""
    if ignored:
        first = ignored[0]
        more = f" (and {len(ignored) - 1} more)" if len(ignored) > 1 else ""
        raise InputError(
            f"{first.why}{more}; --strict refuses keys the site would ignore",
            file=path,
            field=first.field,
            hint=f"did you mean {first.suggestion!r}?" if first.suggestion else None,
        )


def summary(recipe_id: str, ignored: tuple[IgnoredKey, ...]) -> str:
    """One warning line for a recipe: each ignored key (capped), with its suggestion and what it asked."""
    parts = [key.line() for key in ignored[:MAX_LISTED]]
    if len(ignored) > MAX_LISTED:
        parts.append(f"and {len(ignored) - MAX_LISTED} more")
    return f"ignored keys in {recipe_id}: " + "; ".join(parts)


def known_data(model: Any) -> Any:
    """The recipe as plain data without its ignored keys (what the grammar checks: only what is used)."""
    if isinstance(model, BaseModel):
        return {name: known_data(getattr(model, name)) for name in type(model).model_fields}
    if isinstance(model, dict):
        return {key: known_data(value) for key, value in model.items()}
    if isinstance(model, list):
        return [known_data(item) for item in model]
    return model


# (the printed field, the key, its value, the names known beside it)
Extra = tuple[str, object, object, list[str]]
WHY_UNKNOWN = "not in the recipes schema here"


def _extras(model: BaseModel, prefix: str) -> Iterator[Extra]:
    known = list(type(model).model_fields)
    for key, value in (model.model_extra or {}).items():
        yield (f"{prefix}.{shown(key)}" if prefix else shown(key)), key, value, known
    for name in known:
        yield from _within(getattr(model, name), f"{prefix}.{name}" if prefix else name)


def _within(value: Any, prefix: str) -> Iterator[Extra]:
    if isinstance(value, BaseModel):
        yield from _extras(value, prefix)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _within(item, f"{prefix}.{shown(key)}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _within(item, f"{prefix}[{index}]")


def _asks(key: object, value: object) -> str | None:
    """What an ignored key plainly asks for: `hardware: {h200: unsupported}` on a feature (the site reads
    `hardware` only on a feature's modes)."""
    if key == "hardware" and isinstance(value, dict):
        refused = sorted(shown(name) for name, state in value.items() if state == "unsupported")
        if refused:
            where = ", ".join(refused)
            return (
                f"that this be unsupported on {where} (the site reads `hardware` only on a feature's modes)"
            )
    return None


def _unknown_hardware(recipe: Recipe, hardware: set[str]) -> list[IgnoredKey]:
    """Keys of per-hardware maps that name no hardware profile, generation or brand."""
    # (where, the map, whether `default` is one of its keys)
    maps: list[tuple[str, dict[str, Any], bool]] = [("hardware_overrides", recipe.hardware_overrides, False)]
    maps += [(f"strategy_hardware.{shown(s)}", m, True) for s, m in recipe.strategy_hardware.items()]
    for name, override in recipe.strategy_overrides.items():
        where = f"strategy_overrides.{shown(name)}"
        maps.append((f"{where}.hardware_overrides", override.hardware_overrides, False))
        if isinstance(override.tp, dict):
            maps.append((f"{where}.tp", override.tp, True))
    for name, variant in recipe.variants.items():
        where = f"variants.{shown(name)}"
        maps.append((f"{where}.hardware_overrides", variant.hardware_overrides, False))
        if isinstance(variant.tp, dict):
            maps.append((f"{where}.tp", variant.tp, True))
    found: list[IgnoredKey] = []
    known = sorted(hardware)
    for where, mapping, with_default in maps:
        for key in mapping:
            if key not in hardware and not (with_default and key == "default"):
                close = _close(key, known, 0.6) if len(found) < MAX_LISTED else None
                why = "names no hardware profile, generation or brand"
                found.append(IgnoredKey(f"{where}.{shown(key)}", why, close))
    return found
