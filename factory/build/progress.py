"""Read BuildKit's plain progress output: which steps ran, which were cached, and why one failed."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_STEP = re.compile(r"^#(?P<id>\d+) \[(?P<stage>[^\]]*\d+/\d+)\] (?P<what>.*)$")
_CACHED = re.compile(r"^#(?P<id>\d+) CACHED$")
_ERROR = re.compile(r"^#(?P<id>\d+) ERROR: (?P<why>.*)$")


@dataclass
class BuildLog:
    lines: list[str] = field(default_factory=list)
    steps: dict[str, str] = field(default_factory=dict)  # id -> "[3/9] RUN ..."
    cached: set[str] = field(default_factory=set)
    error_step: str | None = None
    error: str | None = None

    def feed(self, line: str) -> None:
        self.lines.append(line)
        if match := _STEP.match(line):
            if not match["what"].startswith("FROM "):  # the base is resolved, never built or cached
                self.steps.setdefault(match["id"], f"[{match['stage']}] {match['what']}")
        elif match := _CACHED.match(line):
            self.cached.add(match["id"])
        elif match := _ERROR.match(line):
            self.error_step, self.error = match["id"], match["why"]

    @property
    def cached_steps(self) -> int:
        return len(self.cached & set(self.steps))

    @property
    def total_steps(self) -> int:
        return len(self.steps)

    def failure(self, tail: int = 25) -> str:
        """The failing step and the end of its log, or the end of the whole output."""
        if self.error_step is None:
            return "\n".join(self.lines[-tail:])
        prefix = f"#{self.error_step} "
        step_log = [line[len(prefix) :] for line in self.lines if line.startswith(prefix)]
        return "\n".join([f"step {self.steps.get(self.error_step, '?')}", *step_log[-tail:]])
