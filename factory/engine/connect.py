"""The Docker Engine: connect once, fail early with a clear message, and say what it can do."""

from __future__ import annotations

import os
from dataclasses import dataclass

import docker
from docker.errors import DockerException

from factory.base.errors import DockerError

ARCH_TO_PLATFORM = {
    "x86_64": "linux/amd64",
    "amd64": "linux/amd64",
    "aarch64": "linux/arm64",
    "arm64": "linux/arm64",
}
# Everything the factory creates carries this label, so cleanup removes exactly what it made.
OWNER_LABEL = "ai.vllm.factory.owner"


@dataclass(frozen=True)
class EngineFacts:
    version: str
    api_version: str
    platform: str
    runtimes: tuple[str, ...]

    @property
    def has_nvidia_runtime(self) -> bool:
        return "nvidia" in self.runtimes


def connect() -> docker.DockerClient:
    where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    try:
        client = docker.from_env(timeout=300)
        client.ping()
    except DockerException as exc:
        raise DockerError(
            f"cannot reach the Docker Engine at {where}: {exc}\n"
            "  hint: start it (testbench/up does, as root), or point DOCKER_HOST at a running engine"
        ) from None
    return client


def engine_facts(client: docker.DockerClient) -> EngineFacts:
    info = client.info()
    version = client.version()
    return EngineFacts(
        version=str(version.get("Version", "?")),
        api_version=str(version.get("ApiVersion", "?")),
        platform=ARCH_TO_PLATFORM.get(str(info.get("Architecture", "")), str(info.get("Architecture", "?"))),
        runtimes=tuple(sorted(info.get("Runtimes", {}))),
    )
