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

from pydantic import BaseModel, ConfigDict

from factory.catalog.schema import (
    GpuRequest,
    MooncakeProcesses,
    PodRequests,
    RouterProcess,
    Secret,
    Server,
    Vendor,
    Volume,
)
from factory.plan.settings import known_setting
from factory.synthesis.options import ServeOptions, Value
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
    "value_at",
]


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def value_at(value: Value, index: int) -> str:
    return value.at(index) if isinstance(value, FromIndex) else value


# The programs a deployment's processes run.
Program = Literal["vllm", "vllm-router", "mooncake-master", "mooncake-store"]


class ConfigMount(Frozen):
    """A config file a process reads, generated beside its deployment's files: a template whose $SETTINGS
    are filled from the process's environment when it starts (so a setting changes it, never a hand edit)."""

    file: str  # the generated file's name (mooncake-vllm.json)
    template: str  # where the process finds the template (/etc/mooncake/vllm.json)
    filled: str  # where the filled file is written, which the process reads
    content: str


class HealthProbe(Frozen):
    """How the process says it is ready: an HTTP GET every interval once the start period allows."""

    path: str
    port: int
    host: Value  # where to ask: the address the process listens on
    port_setting: str | None = None  # the port is this setting's value (`port` its default): the PD router's
    start_period_s: int
    interval_s: int
    timeout_s: int
    retries: int

    def url(self, host: str) -> str:
        port = f"${self.port_setting}" if self.port_setting else self.port
        return f"http://{host}:{port}{self.path}"

    def command(self, host: str) -> list[str]:
        """The check Docker runs inside the container (the image's own HEALTHCHECK runs the same)."""
        return ["curl", "-fsS", "-o", "/dev/null", self.url(host)]

    @property
    def check(self) -> list[str]:
        """The check at the address the process listens on (a node's probe, not a template's)."""
        if not isinstance(self.host, str):
            raise ValueError(f"a template's probe ({self.host}) has no single address: take one node's")
        return self.command(self.host)


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
    cache_gb: float | None = None  # the checkpoint it downloads into the model cache (None: unknown, none)

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
    weights_gb: float | None = None  # the checkpoint a process downloads (None: unknown, or in the image)


class Programs(Frozen):
    """What the catalog says of each program a process runs: its default port, where it says it is ready,
    its own start."""

    server: Server  # vLLM's
    router: RouterProcess
    mooncake: MooncakeProcesses = MooncakeProcesses()

    def default_port(self, program: Program) -> int:
        return {
            "vllm": self.server.port,
            "vllm-router": self.router.default_port,
            "mooncake-master": self.mooncake.master.port,
            "mooncake-store": self.mooncake.store.port,
        }[program]


def listening_port(programs: Programs, program: Program, options: ServeOptions) -> tuple[int, str | None]:
    """The port a process listens on, and the setting that holds it: its --port; `--port $ROUTER_PORT`, that
    setting's default (the setting may move it); else its program's default (vLLM's, vllm-router's, the
    Mooncake master's admin port, the store service's REST port)."""
    if program.startswith("mooncake-"):  # their flags name other ports (-rpc_port): their own defaults
        return programs.default_port(program), None
    known = known_setting(options.port_setting) if options.port_setting else None
    setting = options.port_setting if known else None
    default = known.default if known else None
    found = options.port or (int(default) if default and default.isdigit() else None)
    return found or programs.default_port(program), setting


def health_probe(
    programs: Programs, program: Program, options: ServeOptions, start_period_s: int
) -> HealthProbe | None:
    """How a process says it is ready, from what its command says and the program's own facts: asked on the
    port and address it listens on, within its own start budget: vLLM's is the model's (`start_period_s`),
    the router's its wait for its workers (--worker-startup-timeout-secs, else its default) plus its own
    start, a Mooncake process's its own (the catalog's). None for a headless rank (it serves no API)."""
    if options.headless:
        return None
    server, router = programs.server, programs.router
    port, setting = listening_port(programs, program, options)
    wait = options.worker_wait_s if options.worker_wait_s is not None else router.worker_wait_default_s
    master, store = programs.mooncake.master, programs.mooncake.store
    path, start, interval = {
        "vllm": (server.health_path, start_period_s, server.health_interval_s),
        "vllm-router": (router.health_path, router.start_period_s + wait, server.health_interval_s),
        "mooncake-master": (master.health_path, master.start_period_s, master.health_interval_s),
        "mooncake-store": (store.health_path, store.start_period_s, store.health_interval_s),
    }[program]
    return HealthProbe(
        path=path,
        port=port,
        host=options.host if options.host is not None else "127.0.0.1",
        start_period_s=start,
        interval_s=interval,
        timeout_s=server.health_timeout_s,
        retries=server.health_retries,
        port_setting=setting,
    )


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
