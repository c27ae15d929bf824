"""Multi-node serving for real on one machine: the generated head and worker compose files of the
CPU image, two containers on one Docker network acting as two nodes, a real vLLM data-parallel
rendezvous (one replica per node, the worker headless), then /health and a chat completion through
the head.

The generated files use host networking, as real nodes do; two "nodes" on one machine would collide
there, so a test-only override changes what validation's list of differences allows and nothing else:
the network (a labelled bridge network, hostnames `head` and `worker`), the head's published port (on
loopback) and labels. Image, command, environment, shared memory, capabilities and ulimits are the
generated ones."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
import yaml

from factory.base.tools import compose_binary
from factory.engine.connect import OWNER_LABEL
from factory.validate.container import DIFFERENCES
from factory.validate.probes import ContainerState, chat, check_models, wait_healthy
from tests.conftest import ROOT, TINY

pytestmark = [pytest.mark.docker, pytest.mark.e2e]
DEPLOYMENT = ROOT / "compose/tiny-random-llama/cpu-default/multi_node_tp_dp/2-nodes"


# Each key of the override, and the difference of validation's list that allows it.
OVERRIDE_ALLOWED_BY = {
    "network_mode": "network",
    "hostname": "network",
    "networks": "network",
    "ports": "port",
    "labels": "labels",
}


def override(role: str, network: str, publish: bool) -> dict[str, Any]:
    service: dict[str, Any] = {
        "network_mode": None,  # becomes `!reset null` below
        "hostname": role,
        "networks": {"nodes": {"aliases": [role]}},
        "labels": {OWNER_LABEL: "test-multinode"},
    }
    if publish:
        service["ports"] = ["127.0.0.1::8000"]
    return {"services": {"vllm": service}, "networks": {"nodes": {"external": True, "name": network}}}


def test_the_override_changes_only_what_validation_lists() -> None:
    allowed = {difference.field for difference in DIFFERENCES}
    service = override("head", "n", publish=True)["services"]["vllm"]
    assert set(service) <= set(OVERRIDE_ALLOWED_BY)
    assert {OVERRIDE_ALLOWED_BY[key] for key in service} <= allowed


def write_override(path: Path, data: dict[str, Any]) -> None:
    text = yaml.safe_dump(data, sort_keys=False)
    path.write_text(text.replace("network_mode: null", "network_mode: !reset null"))


class Node:
    def __init__(self, compose_file: Path, override_file: Path, project: str, env: dict[str, str]) -> None:
        self.command = [
            str(compose_binary()),
            "-f",
            str(compose_file),
            "-f",
            str(override_file),
            "-p",
            project,
        ]
        self.project = project
        self.env = {**os.environ, **env}

    def compose(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.command, *args], capture_output=True, text=True, env=self.env, check=False, timeout=600
        )

    def container(self, client: docker.DockerClient) -> Any:
        found = client.containers.list(
            all=True, filters={"label": f"com.docker.compose.project={self.project}"}
        )
        assert len(found) == 1, f"{self.project}: {found}"
        return found[0]


def printed_start(compose_file: Path) -> list[str]:
    """The compose arguments of the file's `# Start: docker compose -f FILE ...` line."""
    line = next(line for line in compose_file.read_text().splitlines() if line.startswith("# Start: "))
    words = line.removeprefix("# Start: ").split("  (", 1)[0].split()
    assert words[:4] == ["docker", "compose", "-f", compose_file.name], line
    return words[4:]


@pytest.fixture
def two_nodes(
    tiny_built: Any, docker_client: docker.DockerClient, tmp_path: Path
) -> Iterator[tuple[Node, Node]]:
    network = docker_client.networks.create(
        f"factory-nodes-{uuid.uuid4().hex[:8]}", labels={OWNER_LABEL: "test"}
    )
    env = {
        "HEAD_IP": "head",
        "BIND_ADDRESS": "0.0.0.0",  # the test publishes the head's port from its container
        "IFACE_NAME": "eth0",
        "HF_CACHE": str(tmp_path / "hf"),
        "FACTORY_IMAGE": tiny_built.image,
    }
    nodes = []
    for role, file_name, publish in (
        ("head", "head.compose.yaml", True),
        ("worker", "worker-1.compose.yaml", False),
    ):
        override_file = tmp_path / f"{role}.override.yaml"
        write_override(override_file, override(role, network.name, publish))
        nodes.append(
            Node(DEPLOYMENT / file_name, override_file, f"factory-test-{role}-{network.name[-8:]}", env)
        )
    try:
        yield nodes[0], nodes[1]
    finally:
        for node in nodes:
            node.compose("down", "--volumes", "--timeout", "5")
        network.remove()


def test_two_containers_rendezvous_and_serve_through_the_head(
    no_leftovers: None, two_nodes: tuple[Node, Node], docker_client: docker.DockerClient
) -> None:
    # no_leftovers comes first so that it is torn down last, after two_nodes removed the nodes.
    head, worker = two_nodes
    result = head.compose("up", "-d")
    assert result.returncode == 0, result.stderr
    # The worker starts as its file's own `# Start:` line says (a headless rank: no --wait, since compose's
    # --wait refuses a service whose health check is off).
    start = printed_start(DEPLOYMENT / "worker-1.compose.yaml")
    assert start == ["up", "-d"]
    result = worker.compose(*start)
    assert result.returncode == 0, result.stderr
    head_container, worker_container = head.container(docker_client), worker.container(docker_client)
    port = head_container.ports["8000/tcp"][0]["HostPort"]

    def state() -> ContainerState:
        """Both nodes must live: a dead worker fails the test at once, with its logs."""
        for container in (head_container, worker_container):
            container.reload()
            if container.status not in ("created", "running"):
                logs = container.logs(tail=40).decode(errors="replace")
                return ContainerState(
                    False, container.attrs["State"]["ExitCode"], f"{container.name}:\n{logs}"
                )
        return ContainerState(True, None, head_container.logs(tail=40).decode(errors="replace"))

    base_url = f"http://127.0.0.1:{port}"
    wait_healthy(f"{base_url}/health", head_container.name, 600, state)
    # The head's compose health check asks the address it listens on (its --host): healthy, so the head's
    # printed start (with --wait) passes.
    start = printed_start(DEPLOYMENT / "head.compose.yaml")
    assert start == ["up", "-d", "--wait"]
    result = head.compose(*start, "--wait-timeout", "180")
    assert result.returncode == 0, result.stderr
    assert check_models(base_url, TINY) == [TINY]
    answer = chat(base_url, TINY)
    assert answer.completion_tokens > 0
    worker_logs = worker_container.logs().decode(errors="replace")
    worker_container.reload()  # the status read now, not the one from before the chat
    assert worker_container.status == "running", worker_logs[-3000:]
    assert "DP rank 1" in worker_logs or "DP1" in worker_logs or "dp_rank=1" in worker_logs, worker_logs[
        -3000:
    ]
