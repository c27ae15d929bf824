"""Read BuildKit's plain progress output: which steps ran, which were cached, and why one failed."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_STEP = re.compile(r"^#(?P<id>\d+) \[(?P<stage>[^\]]*\d+/\d+)\] (?P<what>.*)$")
_CACHED = re.compile(r"^#(?P<id>\d+) CACHED$")
_ERROR = re.compile(r"^#(?P<id>\d+) ERROR: (?P<why>.*)$")
# The three install steps differ only in the requirements file uv installs (after uv's own, uv.txt); their
# RUN lines are a kilobyte of identical --mount options first, so the file is what names them.
_INSTALL = re.compile(r"uv pip install .*-r /tmp/(?P<file>requirements/(?!uv\.txt)\S+)")
_MOUNT = re.compile(r"--mount=\S+\s*")


def step_title(stage: str, what: str) -> str:
    """A step as an operator reads it: "[4/10] install requirements/heavy.txt" for an install step, any
    other step on one line without its --mount options (BuildKit's stage "image stage-0  4/10" shortened)."""
    stage = stage.split()[-1]
    what = " ".join(what.split())
    if match := _INSTALL.search(what):
        return f"[{stage}] install {match['file']}"
    return f"[{stage}] {_MOUNT.sub('', what)}"


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
                self.steps.setdefault(match["id"], step_title(match["stage"], match["what"]))
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
        step_log = _without_hash_lists(step_log)
        return "\n".join([f"step {self.steps.get(self.error_step, '?')}", *step_log[-tail:]])


_HASH_LINE = re.compile(r"^[\d.]*\s+sha256:[0-9a-f]{64}\s*$")


def _without_hash_lists(lines: list[str]) -> list[str]:
    """uv's hash mismatch lists every hash the lock allows (one per wheel of the release: 50 for torch), which
    would push the package's name out of the failure's tail: each run of them is one line."""
    out: list[str] = []
    run = 0
    for line in [*lines, ""]:
        if _HASH_LINE.match(line):
            run += 1
            continue
        if run:
            out.append(f"  ({run} sha256 hashes)")
            run = 0
        out.append(line)
    return out[:-1]
