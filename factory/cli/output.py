"""How the commands speak: results on stdout, problems and warnings on stderr, each line flushed."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from factory.recipes.loader import RecipeProblem


def say(line: str) -> None:
    print(line, flush=True)


def warn(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def report_problems(problems: Sequence[RecipeProblem]) -> int:
    """One line per recipe that could not be planned; non-zero when there is any."""
    for problem in problems:
        warn(f"bad recipe: {problem.one_line()}")
    return 1 if problems else 0
