"""Pydantic base classes shared by every data file the factory reads."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    """A section the factory reads: an unknown key is a typo and an error."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Open(BaseModel):
    """A section the factory only passes through (display text, site-only keys): extra keys are kept."""

    model_config = ConfigDict(extra="allow", frozen=True)
