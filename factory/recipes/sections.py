"""What every section of a recipe is made of: the section model that keeps unknown keys aside, flag lists
and environment blocks as the site prints them, a value given per hardware, and the override block."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict

from factory.base.models import Count
from factory.base.site_text import site_text


class Section(BaseModel):
    """A recipe section: known keys typed; an unknown key is kept aside, listed, and used nowhere."""

    model_config = ConfigDict(extra="allow", frozen=True, coerce_numbers_to_str=True)


def _env_value(value: Any) -> Any:
    """An environment value the site prints: YAML's null as "null" (String(null)); a list or a mapping is
    refused, naming what it is (the site prints one as "" or "[object Object]")."""
    if value is None:
        return "null"
    if isinstance(value, list | dict):
        raise ValueError(
            f"an environment value is text, a number or true or false, not a {type(value).__name__}"
        )
    return value


# An environment value as YAML writes it: a string, or a number the shell sees as its text (printed as the
# site prints it: factory.base.site_text).
EnvValue = str | int | float | bool
Env = dict[str, Annotated[EnvValue, BeforeValidator(_env_value)]]


def _as_site_prints(value: Any) -> Any:
    """A number or a boolean in a flag list is the text the site prints for it (JavaScript's String(): `1e6`
    is `1000000`, where pydantic's own coercion to text wrote `1000000.0`, which vLLM's int() refuses)."""
    return site_text(value) if isinstance(value, bool | int | float) else value


# A flag list's entry: text, numbers and booleans as the site prints them.
Flags = list[Annotated[str, BeforeValidator(_as_site_prints)]]
# A value given once, or per hardware: keyed by exact GPU id, generation, brand (lower case) or `default`.
HardwareKeyedInt = Count | dict[str, Count]


class ArgsAndEnv(Section):
    """An override block: flags appended to the serve command and environment variables to set."""

    extra_args: Flags = []
    extra_env: Env = {}
