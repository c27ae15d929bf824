"""How each process of a deployment runs: the run spec, computed once on the finished plan.

Every format prints it and none decides a run option of its own: compose files, `factory show`'s
`docker run` lines, the container validation starts, Kubernetes manifests. A value that depends on which
node a process runs on is a `FromIndex`, a function of the node's index in its group (0 for the first),
so one worker spec serves every rank: `--node-rank` is the index, `--data-parallel-start-rank` the index
times the local data-parallel size, a pool node's address the setting of that node.

Settings stay named (`$HEAD_IP`, `$BIND_ADDRESS`); secrets are references, never values.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict

from factory.catalog.schema import GpuRequest, PodRequests, Secret, Server, Vendor, Volume
from factory.plan.settings import PLACEHOLDER, known_setting, setting
from factory.synthesis.args import flag_value, int_value


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class FromIndex(Frozen):
    """A value computed from the index of the node a process runs on (0: its group's first node)."""

    times: int = 1  # the index times this (--node-rank: 1; --data-parallel-start-rank: the local DP size)
    address_of: str | None = None  # else the address setting of that node of this pool: $PREFILL_NODE_<i+1>

    def at(self, index: int) -> str:
        if self.address_of is not None:
            return f"${self.address_of}_NODE_{index + 1}"
        return str(index * self.times)


Value = str | FromIndex


def value_at(value: Value, index: int) -> str:
    return value.at(index) if isinstance(value, FromIndex) else value


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


class RunSpec(Frozen):
    """One process as it runs: what every format prints.

    A spec whose values contain FromIndex is a template; `at(index)` gives the spec of one node."""

    image: str  # a reference, or a $SETTING naming one (the PD router's, for now)
    platform: str  # the CPU platform the image is built for (linux/amd64, linux/arm64)
    program: Literal["vllm", "vllm-router"]
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
    port: int  # the port the process listens on (its own --port, else the server's)
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
    def bind(self) -> Value:
        """The address it listens on: its --host (a setting on the host's network), else every interface of
        its own container (vLLM's default)."""
        return _flag_value(self.args, "--host") or "0.0.0.0"

    @property
    def served_names(self) -> tuple[str, ...]:
        """The model names clients ask it for: the values of its last `--served-model-name` (one or more,
        as vLLM's argparse takes them), else its model argument (vLLM's default); none for the router."""
        if self.program != "vllm":
            return ()
        argv = self.argv
        names: tuple[str, ...] = ()
        for position, arg in enumerate(argv):
            if arg == "--served-model-name":
                following = argv[position + 1 :]
                ends = next((i for i, token in enumerate(following) if token.startswith("-")), len(following))
                names = tuple(following[:ends])
            elif arg.startswith("--served-model-name="):
                names = (arg.split("=", 1)[1],)
        if names:
            return names
        return (argv[0],) if argv and not argv[0].startswith("-") else ()

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


# Flags whose value is the node's index times a constant: the rank arithmetic of vLLM's launchers.
RANK_FLAGS = ("--node-rank", "--data-parallel-start-rank")


def gpus_used(args: Sequence[str], gpus_per_node: int, needs_gpus: bool) -> int:
    """The GPUs one node's process uses: tensor x pipeline parallel spread over its nodes, times the data
    parallel ranks it runs locally; the whole node where a size is a setting or larger than the node."""
    if not needs_gpus:
        return 0

    def size(flag: str, default: int) -> int | None:
        value = flag_value(list(args), flag)
        if value is None:
            return default
        number = int_value(value)
        return number if number is not None and number >= 0 else None

    tp, pp, nnodes = (
        size("--tensor-parallel-size", 1),
        size("--pipeline-parallel-size", 1),
        size("--nnodes", 1),
    )
    local = size("--data-parallel-size-local", 0)
    if local == 0:
        local = size("--data-parallel-size", 1)
    if None in (tp, pp, nnodes, local) or not nnodes:
        return gpus_per_node
    assert tp is not None and pp is not None and local is not None and nnodes is not None
    used = max(1, (tp * pp) // nnodes) * max(1, local)
    return min(gpus_per_node, used)


class Run(Frozen):
    """What every process of one image has in common, from the catalog: the run-time half of a vendor and
    the server."""

    vendor: Vendor
    server: Server
    gpus_per_node: int
    start_period_s: int
    weights_gb: float | None = None  # the checkpoint a process downloads (None: unknown, or in the image)


def process_spec(
    run: Run,
    image: str,
    platform: str,
    program: Literal["vllm", "vllm-router"],
    args: Sequence[Value],
    env: Sequence[tuple[str, Value]],
    host_network: bool,
    serves_http: bool,
    port: int | None,
    labels: dict[str, str],
) -> RunSpec:
    """One process's spec: its command from the plan, everything else from the catalog."""
    server, vendor = run.server, run.vendor
    port_flag = _flag_value(args, "--port")
    port_setting = _setting_named(port_flag)
    # `--port $ROUTER_PORT` (the PD router): it listens on that setting's default unless set otherwise.
    if port is None and port_setting is not None:
        default = setting(port_setting).default
        port = int(default) if default and default.isdigit() else None
    listens = port or server.port
    host_flag = _flag_value(args, "--host")
    probe = (
        HealthProbe(
            path=server.health_path,
            port=listens,
            host=host_flag if host_flag is not None else "127.0.0.1",
            start_period_s=run.start_period_s,
            interval_s=server.health_interval_s,
            timeout_s=server.health_timeout_s,
            retries=server.health_retries,
            port_setting=port_setting,
        )
        if serves_http
        else None
    )
    concrete = [arg for arg in args if isinstance(arg, str)]
    is_vllm = program == "vllm"
    return RunSpec(
        image=image,
        platform=platform,
        program=program,
        args=tuple(args),
        env=tuple(env),
        secrets=tuple(server.secrets) if is_vllm else (),
        gpu_request=vendor.gpu_request if is_vllm else None,
        gpus=gpus_used(concrete, run.gpus_per_node, vendor.gpu_check is not None) if is_vllm else 0,
        devices=tuple(vendor.devices) if is_vllm else (),
        groups=tuple(group.group for group in vendor.group_add) if is_vllm else (),
        security_opt=tuple(vendor.security_opt) if is_vllm else (),
        capabilities=tuple(server.capabilities) if is_vllm else (),
        shm_size=vendor.shm_size if is_vllm else None,
        ulimits=tuple(server.ulimits.items()) if is_vllm else (),
        port=listens,
        network="host" if host_network else "published",
        probe=probe,
        volumes=tuple(server.volumes) if is_vllm else (),
        labels=tuple(sorted(labels.items())),
        gpu_resource=vendor.kubernetes_resource if is_vllm else None,
        restart=server.restart,
        publish_address=str(server.publish_address),
        requests=vendor.pod_requests if is_vllm else server.router_requests,
        cache_gb=run.weights_gb if is_vllm else None,
    )


def _setting_named(value: Value | None) -> str | None:
    """The setting a whole value names (`$ROUTER_PORT`), if the factory knows it."""
    match = PLACEHOLDER.fullmatch(value) if isinstance(value, str) else None
    name = (match.group("braced") or match.group("bare")) if match else None
    return name if name is not None and known_setting(name) is not None else None


def _flag_value(args: Sequence[Value], flag: str) -> Value | None:
    """The value after the last `flag` in `args`, or of its last `flag=value` (a FromIndex stays one)."""
    found: Value | None = None
    for position, arg in enumerate(args):
        if arg == flag and position + 1 < len(args):
            found = args[position + 1]
        elif isinstance(arg, str) and arg.startswith(f"{flag}="):
            found = arg[len(flag) + 1 :]
    return found


def template_of(nodes: Sequence[tuple[int, Sequence[str]]], pool: str | None) -> list[Value] | None:
    """One argument list for every (index, args) node, with the rank-dependent values as FromIndex: the
    values of RANK_FLAGS, and (in a pool) the pool's node addresses. None when the nodes differ in any
    other way, or a rank value is not the index times one constant."""
    first = nodes[0][1]
    if all(index == 0 for index, _ in nodes):
        return list(first)  # a head: index 0 only, its values stay as written
    if any(len(args) != len(first) for _, args in nodes):
        return None
    template: list[Value] = []
    for position, token in enumerate(first):
        column = [(index, args[position]) for index, args in nodes]
        if all(value == token for _, value in column) and not _is_rank_value(first, position, pool):
            template.append(token)
            continue
        derived = _derive(first, position, column, pool)
        if derived is None:
            return None
        template.append(derived)
    return template


def _is_rank_value(args: Sequence[str], position: int, pool: str | None) -> bool:
    previous = args[position - 1] if position else None
    if previous in RANK_FLAGS:
        return True
    return pool is not None and args[position].startswith(f"${pool.upper()}_NODE_") and previous == "--host"


def _derive(
    args: Sequence[str], position: int, column: list[tuple[int, str]], pool: str | None
) -> FromIndex | None:
    previous = args[position - 1] if position else None
    if previous in RANK_FLAGS:
        numbers = [(index, int_value(value)) for index, value in column if index]
        factors = {number // index for index, number in numbers if number is not None and number >= 0}
        candidate = FromIndex(times=factors.pop() if len(factors) == 1 else 1)
    elif pool is not None and previous == "--host":
        candidate = FromIndex(address_of=pool.upper())
    else:
        return None
    return candidate if all(candidate.at(index) == value for index, value in column) else None
