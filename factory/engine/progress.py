"""Progress an operator reads while the engine works: one line updating in place on a terminal (rich draws
it), timestamped lines elsewhere; a countdown while a server starts (factory.builder.display shows builds)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

from rich.console import Console
from rich.live import Live
from rich.text import Text


def human_bytes(count: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= size:
            return f"{count / size:.1f} {unit}"
    return f"{count:.0f} B"


def clock(seconds: float) -> str:
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes}m{rest:02d}s" if minutes else f"{rest}s"


def updating_line(out: TextIO, text: str) -> Live:
    """One line on a terminal that rich redraws in place (and clears when stopped)."""
    console = Console(file=out, force_terminal=True, highlight=False)
    live = Live(Text(text), console=console, refresh_per_second=4, transient=True)
    live.start()
    return live


class Countdown:
    """A long wait (a server loading its model) shown as the seconds left until its deadline: an updating
    line on a terminal, a timestamped line every `every_s` elsewhere."""

    def __init__(
        self,
        what: str,
        deadline_s: float,
        out: TextIO,
        terminal: bool,
        every_s: float = 15.0,
        now: Callable[[], float] = time.monotonic,
        wall: Callable[[], str] = lambda: time.strftime("%H:%M:%S"),
    ) -> None:
        self.what, self.deadline_s, self.out, self.terminal, self.every_s = (
            what,
            deadline_s,
            out,
            terminal,
            every_s,
        )
        self.now, self.wall = now, wall
        self.started = self.last_said = now()
        self.live: Live | None = None
        if terminal:
            self.live = updating_line(out, self.line())

    def line(self) -> str:
        waited = self.now() - self.started
        left = max(0.0, self.deadline_s - waited)
        return f"waiting for {self.what}: {clock(waited)} so far, {clock(left)} left before the deadline"

    def tick(self) -> None:
        if self.live is not None:
            self.live.update(Text(self.line()))
        elif self.now() - self.last_said >= self.every_s:
            self.out.write(f"{self.wall()} {self.line()}\n")
            self.out.flush()
            self.last_said = self.now()

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None
