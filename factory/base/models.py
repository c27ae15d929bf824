"""Pydantic base classes shared by every data file the factory reads."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

# A count of GPUs, nodes or parallel ranks: a whole number from 1 (strict: YAML's `true` is not 1, and 0 or
# a negative count used to become 1 in silence), far below anything a machine has.
Count = Annotated[int, Field(strict=True, ge=1, le=4096)]
# A TCP port: a compose file or a container with 70000 in it is refused by Docker, not by us, otherwise.
Port = Annotated[int, Field(strict=True, ge=1, le=65535)]


class Strict(BaseModel):
    """A section the factory reads: an unknown key is an error. Numbers where text is expected (an unquoted
    `- 8` in a flag list) are read as their text, as the recipes site reads them."""

    model_config = ConfigDict(extra="forbid", frozen=True, coerce_numbers_to_str=True)


class Open(BaseModel):
    """A section the factory only passes through (display text, site-only keys): extra keys are kept."""

    model_config = ConfigDict(extra="allow", frozen=True, coerce_numbers_to_str=True)
