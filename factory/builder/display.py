"""What a build is doing while it runs: the current BuildKit step, time since the build started, how many
steps came from the cache, bytes where BuildKit or uv report them, and what each install step installed.
On a terminal one line updates in place (rich draws it); elsewhere (a CI log) each step start and end is a
timestamped line, and a step that runs long says so every `heartbeat_s` with its latest output, so a slow
download never looks like a hang."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TextIO

from rich.live import Live
from rich.text import Text

from factory.builder.progress import step_title
from factory.engine.progress import clock, human_bytes, updating_line

_STEP = re.compile(r"^#(?P<id>\d+) \[(?P<stage>[^\]]*\d+/\d+)\] (?P<what>.*)$")
# The engine writing the finished layers into its image store: for a 10 GB image about 20 s with no output.
_EXPORT = re.compile(r"^#(?P<id>\d+) (?:\[[^\]]*\] )?exporting to image$")
_CACHED = re.compile(r"^#(?P<id>\d+) CACHED$")
_DONE = re.compile(r"^#(?P<id>\d+) DONE (?P<seconds>[\d.]+)s$")
_OUTPUT = re.compile(r"^#(?P<id>\d+) (?:[\d.]+ )?(?P<text>.+)$")
_TIMED = re.compile(r"^#\d+ [\d.]+ ")  # a step's output: "#8 14.13  + torch==2.13.0+cpu" keeps its spaces
# BuildKit's transfer lines: "#5 sha256:ab12... 12.58MB / 96.12MB 1.2s", "transferring context: 1.05MB".
_BYTES = re.compile(
    r"(?P<size>\d+(?:\.\d+)?)(?P<unit>[kKMG]?B)(?: / (?P<total>\d+(?:\.\d+)?)(?P<tunit>[kKMG]?B))?"
)
_UNITS = {"B": 1, "kB": 1e3, "KB": 1e3, "MB": 1e6, "GB": 1e9, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
# uv's own lines inside an install step: "Downloading torch (177.8MiB)" (uv names only wheels of about a
# MiB and more, so the sum is what the large wheels weigh), "Installed 145 packages in 3.37s",
# " + torch==2.13.0+cpu".
_UV_DOWNLOAD = re.compile(r"^Downloading (?P<name>\S+) \((?P<size>\d+(?:\.\d+)?)(?P<unit>[KMG]iB|B)\)$")
_UV_INSTALLED = re.compile(r"^Installed (?P<count>\d+) packages? in ")
_UV_ADDED = re.compile(r"^ ?\+ (?P<pin>\S+==\S+)$")
# An install step's done line names its packages when they are this few, else counts them.
NAMED_PACKAGES = 3


@dataclass
class Step:
    title: str  # "[3/9] RUN apt-get ..."
    started: float
    cached: bool = False
    done_s: float | None = None
    transferred: dict[str, float] = field(default_factory=dict)  # what -> bytes so far
    last_output: str = ""
    installed: list[str] = field(default_factory=list)  # "torch==2.13.0+cpu", as uv lists them
    installed_count: int | None = None  # uv's "Installed N packages"

    def installed_summary(self) -> str:
        """ ", installed torch==2.13.0+cpu, triton==3.9.0" or ", installed 145 packages", else nothing."""
        count = self.installed_count if self.installed_count is not None else len(self.installed)
        if not count:
            return ""
        if len(self.installed) == count and count <= NAMED_PACKAGES:
            return ", installed " + ", ".join(self.installed)
        return f", installed {count} packages"


class BuildProgress:
    """Fed BuildKit's plain output line by line; shows it as it goes."""

    def __init__(
        self,
        image: str,
        out: TextIO,
        terminal: bool,
        heartbeat_s: float = 30.0,
        now: Callable[[], float] = time.monotonic,
        wall: Callable[[], str] = lambda: time.strftime("%H:%M:%S"),
    ) -> None:
        self.image, self.out, self.terminal, self.heartbeat_s = image, out, terminal, heartbeat_s
        self.now, self.wall = now, wall
        self.started = now()
        self.steps: dict[str, Step] = {}
        self.current: str | None = None
        self.last_said = self.started
        # A step's start line waits for the step's next line: when that is CACHED, the step gets one line
        # ("...: cached") instead of two. (step id, the line stamped with its start time)
        self.held: tuple[str, str] | None = None
        self.live: Live | None = None
        if terminal:
            self.live = updating_line(out, "")

    def feed(self, line: str) -> None:
        if match := _STEP.match(line):
            if match["id"] not in self.steps and not match["what"].startswith("FROM "):
                self._start(match["id"], step_title(match["stage"], match["what"])[:100])
        elif match := _EXPORT.match(line):
            self._start(match["id"], "exporting to image")
        elif match := _CACHED.match(line):
            if step := self.steps.get(match["id"]):
                step.cached = True
                if self.held and self.held[0] == match["id"]:
                    self.held = None
                self._plain(f"{step.title}: cached")
        else:
            self._release()  # the held step was not cached: its start line goes out before its output
            self._progress(line)
        self.tick()

    def _start(self, step_id: str, title: str) -> None:
        self.steps[step_id] = Step(title, self.now())
        self.current = step_id
        self._release()
        self.held = (step_id, self._stamped(title))

    def _progress(self, line: str) -> None:
        if match := _DONE.match(line):
            if (step := self.steps.get(match["id"])) and not step.cached:
                step.done_s = float(match["seconds"])
                done = f"done in {clock(step.done_s)}{step.installed_summary()}{self._bytes_of(step)}"
                self._plain(f"{step.title}: {done}")
        elif (match := _OUTPUT.match(line)) and (step := self.steps.get(match["id"])):
            text = line.split(" ", 2)[2] if _TIMED.match(line) else match["text"]
            step.last_output = text.strip()[:120]
            if uv := _UV_DOWNLOAD.match(text):
                step.transferred[uv["name"]] = float(uv["size"]) * _UNITS[uv["unit"]]
            elif uv := _UV_INSTALLED.match(text):
                step.installed_count = int(uv["count"])
            elif uv := _UV_ADDED.match(text):
                step.installed.append(uv["pin"])
            for found in _BYTES.finditer(match["text"]):
                what = match["text"].split(" ", 1)[0]
                step.transferred[what] = float(found["size"]) * _UNITS.get(found["unit"], 1)

    def tick(self) -> None:
        """Called with each line and about once a second without one: the clock moves on either way."""
        step = self.steps.get(self.held[0]) if self.held else None
        if step is not None and self.now() - step.started >= 1:  # a step that runs: say it began
            self._release()
        self._heartbeat()
        self._draw()

    def close(self) -> None:
        self._release()
        if self.live is not None:
            self.live.stop()
            self.live = None

    @property
    def cached(self) -> int:
        return sum(step.cached for step in self.steps.values())

    def status(self) -> str:
        """The one line a terminal shows."""
        step = self.steps.get(self.current or "")
        doing = step.title if step else "starting"
        moved = sum(sum(s.transferred.values()) for s in self.steps.values())
        extra = f", {human_bytes(moved)} transferred" if moved else ""
        return (
            f"building {self.image}: {doing}  {clock(self.now() - self.started)}, {self.cached} cached{extra}"
        )

    def _bytes_of(self, step: Step) -> str:
        total = sum(step.transferred.values())
        return f", {human_bytes(total)} downloaded" if total else ""

    def _stamped(self, text: str) -> str:
        return f"{self.wall()} +{clock(self.now() - self.started)} {text}\n"

    def _plain(self, text: str) -> None:
        self._write(self._stamped(text))

    def _release(self) -> None:
        """Print the held start line, if any."""
        if self.held is not None:
            self._write(self.held[1])
            self.held = None

    def _write(self, stamped: str) -> None:
        if self.terminal:
            return
        self.out.write(stamped)
        self.out.flush()
        self.last_said = self.now()

    def _heartbeat(self) -> None:
        step = self.steps.get(self.current or "")
        if self.terminal or step is None or step.done_s is not None or step.cached:
            return
        if self.now() - self.last_said >= self.heartbeat_s:
            running = clock(self.now() - step.started)
            self._plain(
                f"{step.title}: running for {running}{self._bytes_of(step)}; last: {step.last_output}"
            )

    def _draw(self) -> None:
        if self.live is not None:
            self.live.update(Text(self.status()))
