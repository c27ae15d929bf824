"""Block YAML for Kubernetes objects (mappings, lists, strings, integers, booleans), written directly.

PyYAML's representer was most of the time `generate` spent on manifests (tens of thousands on the upstream
corpus); these objects need none of its generality. A string is written plain only when YAML cannot read
it as anything else, else as a JSON string (valid YAML); tests load every manifest back and compare.
The writer is one recursive function with the scalars it has spelled remembered: a manifest repeats the
same keys and values (names, labels, probe fields) hundreds of times, and over the corpus's million lines
the calls were the cost, not the text.
"""

from __future__ import annotations

import json
import re
from typing import Any

# Plain only: letters, digits and . _ / - after a letter, `/` or a leading `-`/`--` then a letter.
_PLAIN = re.compile(r"(?:--?[A-Za-z]|[A-Za-z_/])[A-Za-z0-9_./-]*")
# Words YAML 1.1 reads as booleans or null.
_SPECIAL = {"y", "n", "yes", "no", "on", "off", "true", "false", "null"}
_SPELLED: dict[str, str] = {}  # string -> how it is written (bounded: a cache, not a record)
_SPELLED_MAX = 200_000


def _double_quoted(value: str) -> str:
    """A YAML double-quoted scalar: JSON's escapes (all ASCII), except for a character past U+FFFF, which
    JSON spells as a UTF-16 surrogate pair that YAML readers refuse (kustomize: "invalid Unicode character
    escape code"): YAML's own escape for it is \\UXXXXXXXX."""
    if not value or max(value) <= "\uffff":
        return json.dumps(value)
    inner = "".join(f"\\U{ord(c):08X}" if c > "\uffff" else json.dumps(c)[1:-1] for c in value)
    return f'"{inner}"'


class Block(str):
    """A multi-line string written as a YAML literal block (`|`), as people read a PEM key or a policy in
    a manifest; written as a JSON string instead where a literal block could not hold it exactly."""

    def lines(self, indent: str) -> list[str] | None:
        text = str(self)
        body = text[:-1].split("\n") if text.endswith("\n") and not text.endswith("\n\n") else []
        if not body or not body[0] or body[0].startswith(" "):
            return None  # a literal block keeps one final newline and reads its indent from the first line
        if any(not line.isprintable() or line.endswith(" ") for line in body):
            return None
        return [f"{indent}{line}" if line else "" for line in body]


def scalar(value: Any) -> str:
    if type(value) is str:
        spelled = _SPELLED.get(value)
        if spelled is None:
            plain = _PLAIN.fullmatch(value) and value.lower() not in _SPECIAL
            spelled = value if plain else _double_quoted(value)
            if len(_SPELLED) < _SPELLED_MAX:
                _SPELLED[value] = spelled
        return spelled
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):  # a str subclass: spelled, never cached under its class
        return scalar(str(value))
    raise TypeError(f"no YAML for {value!r}")


def _block(value: dict[str, Any] | list[Any], indent: str, out: list[str], first: str | None = None) -> None:
    """Append the lines of a non-empty mapping or list at `indent`; `first` replaces the first line's
    indent (a mapping that is a list item starts on the item's `- ` line)."""
    if isinstance(value, dict):
        for key, item in value.items():
            head = f"{indent if first is None else first}{scalar(key)}:"
            first = None
            if item and isinstance(item, dict):
                out.append(head)
                _block(item, indent + "  ", out)
            elif item and isinstance(item, list):
                out.append(head)
                _block(item, indent, out)
            elif isinstance(item, Block) and (lines := item.lines(indent + "  ")) is not None:
                out += [f"{head} |", *lines]
            else:
                out.append(f"{head} {_flow(item)}")
        return
    for item in value:
        if item and isinstance(item, dict):
            _block(item, indent + "  ", out, f"{indent}- ")
        elif item and isinstance(item, list):
            raise TypeError("a list directly in a list has no block form here")
        else:
            out.append(f"{indent}- {_flow(item)}")


def _flow(item: Any) -> str:
    if isinstance(item, dict):
        return "{}"
    if isinstance(item, list):
        return "[]"
    return scalar(item)


def dump(document: dict[str, Any]) -> str:
    out: list[str] = []
    _block(document, "", out)
    return "\n".join(out) + "\n"
