"""YAML scalars as the recipes site reads them (js-yaml 4): which plain scalars are numbers, booleans and
null, what a number too large for a double becomes, what a timestamp becomes, which tags yield no value the
site can print. factory.base.yamlfile's loader uses these in place of PyYAML's own (YAML 1.1's).
"""

from __future__ import annotations

import datetime
import math
import re
from typing import Any

import yaml

# The recipes site reads every file with js-yaml 4 (its default schema: YAML 1.2's core schema, timestamps
# and merge keys), PyYAML with YAML 1.1's: unquoted `yes` and `off` were booleans here, `1:30` was 90 and
# `010` was 8, where the site reads "yes", "off", "1:30" and 10. These are js-yaml 4.3.2's resolvers (read
# from its lib/type/*.js), in its order; timestamps and merge keys stay PyYAML's, which agree with it.
_JS_YAML_INT = r"^[-+]?(?:0b[01]+|0x[0-9a-fA-F]+|0o[0-7]+|[0-9]+)$"
_JS_YAML_SCALARS: list[tuple[str, str, list[str]]] = [
    ("tag:yaml.org,2002:null", r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""]),
    ("tag:yaml.org,2002:bool", r"^(?:true|True|TRUE|false|False|FALSE)$", list("tTfF")),
    ("tag:yaml.org,2002:int", _JS_YAML_INT, list("-+0123456789")),
    (
        "tag:yaml.org,2002:float",
        r"^(?:[-+]?[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?|\.[0-9]+(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$",
        list("-+0123456789."),
    ),
]
_KEPT = {"tag:yaml.org,2002:timestamp", "tag:yaml.org,2002:merge"}
_INT_BASES = {"0b": 2, "0o": 8, "0x": 16}


def js_yaml_resolvers() -> dict[Any, list[tuple[str, re.Pattern[str]]]]:
    resolvers: dict[Any, list[tuple[str, re.Pattern[str]]]] = {}
    for tag, pattern, first in _JS_YAML_SCALARS:
        for char in first:
            resolvers.setdefault(char or None, []).append((tag, re.compile(pattern)))
    for char, entries in yaml.SafeLoader.yaml_implicit_resolvers.items():
        for tag, regexp in entries:
            if tag in _KEPT:
                resolvers.setdefault(char, []).append((tag, regexp))
    return resolvers


# Digits past which an integer is beyond the largest double whatever they are (2^1024 has 309 decimal
# digits): js-yaml reads it as Infinity, which it does not take for a number, so the scalar stays text.
# Counted before Python converts anything (its int() refuses strings of over 4,300 decimal digits).
_DOUBLE_DIGITS = {2: 1025, 8: 342, 10: 310, 16: 257}


def _construct_int(loader: Any, node: yaml.ScalarNode) -> int | str:
    """js-yaml's integer: decimal whatever its leading zeros, 0b, 0o and 0x forms, a sign before any. An
    explicit `!!int` holds the same forms only (Python's int() would also take `1_000`, ` 5` or `+-5`). One
    past the largest double is text, as js-yaml keeps it (its integer and float types both refuse it)."""
    text = str(loader.construct_scalar(node))
    if not re.fullmatch(_JS_YAML_INT, text):
        raise ValueError(f"not an integer as YAML 1.2 writes one: {text[:40]!r}")
    sign = -1 if text.startswith("-") else 1
    digits = text[1:] if text.startswith(("+", "-")) else text
    base = _INT_BASES.get(digits[:2], 10)
    significant = (digits[2:] if base != 10 else digits).lstrip("0")
    if len(significant) >= _DOUBLE_DIGITS[base]:
        return text
    number = sign * int(significant or "0", base)
    try:
        float(number)
    except OverflowError:
        return text
    return number


def _construct_float(loader: Any, node: yaml.ScalarNode) -> float | str:
    """js-yaml's float: `.inf` and `.nan` as written; any other that overflows a double (`1e400`) is text, as
    js-yaml keeps it (it takes an infinite result for no number)."""
    text = str(loader.construct_scalar(node))
    special = text.lstrip("+-").lower()
    if special in (".inf", ".nan"):
        return math.nan if special == ".nan" else (-math.inf if text.startswith("-") else math.inf)
    number = float(text)
    return text if math.isinf(number) else number


def _construct_date(loader: Any, node: yaml.ScalarNode) -> str:
    """A timestamp as the site prints every one (build-recipes-api.mjs normalizeDates: the date of its UTC
    instant, YYYY-MM-DD): js-yaml makes a Date, the site replaces each by that text in every file."""
    when = loader.construct_yaml_timestamp(node)
    if isinstance(when, datetime.datetime):
        when = when.astimezone(datetime.UTC) if when.tzinfo is not None else when
        return when.date().isoformat()
    return str(when.isoformat())


def _no_scalar(loader: Any, node: yaml.Node) -> Any:
    """`!!binary`, `!!set`, `!!omap`, `!!pairs`: values that are no text, number or flag; the site prints each
    as "[object Object]". Refused where the value is, rather than read as something the site never saw."""
    raise ValueError("a value of this type is not text; the recipes site prints it as [object Object]")


# What each tag's scalar becomes, as the site reads it.
CONSTRUCTORS: dict[str, Any] = {
    "tag:yaml.org,2002:int": _construct_int,
    "tag:yaml.org,2002:float": _construct_float,
    "tag:yaml.org,2002:timestamp": _construct_date,
    **{f"tag:yaml.org,2002:{tag}": _no_scalar for tag in ("binary", "set", "omap", "pairs")},
}
