"""SIGTERM and SIGHUP unwind the command like Ctrl-C, so every `finally` runs (a container started for a
validation is removed on the way out). Needs nothing but the standard library: every command installs it."""

from __future__ import annotations

import signal
from types import FrameType


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP: unwind like Ctrl-C, so every `finally` runs."""


def unwind_on_termination() -> None:
    def handler(signum: int, frame: FrameType | None) -> None:
        raise Terminated(f"received {signal.Signals(signum).name}")

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, handler)
