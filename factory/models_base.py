"""Pydantic base classes shared by every data file the factory reads."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    """A section the factory reads: an unknown key is an error. Numbers where text is expected (an unquoted
    `- 8` in a flag list) are read as their text, as the recipes site reads them."""

    model_config = ConfigDict(extra="forbid", frozen=True, coerce_numbers_to_str=True)


class Open(BaseModel):
    """A section the factory only passes through (display text, site-only keys): extra keys are kept."""

    model_config = ConfigDict(extra="allow", frozen=True, coerce_numbers_to_str=True)
