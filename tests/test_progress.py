"""What an operator sees while a build or a validation runs: BuildKit's steps as they go, in a CI log as
timestamped lines and on a terminal as one updating line; a health wait counting down."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from factory.live import BuildProgress, Countdown
from tests.conftest import ROOT, TINY, run_factory

# BuildKit's plain output for a build with one cached step, one that downloads, and one that runs long.
BUILDKIT = [
    "#1 [internal] load build definition from Dockerfile",
    "#1 DONE 0.0s",
    "#5 [1/4] FROM docker.io/library/debian:bookworm",
    "#6 [2/4] RUN apt-get install -y python3.11",
    "#6 CACHED",
    "#7 [3/4] RUN uv pip install -r requirements/heavy.txt",
    "#7 1.203 Downloading torch (177.8MiB)",
    "#7 sha256:4f5e 52.43MB / 180.00MB 3.1s",
    "#7 sha256:4f5e 180.00MB / 180.00MB 9.8s",
    "#7 DONE 95.0s",
    "#8 [4/4] RUN /opt/vllm/bin/python -m factory_version_check",
    "#8 DONE 0.4s",
    "#9 [image] exporting to image",
    "#9 exporting layers 22.8s done",
    "#9 DONE 23.0s",
]


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_a_ci_log_gets_a_timestamped_line_per_step_and_a_heartbeat_while_one_runs_long() -> None:
    out, clock = io.StringIO(), FakeClock()
    progress = BuildProgress(
        "vllm-factory/x:tag", out, terminal=False, heartbeat_s=30, now=clock, wall=lambda: "12:00:00"
    )
    for line in BUILDKIT[:7]:
        clock.t += 1
        progress.feed(line)
    clock.t += 40  # the download runs on with no output
    progress.tick()
    for line in BUILDKIT[7:]:
        clock.t += 1
        progress.feed(line)
    lines = out.getvalue().splitlines()
    assert all(re.match(r"^12:00:00 \+\d+(m\d\ds|s) ", line) for line in lines), lines
    text = "\n".join(lines)
    assert [line for line in lines if "[2/4]" in line] == [
        "12:00:00 +5s [2/4] RUN apt-get install -y python3.11: cached"
    ], "a cached step gets one line, not its start line and then `cached`"
    assert "12:00:00 +6s [3/4] RUN uv pip install -r requirements/heavy.txt\n" in out.getvalue(), (
        "a step that runs is announced with the time it began"
    )
    assert re.search(r"\[3/4\] RUN uv pip install -r requirements/heavy.txt: running for 4\ds; last: ", text)
    assert "[3/4] RUN uv pip install -r requirements/heavy.txt: done in 1m35s, 180.0 MB" in text
    assert "FROM" not in text, "the base is resolved, not built: no step of its own"
    assert "exporting to image: done in 23s" in text, "the engine's silent minute gets its own step"
    assert progress.cached == 1


def test_a_terminal_gets_one_line_that_updates_in_place() -> None:
    out, clock = io.StringIO(), FakeClock()
    progress = BuildProgress("vllm-factory/x:tag", out, terminal=True, now=clock)
    for line in BUILDKIT[:8]:
        clock.t += 5
        progress.feed(line)
    status = progress.status()
    progress.close()
    assert status.startswith("building vllm-factory/x:tag: [3/4] RUN uv pip install")
    assert "40s, 1 cached, 52.4 MB transferred" in status
    drawn = out.getvalue()
    assert "\x1b[" in drawn, "drawn with terminal control sequences (rich), not printed line by line"
    assert "\n12:" not in drawn and ": cached\n" not in drawn


def test_a_health_wait_counts_down_to_its_deadline() -> None:
    out, clock = io.StringIO(), FakeClock()
    countdown = Countdown(
        "http://127.0.0.1:5/health (c)",
        300,
        out,
        terminal=False,
        every_s=15,
        now=clock,
        wall=lambda: "12:00:00",
    )
    for _ in range(40):
        clock.t += 1
        countdown.tick()
    assert out.getvalue().splitlines() == [
        "12:00:00 waiting for http://127.0.0.1:5/health (c): 15s so far, 4m45s left before the deadline",
        "12:00:00 waiting for http://127.0.0.1:5/health (c): 30s so far, 4m30s left before the deadline",
    ]


@pytest.mark.docker
def test_factory_build_shows_its_steps_in_a_log(tiny_built: object, tmp_path: Path) -> None:
    """The real CLI, output not a terminal (as in CI): every step of the Dockerfile, cached this time."""
    result = run_factory(ROOT, "build", TINY, "--hardware", "cpu", "--report", str(tmp_path / "build.json"))
    assert result.returncode == 0, result.stderr
    steps = re.findall(r"^\d\d:\d\d:\d\d \+\d+s (\[[^]]*\d+/\d+\] .+): cached$", result.stdout, flags=re.M)
    dockerfile = (ROOT / "images/tiny-random-llama/vllm0.32.0-cpu-default/Dockerfile").read_text()
    assert len(steps) == len(re.findall(r"^(RUN|COPY|ADD) ", dockerfile, flags=re.M)), result.stdout
    assert "\x1b[" not in result.stdout
