"""Hostile input at the speed of sound input: an alias bomb refused before it expands."""

from __future__ import annotations

import contextlib
import itertools
import tempfile
import time
from pathlib import Path

from figures import Figure


def alias_bomb_figures() -> list[Figure]:
    """Reading a few kB of nested YAML anchors (a billion nodes once expanded, issue 18): refused before
    it expands, in about the time a sound recipe of the same size takes to read."""
    from factory.base.errors import InputError
    from factory.base.yamlfile import read_yaml

    levels = "abcdefghi"
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{name}: &{name} [{', '.join([f'*{previous}'] * 9)}]\n"
        for previous, name in itertools.pairwise(levels)
    )
    sound = "".join(f"{name}: [x, x, x, x, x, x, x, x, x]\n" for name in levels)
    timings = {}
    with tempfile.TemporaryDirectory(prefix="factory-bomb-") as folder:
        for name, text in (("bomb", bomb), ("sound", sound)):
            path = Path(folder) / f"{name}.yaml"
            path.write_text(text)
            started = time.monotonic()
            for _ in range(100):
                with contextlib.suppress(InputError):
                    read_yaml(path)
            timings[name] = (time.monotonic() - started) / 100
    ratio = timings["bomb"] / timings["sound"]
    return [
        Figure(
            "alias bomb refused",
            round(timings["bomb"] * 1000, 3),
            "ms",
            "< 10x a sound file of its size",
            ratio < 10,
            f"{len(bomb)} bytes; a sound file of {len(sound)} bytes: {timings['sound'] * 1000:.3f} ms",
        )
    ]
