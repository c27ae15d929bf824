"""Jinja2 rendering. Templates only format: every value and every choice comes from the plans.

Values are escaped for the file they land in: `dockerfile` for Dockerfile ENV and LABEL (which expand
`$` at build time), `json` for exec-form arrays and YAML strings, `key` for a YAML mapping key (plain
where YAML reads it as that string, else quoted: an environment variable named `true` or `null` was read
by compose as a boolean or null key and refused); compose values go through
factory.render.compose.compose_value (placeholders become variables, every other `$` is doubled).
"""

from __future__ import annotations

import json
import re
from functools import cache

import jinja2

from factory.base.image_paths import TEMPLATE_GLOBALS
from factory.base.yaml_text import scalar

# Matched whole: with `$`, a value ending in a newline took the fast path and wrote a raw line break.
_PLAIN = re.compile(r'[^"\\\x00-\x1f\x7f-\U0010ffff]*')


def json_string(value: object) -> str:
    """JSON for a value; plain strings take a fast path (the corpus renders hundreds of thousands)."""
    if isinstance(value, str) and _PLAIN.fullmatch(value):
        return f'"{value}"'
    return json.dumps(value, ensure_ascii=False)


def dockerfile_value(value: str) -> str:
    """A double-quoted Dockerfile value that ENV and LABEL keep as written (no `$` expansion)."""
    return json.dumps(value, ensure_ascii=False).replace("$", "\\$")


@cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("factory", "templates"),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,  # Dockerfiles and YAML, not HTML
        auto_reload=False,  # templates are package files: no need to stat them at every render
    )
    env.filters["json"] = json_string
    env.filters["dockerfile"] = dockerfile_value
    env.filters["key"] = scalar
    env.globals.update(TEMPLATE_GLOBALS)
    return env
