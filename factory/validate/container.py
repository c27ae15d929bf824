"""Start an image with testcontainers for probing, and always remove it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

# Ryuk, testcontainers' reaper, is an image that cannot be pulled on air-gapped machines; the
# factory removes what it starts itself (and labels it, so a crash can be cleaned up by label).
os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")

from docker.types import DeviceRequest
from testcontainers.core.container import DockerContainer

from factory.engine import OWNER_LABEL
from factory.plan.models import ImagePlan
from factory.validate.probes import ContainerState

API_PORT = 8000


@dataclass
class Started:
    container: DockerContainer
    base_url: str
    name: str

    def state(self) -> ContainerState:
        wrapped = self.container.get_wrapped_container()
        wrapped.reload()
        logs = wrapped.logs(tail=40).decode(errors="replace")
        running = wrapped.status in ("created", "running", "restarting")
        exit_code = wrapped.attrs.get("State", {}).get("ExitCode") if not running else None
        return ContainerState(running, exit_code, logs)


def gpu_run_options(image: ImagePlan) -> dict[str, Any]:
    """What the container needs to see its GPUs, as compose files and `docker run` give it."""
    if image.vendor == "nvidia":
        return {"device_requests": [DeviceRequest(count=-1, capabilities=[["gpu"]])]}
    if image.vendor == "amd":
        return {
            "devices": ["/dev/kfd", "/dev/dri"],
            "group_add": ["video"],
            "security_opt": ["seccomp=unconfined"],
        }
    return {}


@contextmanager
def running(
    image: ImagePlan, args: list[str], run_id: str, env: dict[str, str] | None = None
) -> Iterator[Started]:
    local_engine = os.environ.get("DOCKER_HOST", "unix://").startswith("unix://")
    container = (
        DockerContainer(image.reference)
        .with_command(args)
        .with_kwargs(
            labels={OWNER_LABEL: "validate", "ai.vllm.factory.run": run_id},
            shm_size="2g",  # vLLM's engine needs more than Docker's default 64 MiB /dev/shm
            **gpu_run_options(image),
        )
    )
    # Loopback only on a local engine: a validation run must not publish the API to the network.
    # (testcontainers' with_bind_ports takes no host address; docker-py takes this tuple.)
    container.ports[f"{API_PORT}/tcp"] = ("127.0.0.1", None) if local_engine else None  # type: ignore[assignment]
    for name, value in (env or {}).items():
        container.with_env(name, value)
    try:
        container.start()
        # testcontainers may answer the bridge gateway; the port is bound on loopback here.
        host = "127.0.0.1" if local_engine else str(container.get_container_host_ip())
        port = container.get_exposed_port(API_PORT)
        name = str(container.get_wrapped_container().name)
        yield Started(container, f"http://{host}:{port}", name)
    finally:
        container.stop(force=True, delete_volume=True)
