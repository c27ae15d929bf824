"""How each process of a deployment runs: the run spec, computed once on the finished plan.

Every format prints it and none decides a run option of its own: compose files, `factory show`'s
`docker run` lines, the container validation starts, Kubernetes manifests. A value that depends on which
node a process runs on is a `FromIndex`, a function of the node's index in its group (0 for the first),
so one worker spec serves every rank; synthesis wrote it typed (factory.synthesis.values), and the port,
address, served names and parallel sizes come read once from the final command (factory.synthesis.options):
no value here is read back out of a flag.

Settings stay named (`$HEAD_IP`, `$BIND_ADDRESS`); secrets are references, never values.
"""

from __future__ import annotations

import json
from typing import Literal

from factory.catalog.schema import (
    GpuRequest,
    ImageUser,
    Liveness,
    MooncakeProcesses,
    PodRequests,
    RouterProcess,
    Secret,
    Server,
    Vendor,
    Volume,
    Writable,
)
from factory.plan.health import (
    Frozen,
    HealthProbe,
    Program,
    Programs,
    health_probe,
    listening_port,
)
from factory.synthesis.options import Value
from factory.synthesis.values import FromIndex

SERVED_LABEL = "ai.vllm.factory.served-model-names"  # a JSON list: names may hold any character

__all__ = [
    "ConfigMount",
    "FromIndex",
    "HealthProbe",
    "Launch",
    "ProcessGroup",
    "Program",
    "Programs",
    "Run",
    "RunSpec",
    "Value",
    "health_probe",
    "listening_port",
    "value_at",
]


def value_at(value: Value, index: int) -> str:
    return value.at(index) if isinstance(value, FromIndex) else value


class ConfigMount(Frozen):
    """A config file a process reads, generated beside its deployment's files: a template whose $SETTINGS
    are filled from the process's environment when it starts (so a setting changes it, never a hand edit)."""

    file: str  # the generated file's name (mooncake-vllm.json)
    template: str  # where the process finds the template (/etc/mooncake/vllm.json)
    filled: str  # where the filled file is written, which the process reads
    content: str


class RunSpec(Frozen):
    """One process as it runs: what every format prints.

    A spec whose values contain FromIndex is a template; `at(index)` gives the spec of one node."""

    image: str  # a reference, or a $SETTING naming one (the PD router's, for now)
    platform: str  # the CPU platform the image is built for (linux/amd64, linux/arm64)
    program: Program
    # What starts the program, when not the image's own entrypoint (a Mooncake process; a process whose
    # config is filled first): the command before `args`.
    entrypoint: tuple[str, ...] = ()
    configs: tuple[ConfigMount, ...] = ()  # generated config templates it reads, filled when it starts
    after: tuple[str, ...] = ()  # the processes of its deployment that must answer before it starts
    args: tuple[Value, ...]  # after the entrypoint: `vllm serve`'s [model, *flags], or vllm-router's flags
    env: tuple[tuple[str, Value], ...]
    secrets: tuple[Secret, ...]
    gpu_request: GpuRequest | None  # the engine's GPU driver gives the container the node's GPUs
    gpus: int  # the GPUs the process uses (tensor x pipeline x local data parallel on its node)
    devices: tuple[str, ...]
    groups: tuple[str, ...]  # supplementary groups, names or $SETTINGs
    security_opt: tuple[str, ...]
    capabilities: tuple[str, ...]
    shm_size: str | None  # /dev/shm: a memory-backed file system of this size (None: the runtime's default)
    ulimits: tuple[tuple[str, int], ...]
    port: int  # the port the process listens on (its own --port, else its program's default)
    # Where the deployment's other processes call it besides `port`: the Mooncake master's RPC (its
    # -rpc_port, else Mooncake's default), where every instance and the store service register.
    rpc_port: int | None = None
    served_names: tuple[str, ...]  # the names clients ask it for (its --served-model-name, else its model)
    network: Literal["host", "published"]  # the host's network (nodes meet there), or a published port
    probe: HealthProbe | None  # None: it serves no HTTP (a headless rank)
    volumes: tuple[Volume, ...]
    labels: tuple[tuple[str, str], ...]
    gpu_resource: str | None = None  # the device plugin's resource a pod asks for its GPUs by
    restart: Literal["no", "on-failure", "always", "unless-stopped"] = "no"  # when the process exits
    publish_address: str = "127.0.0.1"  # the host address a published port is bound to by default
    requests: PodRequests | None = None  # what a pod of it asks its node for besides GPUs
    cache_gb: float | None = None  # what its model cache holds, in GB (None: it has none)
    cache_basis: str | None = None  # where that size comes from, in words
    user: ImageUser = ImageUser()  # the image's non-root user, which the process runs as
    # The root filesystem is read-only: every folder it writes is one of `writable` (or a volume, /dev/shm).
    read_only_root: bool = True
    writable: tuple[Writable, ...] = ()
    liveness: Liveness | None = None  # when a scheduler restarts it (None: it serves no health check)
    # The disk it writes, in GiB: its model cache (with room), its writable folders and its logs.
    disk_gib: int = 1

    @property
    def is_template(self) -> bool:
        values = [*self.args, *(value for _, value in self.env)]
        values += [self.probe.host] if self.probe else []
        return any(isinstance(value, FromIndex) for value in values)

    def at(self, index: int) -> RunSpec:
        """The spec of the node at `index`: every FromIndex replaced by its value there."""
        if not self.is_template:
            return self
        probe = (
            self.probe.model_copy(update={"host": value_at(self.probe.host, index)}) if self.probe else None
        )
        return self.model_copy(
            update={
                "args": tuple(value_at(arg, index) for arg in self.args),
                "env": tuple((name, value_at(value, index)) for name, value in self.env),
                "probe": probe,
            }
        )

    @property
    def all_labels(self) -> tuple[tuple[str, str], ...]:
        """The labels every format attaches to the process: the spec's, and the names it answers to (so a
        gateway, or a person, finds what to ask for without reading its command)."""
        served = ((SERVED_LABEL, json.dumps(list(self.served_names))),) if self.served_names else ()
        return (*self.labels, *served)

    @property
    def argv(self) -> list[str]:
        """The concrete arguments (a node's spec, not a template)."""
        return [arg if isinstance(arg, str) else _concrete(arg) for arg in self.args]

    @property
    def environment(self) -> dict[str, str]:
        return {name: value if isinstance(value, str) else _concrete(value) for name, value in self.env}


def _concrete(value: FromIndex) -> str:
    raise ValueError(f"a template's value ({value}) has no single value: take the spec of one node with at()")


class ProcessGroup(Frozen):
    """Processes that run one spec: one node, a head, every worker rank, one PD pool's nodes, the router."""

    names: tuple[str, ...]  # each node's process name (node; head; worker-1, worker-2; prefill-1, ...)
    indices: tuple[int, ...]  # each node's index, the value FromIndex reads
    pool: str | None = None
    spec: RunSpec

    def node(self, name: str) -> RunSpec:
        return self.spec.at(self.indices[self.names.index(name)])


class Run(Frozen):
    """What every process of one image has in common, from the catalog: the run-time half of a vendor and
    the server."""

    vendor: Vendor
    server: Server
    router: RouterProcess
    mooncake: MooncakeProcesses = MooncakeProcesses()
    gpus_per_node: int
    start_period_s: int  # a vLLM process's start budget (the model's)
    cache_gb: float  # what a serving process's model cache holds, in GB
    cache_basis: str  # where that size comes from: the checkpoint, the model files in the tree, a default


# The launcher of a KV-store image that fills a process's config, then runs the process (factory.plan.kv):
# `factory-fill-config TEMPLATE FILLED COMMAND...`.
FILL = "factory-fill-config"


class Launch(Frozen):
    """How a process starts besides its command, when not as its image does: a Mooncake process's program,
    a config filled first, the processes it waits for."""

    entrypoint: tuple[str, ...] = ()
    configs: tuple[ConfigMount, ...] = ()
    after: tuple[str, ...] = ()
    # Memory it holds besides its program's floor (the catalog's requests): the store service's segment and
    # buffer, which its config registers and pins; a pod of it asks for both.
    holds_bytes: int = 0
    # The same for each worker rank (one per GPU; one on CPU): vLLM's MooncakeStoreWorker sets up a store of
    # its own in every rank, registering its config's segment and buffer (an instance of the distributed
    # topology gives its segment to the pool; every instance registers its buffer).
    holds_per_rank_bytes: int = 0

    @property
    def program(self) -> tuple[str, ...]:
        """The program's own words, the fill launcher (the factory's wrapper) left out."""
        return self.entrypoint[3:] if self.entrypoint[:1] == (FILL,) else self.entrypoint
