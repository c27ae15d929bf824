"""Start an image with testcontainers for probing, and always remove it."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

# Ryuk, testcontainers' reaper, is an image that cannot be pulled on air-gapped machines; the
# factory removes what it starts itself (and labels it, so a crash can be cleaned up by label).
os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")

from docker.types import DeviceRequest
from testcontainers.core.container import DockerContainer

from factory.catalog.schema import Server, Vendor
from factory.leftovers import PID_LABEL, labels, remove_labelled
from factory.plan.models import ImagePlan
from factory.plan.settings import PLACEHOLDER
from factory.validate.probes import ContainerState


@dataclass
class Started:
    container: DockerContainer
    base_url: str
    health_url: str
    name: str

    def state(self) -> ContainerState:
        wrapped = self.container.get_wrapped_container()
        wrapped.reload()
        logs = wrapped.logs(tail=40).decode(errors="replace")
        running = wrapped.status in ("created", "running", "restarting")
        exit_code = wrapped.attrs.get("State", {}).get("ExitCode") if not running else None
        return ContainerState(running, exit_code, logs)


def gpu_run_options(vendor: Vendor, settings: Mapping[str, str] | None = None) -> dict[str, Any]:
    """What the container needs to see its GPUs, from the same vendor data the compose files print.
    A group given as a ${SETTING} (the host's render group id) is added when `settings` has its value."""
    options: dict[str, Any] = {}
    if vendor.gpu_request:
        request = vendor.gpu_request
        options["device_requests"] = [
            DeviceRequest(driver=request.driver, count=-1, capabilities=[request.capabilities])
        ]
    if vendor.devices:
        options["devices"] = list(vendor.devices)
    groups = [_setting_value(g.group, settings or {}) for g in vendor.group_add]
    groups = [group for group in groups if group]
    if groups:
        options["group_add"] = groups
    if vendor.security_opt:
        options["security_opt"] = list(vendor.security_opt)
    return options


@contextmanager
def running(
    image: ImagePlan,
    vendor: Vendor,
    server: Server,
    args: list[str],
    run_id: str,
    env: dict[str, str] | None = None,
) -> Iterator[Started]:
    local_engine = os.environ.get("DOCKER_HOST", "unix://").startswith("unix://")
    container = (
        DockerContainer(image.reference)
        .with_command(args)
        .with_kwargs(
            labels=labels("validate", **{"ai.vllm.factory.run": run_id}),
            shm_size="2g",  # vLLM's engine needs more than Docker's default 64 MiB /dev/shm
            **gpu_run_options(vendor, os.environ),
        )
    )
    # Loopback only on a local engine: a validation run must not publish the API to the network.
    # (testcontainers' with_bind_ports takes no host address; docker-py takes this tuple.)
    container.ports[f"{server.port}/tcp"] = ("127.0.0.1", None) if local_engine else None  # type: ignore[assignment]
    for name, value in (env or {}).items():
        container.with_env(name, value)
    try:
        container.start()
        # testcontainers may answer the bridge gateway; the port is bound on loopback here.
        host = "127.0.0.1" if local_engine else str(container.get_container_host_ip())
        port = container.get_exposed_port(server.port)
        name = str(container.get_wrapped_container().name)
        base_url = f"http://{host}:{port}"
        yield Started(container, base_url, base_url + server.health_path, name)
    finally:
        try:
            container.stop(force=True, delete_volume=True)
        finally:
            # A signal during start() interrupts testcontainers before it holds the container, so its
            # stop() removes nothing: find ours by label (this run, this process) and remove it.
            remove_labelled({"ai.vllm.factory.run": run_id, PID_LABEL: str(os.getpid())})


def _setting_value(group: str, settings: Mapping[str, str]) -> str | None:
    """A group name as is; a ${NAME} group from the settings, or None when they do not give it."""
    match = PLACEHOLDER.fullmatch(group)
    return settings.get(match.group("braced") or match.group("bare")) if match else group
