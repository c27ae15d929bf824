"""A validation run that is stopped leaves nothing behind: SIGTERM (a cancelled CI job) and SIGHUP unwind
like Ctrl-C; after SIGKILL, which nothing can catch, the next run finds the container by its labels and
removes it, saying so."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import docker
import pytest

from factory.engine.connect import OWNER_LABEL
from factory.engine.leftovers import PID_LABEL
from tests.conftest import KIMI, ROOT, TINY, run_factory

pytestmark = [pytest.mark.docker, pytest.mark.e2e]


def containers_of(client: docker.DockerClient, pid: int) -> list[Any]:
    return list(
        client.containers.list(
            all=True, filters={"label": [OWNER_LABEL, f"{PID_LABEL}={pid}"]}, ignore_removed=True
        )
    )


def validation_serving(tmp_path: Path, client: docker.DockerClient) -> tuple[subprocess.Popen[str], Any]:
    """`factory validate` of the built-in default, once its vLLM container runs (static checks done)."""
    command = [sys.executable, "-m", "factory", "--root", str(ROOT), "validate", TINY, "--hardware", "cpu"]
    process = subprocess.Popen(
        [*command, "--reports", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        serving = [c for c in containers_of(client, process.pid) if c.labels[OWNER_LABEL] == "validate"]
        if serving:
            return process, serving[0]
        if process.poll() is not None:
            pytest.fail(f"validate ended before its server started:\n{process.communicate()[0]}")
        time.sleep(0.5)
    process.kill()
    pytest.fail("no validation container within 300 s")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_terminated_validation_removes_its_container(
    tiny_built: Any, docker_client: docker.DockerClient, tmp_path: Path, signum: signal.Signals
) -> None:
    process, _ = validation_serving(tmp_path, docker_client)
    process.send_signal(signum)
    output, _ = process.communicate(timeout=120)
    assert process.returncode == 130, output
    assert containers_of(docker_client, process.pid) == [], "the vLLM container outlived the run"


def test_the_next_run_removes_what_a_killed_run_left_and_says_so(
    tiny_built: Any, docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    process, container = validation_serving(tmp_path, docker_client)
    process.kill()
    process.communicate(timeout=60)
    try:
        assert [c.id for c in containers_of(docker_client, process.pid)] == [container.id], (
            "SIGKILL cannot be caught: the container is still there for the next run to find"
        )
        # The next run of any validation sweeps first (this one then stops: that image is not built here).
        result = run_factory(ROOT, "validate", KIMI, "--hardware", "mi300x", "--reports", str(tmp_path))
        assert (
            f"removed {container.name}: a container a killed factory run left behind"
            in result.stdout + result.stderr
        )
        assert containers_of(docker_client, process.pid) == []
    finally:
        for leftover in containers_of(docker_client, process.pid):
            leftover.remove(force=True)


def test_containers_of_a_live_run_are_not_swept(docker_client: docker.DockerClient, tmp_path: Path) -> None:
    """A container whose process still runs (this test's) belongs to a run in progress: left alone."""
    from factory.engine.leftovers import labels, sweep

    container = docker_client.containers.create(
        "factory-local/debian:bookworm", ["sleep", "60"], labels=labels("validate")
    )
    try:
        assert container.name not in sweep(docker_client)
        container.reload()
        assert container.status == "created"
    finally:
        container.remove(force=True)
