"""The grammar every name and value from a recipe must fit before it reaches a path, a tag, a service, an
environment variable or a command line: recipes come from other people, so nothing in one may escape the
output folder, add a line or a variable to a generated file, or smuggle a second flag into a command."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from factory.base.errors import InputError
from factory.base.placeholders import PLACEHOLDER, known_setting

# A name is a path segment (255 bytes on Linux, with a hardware id beside it) and a Docker tag part (128).
MAX_NAME = 128
# Every grammar is matched whole (`fullmatch`): `$` also matches before a final newline, which let a name
# ending in "\n" through (issue 18). Classes are ASCII only, so a look-alike (a Kelvin sign that lower-cases
# to "k") never passes for a letter.
# A name that becomes a path segment, a tag part or a compose project part: no separators, no dot-only names.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
# A Hugging Face repository id (org/name), or an absolute path to a checkpoint on the host.
MODEL_ID = re.compile(r"(?:[A-Za-z0-9][A-Za-z0-9._-]*/)?[A-Za-z0-9][A-Za-z0-9._-]*|/[A-Za-z0-9._/-]+")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# C0, DEL, C1 and the Unicode line and paragraph separators: each ends a line or a comment for some reader
# of the generated files (YAML ends a comment at U+2028 too). Then what no YAML file may carry at all,
# written or escaped (compose and kustomize refuse it): surrogates and the noncharacters U+FFFE, U+FFFF.
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff\ufffe\uffff]")
# Page text and shell snippets the factory reads but never writes into a generated file: they may span lines.
PROSE = frozenset({"description", "guide", "command", "install", "curl", "note"})
# The same, newline and tab allowed.
PROSE_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff\ufffe\uffff]")
# The longest value that may reach a generated file (a flag, an environment value, a name): far above any
# upstream value (170 characters), far below the 65,535-byte line Docker's Dockerfile parser refuses.
MAX_VALUE = 4096
# All flags and environment values of one file together: the image's CMD is one Dockerfile line holding a
# command made of them (upstream's largest recipe has 3,273 characters of them).
MAX_COMMAND = 32 * 1024
MAX_PROSE = 256 * 1024
# Ports and counts the factory passes on: a port as TCP knows it, a parallel size no machine exceeds.
PORT_FLAGS = frozenset({"--port"})
COUNT_FLAGS = frozenset(
    {"--tensor-parallel-size", "-tp", "--pipeline-parallel-size", "-pp", "--data-parallel-size", "-dp"}
)
MAX_COUNT = 4096


def identity(name: str) -> str:
    """The one normalisation names are compared under (slugs, recipe and model ids, a name typed on the
    command line): ASCII capitals fold, nothing else does. `str.lower` alone would fold a Kelvin sign to
    "k", so a name nobody can write in a recipe would reach a recipe that exists."""
    return name.lower() if name.isascii() else name


# `--max-model-len auto` in one entry: a flag and one value that does not start with `-`, as the page's shell
# reads it (two words). The site's argv keeps it as one token; a deviation rule splits it in two.
FLAG_AND_VALUE = re.compile(r"(?P<flag>--?[A-Za-z0-9][A-Za-z0-9_.-]*) (?P<value>[^\s-]\S*)")


def check_name(value: str, path: Path, field: str, what: str) -> None:
    if not NAME.fullmatch(value) or set(value) == {"."} or len(value) > MAX_NAME:
        raise InputError(
            f"not a usable {what}: letters, digits, '_', '.' and '-', starting with a letter or digit,"
            f" at most {MAX_NAME} characters",
            file=path,
            field=field,
            value=value,
        )


def check_model_id(value: str, path: Path, field: str) -> None:
    if not MODEL_ID.fullmatch(value) or "/../" in f"{value}/" or value.startswith("../"):
        raise InputError(
            "not a model id: <org>/<name> of letters, digits, '.', '_' and '-' (or an absolute path)",
            file=path,
            field=field,
            value=value,
        )


def check_values(data: Any, path: Path, prefix: str = "") -> None:
    """Every string anywhere in the recipe, keys included: no control characters (a newline would add a line
    to a generated file; page text and shell snippets may span lines), no value too long for a Dockerfile
    line. Then, each value bounded: every flag list: no whitespace in a flag's name, ports and parallel sizes
    as vLLM reads them and in range; every environment map: names as the shell knows them."""
    fields = list(_walk(data, prefix))
    for field, value in fields:  # first: every later check reads values known to be short
        if isinstance(value, str):
            leaf = field.rsplit(".", 1)[-1].split("[", 1)[0]
            _check_text(value, path, field, prose=leaf in PROSE)
    command, over = 0, ""
    for field, value in fields:
        leaf = field.rsplit(".", 1)[-1].split("[", 1)[0]
        if leaf.endswith("args") and isinstance(value, list):
            _check_flags(value, path, field)
            command += sum(len(str(flag)) + 4 for flag in value)  # quoted, comma, space
        if leaf.endswith("env") and isinstance(value, dict):
            _check_env_names(value, path, field)
            command += sum(len(str(name)) + len(str(text)) + 4 for name, text in value.items())
        if command > MAX_COMMAND and not over:
            over = field  # reported once every single value passed (a too long one is named as such)
    if over:
        raise InputError(
            f"the flags and environment values add up to {command} characters: at most {MAX_COMMAND} in"
            " one file (the image's command is one Dockerfile line)",
            file=path,
            field=over,
        )


def _check_env_names(env: dict[Any, Any], path: Path, field: str) -> None:
    for name in env:
        if not ENV_NAME.fullmatch(str(name)):
            raise InputError(
                "not an environment variable name: letters, digits and '_', not first a digit",
                file=path,
                field=f"{field}.{name}",
                value=name,
            )


def _check_text(value: str, path: Path, field: str, prose: bool) -> None:
    control = (PROSE_CONTROL if prose else CONTROL).search(value)
    if control:
        raise InputError(
            f"a control character ({control.group()!r}) in a value: it would end a line of a generated file, "
            "or no YAML file may carry it",
            file=path,
            field=field,
            value=value,
        )
    limit = MAX_PROSE if prose else MAX_VALUE
    if len(value) > limit:
        raise InputError(
            f"a value of {len(value)} characters: at most {limit} here", file=path, field=field, value=value
        )


def _check_flags(flags: list[Any], path: Path, field: str) -> None:
    for index, flag in enumerate(flags):
        if not isinstance(flag, str):
            continue
        where = f"{field}[{index}]"
        together = FLAG_AND_VALUE.fullmatch(flag)
        if flag.startswith("-") and re.search(r"\s", flag.split("=", 1)[0]) and not together:
            raise InputError("whitespace in a flag's name", file=path, field=where, value=flag)
        name, equals, given = flag.partition("=")
        if together:
            name, equals, given = together["flag"], " ", together["value"]
        name = _as_vllm_names(name)
        if name not in PORT_FLAGS and name not in COUNT_FLAGS:
            continue
        if not equals:
            following = flags[index + 1] if index + 1 < len(flags) else None
            if not isinstance(following, str):
                raise InputError(f"{name} takes a value, and none follows it", file=path, field=where)
            given = following
        if name in PORT_FLAGS:
            _vllm_number(given, 1, 65535, path, where, f"a port for {name}")
        else:
            _vllm_number(given, 1, MAX_COUNT, path, where, f"a count for {name}")


def _as_vllm_names(name: str) -> str:
    """A flag as vLLM's FlexibleArgumentParser names it: `--tensor_parallel_size` is
    `--tensor-parallel-size` (single-dash short forms are left as they are)."""
    return name.replace("_", "-") if name.startswith("--") else name


def _vllm_number(text: str, low: int, high: int, path: Path, field: str, what: str) -> None:
    """A port or a count as vLLM reads it: its argparse types them `int`, Python's int(), which takes `+8000`,
    ` 8000` and `8_000` for 8000 and refuses `0x1f90`, `8000.0` and an empty value. So does this check, and
    the factory then uses the number as int() read it; a value int() refuses, or one out of range, is
    refused here rather than by vLLM at start. A setting the factory knows (`$ROUTER_PORT`) is given at start.
    (`text` is at most MAX_VALUE characters long, below int()'s 4,300 digits: checked first.)"""
    setting = PLACEHOLDER.fullmatch(text)
    if setting and known_setting(setting["braced"] or setting["bare"]) is not None:
        return
    try:
        number = int(text)
    except ValueError:
        raise InputError(
            f"not {what}: vLLM reads it with Python's int(), which refuses it (whole, {low}..{high})",
            file=path,
            field=field,
            value=text,
        ) from None
    if not low <= number <= high:
        raise InputError(f"not {what}: {low}..{high}", file=path, field=field, value=text)


def _walk(data: Any, prefix: str) -> Iterator[tuple[str, Any]]:
    if isinstance(data, dict):
        for key, value in data.items():
            field = f"{prefix}.{key}" if prefix else str(key)
            if isinstance(key, str):
                yield field, key
            yield field, value
            yield from _walk(value, field)
    elif isinstance(data, list):
        for index, value in enumerate(data):
            field = f"{prefix}[{index}]"
            yield field, value
            yield from _walk(value, field)
