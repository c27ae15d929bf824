"""The grammar every name and value from a recipe must fit before it reaches a path, a tag, a service, an
environment variable or a command line: recipes come from other people, so nothing in one may escape the
output folder, add a line or a variable to a generated file, or smuggle a second flag into a command."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from factory.errors import InputError

# A name that becomes a path segment, a tag part or a compose project part: no separators, no dot-only names.
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
# A Hugging Face repository id (org/name), or an absolute path to a checkpoint on the host.
MODEL_ID = re.compile(r"^(?:[A-Za-z0-9][A-Za-z0-9._-]*/)?[A-Za-z0-9][A-Za-z0-9._-]*$|^/[A-Za-z0-9._/-]+$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# `--max-model-len auto` in one entry: a flag and one value that does not start with `-`, as the page's shell
# reads it (two words). The site's argv keeps it as one token; a deviation rule splits it in two.
FLAG_AND_VALUE = re.compile(r"^(?P<flag>--?[A-Za-z0-9][A-Za-z0-9_.-]*) (?P<value>[^\s-]\S*)$")


def check_name(value: str, path: Path, field: str, what: str) -> None:
    if not NAME.match(value) or set(value) == {"."}:
        raise InputError(
            f"not a usable {what}: letters, digits, '_', '.' and '-', starting with a letter or digit",
            file=path,
            field=field,
            value=value,
        )


def check_model_id(value: str, path: Path, field: str) -> None:
    if not MODEL_ID.match(value) or "/../" in f"{value}/" or value.startswith("../"):
        raise InputError(
            "not a model id: <org>/<name> of letters, digits, '.', '_' and '-' (or an absolute path)",
            file=path,
            field=field,
            value=value,
        )


def check_values(data: Any, path: Path, prefix: str = "") -> None:
    """Every flag list and environment map anywhere in the recipe: no control characters (a newline would
    add a line to a generated file), no whitespace in a flag's name, environment names as the shell knows
    them."""
    for field, value in _walk(data, prefix):
        leaf = field.rsplit(".", 1)[-1].split("[", 1)[0]
        if leaf.endswith("args") and isinstance(value, str):
            if CONTROL.search(value):
                raise InputError(
                    "a control character in a flag (a newline?)", file=path, field=field, value=value
                )
            flag_name = value.split("=", 1)[0]
            if value.startswith("-") and re.search(r"\s", flag_name) and not FLAG_AND_VALUE.match(value):
                raise InputError("whitespace in a flag's name", file=path, field=field, value=value)
        if leaf.endswith("env") and isinstance(value, dict):
            for name, text in value.items():
                if not ENV_NAME.match(str(name)):
                    raise InputError(
                        "not an environment variable name: letters, digits and '_', not first a digit",
                        file=path,
                        field=f"{field}.{name}",
                        value=name,
                    )
                if CONTROL.search(str(text)):
                    raise InputError(
                        "a control character in a value", file=path, field=f"{field}.{name}", value=text
                    )


def _walk(data: Any, prefix: str) -> Iterator[tuple[str, Any]]:
    if isinstance(data, dict):
        for key, value in data.items():
            field = f"{prefix}.{key}" if prefix else str(key)
            yield field, value
            yield from _walk(value, field)
    elif isinstance(data, list):
        for index, value in enumerate(data):
            field = f"{prefix}[{index}]"
            yield field, value
            yield from _walk(value, field)
