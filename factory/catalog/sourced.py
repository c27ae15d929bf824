"""A fact the catalog states that could not be checked here carries where it was read."""

from __future__ import annotations

from factory.base.models import Strict


class Sourced(Strict):
    """A fact that could not be checked here carries where it was read."""

    source: str
