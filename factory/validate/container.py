"""Start the container a deployment ships, for probing, and always remove it.

The container is the run spec's, printed as Docker SDK options the way the compose file prints it: the
same command, environment, shared memory, capabilities, ulimits, devices, groups, security options,
health check and mount target. Settings are read as compose reads them (the environment, then the
default). What validation must change is listed in DIFFERENCES, with why, and shown in every report.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Ryuk, testcontainers' reaper, is an image that cannot be pulled on air-gapped machines; the
# factory removes what it starts itself (and labels it, so a crash can be cleaned up by label).
os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")

from docker.types import DeviceRequest, Ulimit
from testcontainers.core.container import DockerContainer

from factory.engine.leftovers import PID_LABEL, labels, remove_labelled
from factory.plan.runspec import RunSpec
from factory.plan.settings import host_value
from factory.render.compose import tmpfs_mount
from factory.validate.probes import ContainerState

NANOSECONDS = 1_000_000_000

# Run spec fields the Docker SDK cannot express, and why (a test keeps this list complete).
CANNOT_EXPRESS = {
    "gpus": "Docker does not allocate GPUs: a device request for N always takes the node's first N, so "
    "every process reserves all of its node's GPUs (the recipe pages' --gpus all)",
    "program": "the image's entrypoint runs the program: a container names none",
    "platform": "the validation runs the image built on this engine, whose platform the engine reads from "
    "it (another platform's image runs under emulation, for its static checks)",
    "requests": "one container on this engine: nothing to schedule it among",
    "cache_gb": "validation mounts the cache folder it is given, on this machine's disk",
    "gpu_resource": "a Kubernetes device plugin's name: the engine gives GPUs by driver or device",
    "publish_address": "validation publishes on loopback, at a port the engine picks (a recorded difference)",
    "configs": "validation starts a plain image's one-node deployment, whose process reads no generated "
    "config (the KV stores' own test starts their compose files)",
    "after": "validation starts one process: there is nothing to wait for",
    "rpc_port": "validation starts one process, which no other process calls",
    "liveness": "the engine restarts no container for failing its health check: validation fails it instead",
    "cache_basis": "validation mounts the cache folder it is given, on this machine's disk",
    "disk_gib": "one container on this engine: its disk is the machine's",
}


@dataclass(frozen=True)
class Difference:
    """Where the validation container differs from the shipped one, and why."""

    field: str
    what: str
    why: str


DIFFERENCES = (
    Difference(
        "port",
        "the API is published on 127.0.0.1, at a host port the engine picks",
        "a validation run never publishes the API to the network, and two runs never collide on one port",
    ),
    Difference(
        "volumes",
        "the model cache is an empty folder of the run's own (owned by the image's user), not the host's",
        "validation neither reads nor changes the operator's cache: what it proves comes from the image",
    ),
    Difference(
        "labels",
        "labels naming the run and the process that started it are added",
        "a container a killed run left behind is found and removed by them",
    ),
    Difference(
        "network",
        "(several nodes on one machine) a Docker network of their own, each node under its process name",
        "nodes of one deployment on the host's network would collide on one machine",
    ),
)


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


def gpu_run_options(spec: RunSpec, settings: Mapping[str, str] | None = None) -> dict[str, Any]:
    """What the container needs to see its GPUs: the spec's device request, devices, groups (a ${SETTING}
    group from `settings`) and security options."""
    options: dict[str, Any] = {}
    if spec.gpu_request:
        request = spec.gpu_request
        options["device_requests"] = [
            DeviceRequest(driver=request.driver, count=-1, capabilities=[request.capabilities])
        ]
    if spec.devices:
        options["devices"] = list(spec.devices)
    if spec.groups:
        options["group_add"] = [host_value(group, dict(settings or {})) for group in spec.groups]
    if spec.security_opt:
        options["security_opt"] = list(spec.security_opt)
    return options


def run_options(
    spec: RunSpec, settings: Mapping[str, str], cache: Path, run_labels: dict[str, str]
) -> dict[str, Any]:
    """The Docker SDK's `containers.run` arguments for the shipped container, with DIFFERENCES applied:
    published on loopback at a port the engine picks, `cache` as the model cache, `run_labels` added."""
    given = dict(settings)
    environment = {name: host_value(value, given) for name, value in spec.environment.items()}
    environment |= {secret.env: given.get(secret.env, "") for secret in spec.secrets}
    options: dict[str, Any] = {
        "image": spec.image,
        "command": [host_value(arg, given) for arg in spec.argv],
        **({"entrypoint": list(spec.entrypoint)} if spec.entrypoint else {}),
        "labels": {**dict(spec.all_labels), **run_labels},
        "environment": environment,
        "cap_add": list(spec.capabilities),
        "user": spec.user.ids,
        "read_only": spec.read_only_root,
        "tmpfs": dict(tmpfs_mount(spec, folder).split(":", 1) for folder in spec.writable),
        "ulimits": [Ulimit(name=name, soft=limit, hard=limit) for name, limit in spec.ulimits],
        "volumes": {str(cache): {"bind": volume.target, "mode": "rw"} for volume in spec.volumes},
        **gpu_run_options(spec, given),
    }
    if spec.shm_size:
        options["shm_size"] = spec.shm_size
    if spec.restart != "no":
        options["restart_policy"] = {"Name": spec.restart}
    if spec.network == "host":
        options["network_mode"] = "host"
    else:
        options["ports"] = {f"{spec.port}/tcp": ("127.0.0.1", None)}
    if spec.probe is not None:
        probe = spec.probe
        options["healthcheck"] = {
            "test": ["CMD", *probe.command(host_value(str(probe.host), given))],
            "interval": probe.interval_s * NANOSECONDS,
            "timeout": probe.timeout_s * NANOSECONDS,
            "retries": probe.retries,
            "start_period": probe.start_period_s * NANOSECONDS,
        }
    else:
        options["healthcheck"] = {"test": ["NONE"]}
    return options


def _give_to(cache: Path, spec: RunSpec) -> None:
    """The run's own cache folder, writable by the image's user as the operator's must be (chown where this
    process may, else open to every user: it is the run's, and removed after)."""
    cache.mkdir(parents=True, exist_ok=True)
    try:
        os.chown(cache, spec.user.uid, spec.user.gid)
    except PermissionError:
        cache.chmod(0o777)


@contextmanager
def running(spec: RunSpec, run_id: str, cache: Path) -> Iterator[Started]:
    """The spec's container, started on this engine; removed on the way out whatever happens."""
    local_engine = os.environ.get("DOCKER_HOST", "unix://").startswith("unix://")
    _give_to(cache, spec)
    run_labels = labels("validate", **{"ai.vllm.factory.run": run_id})
    options = run_options(spec, os.environ, cache, run_labels)
    image, command, environment = options.pop("image"), options.pop("command"), options.pop("environment")
    ports, volumes = options.pop("ports", {}), options.pop("volumes")
    tmpfs = options.pop("tmpfs")
    container = DockerContainer(image).with_command(command).with_kwargs(**options)
    container.tmpfs.update(tmpfs)  # testcontainers passes its own tmpfs mapping to the engine
    for source, mount in volumes.items():
        container.with_volume_mapping(source, mount["bind"], mount["mode"])
    # Loopback only on a local engine: a validation run must not publish the API to the network.
    # (testcontainers' with_bind_ports takes no host address; docker-py takes this tuple.)
    for port, binding in ports.items():
        container.ports[port] = binding if local_engine else None
    for name, value in environment.items():
        container.with_env(name, value)
    try:
        container.start()
        # testcontainers may answer the bridge gateway; the port is bound on loopback here.
        host = "127.0.0.1" if local_engine else str(container.get_container_host_ip())
        port = container.get_exposed_port(spec.port)
        name = str(container.get_wrapped_container().name)
        base_url = f"http://{host}:{port}"
        path = spec.probe.path if spec.probe else "/health"
        yield Started(container, base_url, base_url + path, name)
    finally:
        try:
            container.stop(force=True, delete_volume=True)
        finally:
            # A signal during start() interrupts testcontainers before it holds the container, so its
            # stop() removes nothing: find ours by label (this run, this process) and remove it.
            remove_labelled({"ai.vllm.factory.run": run_id, PID_LABEL: str(os.getpid())})
