"""Block YAML for Kubernetes objects (mappings, lists, strings, integers, booleans), written directly.

PyYAML's representer was most of the time `generate` spent on manifests (tens of thousands on the upstream
corpus); these objects need none of its generality. A string is written plain only when YAML cannot read
it as anything else, else as a JSON string (valid YAML); tests load every manifest back and compare.
"""

from __future__ import annotations

import json
import re
from typing import Any

# Plain only: letters, digits and . _ / - after a letter, `/` or a leading `-`/`--` then a letter.
_PLAIN = re.compile(r"(?:--?[A-Za-z]|[A-Za-z_/])[A-Za-z0-9_./-]*")
# Words YAML 1.1 reads as booleans or null.
_SPECIAL = {"y", "n", "yes", "no", "on", "off", "true", "false", "null"}


def scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if not isinstance(value, str):
        raise TypeError(f"no YAML for {value!r}")
    if _PLAIN.fullmatch(value) and value.lower() not in _SPECIAL:
        return value
    return json.dumps(value)


def _lines(value: Any, indent: str, out: list[str]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            _entry(f"{indent}{scalar(key)}:", item, indent, out)
    else:
        for item in value:
            _item(item, indent, out)


def _entry(head: str, item: Any, indent: str, out: list[str]) -> None:
    if isinstance(item, dict | list) and item:
        out.append(head)
        _lines(item, indent + "  " if isinstance(item, dict) else indent, out)
    else:
        out.append(f"{head} {_flow(item)}")


def _item(item: Any, indent: str, out: list[str]) -> None:
    if isinstance(item, dict) and item:
        nested: list[str] = []
        _lines(item, indent + "  ", nested)
        out.append(f"{indent}- {nested[0].lstrip()}")
        out.extend(nested[1:])
    elif isinstance(item, list) and item:
        raise TypeError("a list directly in a list has no block form here")
    else:
        out.append(f"{indent}- {_flow(item)}")


def _flow(item: Any) -> str:
    if isinstance(item, dict | list):
        return "{}" if isinstance(item, dict) else "[]"
    return scalar(item)


def dump(document: dict[str, Any]) -> str:
    out: list[str] = []
    _lines(document, "", out)
    return "\n".join(out) + "\n"
