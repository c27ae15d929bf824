"""Deployments: one way to run an image (a strategy on a node count), with one NodeRole per process (its
full command and environment) and the run spec every format prints; the deviations from the site's command,
with the edits each made; and the combinations left out, with why."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from factory.catalog.schema import Vendor
from factory.plan import naming
from factory.plan.fleet import Fleet
from factory.plan.models import Frozen, ImagePlan
from factory.plan.runspec import Launch, ProcessGroup, Program, RunSpec, value_at
from factory.synthesis import options
from factory.synthesis.options import ServeOptions, Value, as_value


class NodeRole(Frozen):
    """One process of a deployment: a node's `vllm serve`, a PD pool's node, or the PD router. Its values are
    typed (a rank or a pool node's own address is the rule that gives it on every node, FromIndex), and what
    its server reads from them was read once, when its flags were final (`options`)."""

    name: str  # node; head, worker-1, ...; prefill, prefill-1, decode, ...; router
    pool: str | None = None  # prefill or decode for a PD pool's process
    rank: int  # its index in its group: the value each FromIndex is taken at
    program: Program = "vllm"
    args: list[Value]  # after `vllm serve` ([model, *flags]), after `vllm-router`, after a Mooncake program
    env: dict[str, Value]
    options: ServeOptions
    launch: Launch = Launch()  # how it starts, when not as its image does (Mooncake processes)

    @property
    def serves_http(self) -> bool:
        return not self.options.headless

    @property
    def words(self) -> list[str]:
        """Its arguments as this node runs them."""
        return [value_at(arg, self.rank) for arg in self.args]

    @property
    def environment(self) -> dict[str, str]:
        return {name: value_at(value, self.rank) for name, value in self.env.items()}

    @property
    def argv(self) -> list[str]:
        """The whole command as its program runs it, in the upstream JSON API's shape (a launcher the
        factory puts in front, factory-fill-config, left out)."""
        heads = {"vllm": ["vllm", "serve"], "vllm-router": ["vllm-router"]}
        return [*heads.get(self.program, list(self.launch.program)), *self.words]


def node_role(
    name: str,
    rank: int,
    args: Sequence[str],
    env: dict[str, str],
    pool: str | None = None,
    program: Program = "vllm",
    launch: Launch | None = None,
) -> NodeRole:
    """A process from its final flags and environment as synthesis and the deviations left them: each
    token typed, and the options its server reads from them read once, here."""
    return NodeRole(
        name=name,
        pool=pool,
        rank=rank,
        program=program,
        args=[as_value(arg) for arg in args],
        env={key: as_value(value) for key, value in env.items()},
        options=options.read(args),
        launch=launch or Launch(),
    )


class FlagEdit(Frozen):
    """One change a deviation rule made to a process's flags: the site's tokens (`before`, empty when the
    site has none) became the factory's (`after`, empty when the factory dropped them). `process` is the
    process's key path in a rendering (`argv`, `head_argv`, `worker_argvs[0]`, `roles.prefill.argv`, ...)."""

    process: str
    before: list[str]
    after: list[str]


class EnvEdit(Frozen):
    """One change a deviation rule made to a process's environment (None: the variable is not set)."""

    process: str  # `env`, `roles.prefill.env`, ...
    env: str
    before: str | None
    after: str | None


class ConfigEdit(Frozen):
    """One change to a generated config's value (a Mooncake config), the site's before and the factory's
    after (None: the key is not there)."""

    process: str  # `store.config`, `mooncake_config`
    key: str
    before: str | int | float | bool | None
    after: str | int | float | bool | None


class Deviation(Frozen):
    """Where this deployment's commands differ from the upstream site's, why, and exactly how: each edit
    was recorded by the rule when it was applied, never found by comparing with the site."""

    flag: str
    reason: str
    edits: list[FlagEdit | EnvEdit | ConfigEdit] = []


PD_ROUTER = "the router in front of the prefill and decode pools"
TITLES = {
    "vllm-router": "the cache-aware router in front of the instances",
    "mooncake-master": "the Mooncake master (metadata; every instance and the store meet there)",
    "mooncake-store": "the Mooncake store service (the pool's memory)",
}


class Deployment(Frozen):
    """One way to run an image: a strategy on a node count, one NodeRole per process."""

    image: ImagePlan
    strategy: str  # the strategy's id, e.g. multi_node_tp: its file name and its compose folder
    strategy_title: str  # its display name, e.g. "Multi-Node Tensor Parallel"
    deploy_type: Literal["single_node", "multi_node", "pd_cluster", "kv_store_lb"]
    nodes: int
    roles: list[NodeRole]
    host_network: bool
    vendor: Vendor  # what the containers need to see the GPUs
    deviations: list[Deviation]
    recommended: bool  # the strategy the recipes site recommends on this hardware
    run: tuple[ProcessGroup, ...]  # how every process runs: what each format prints
    fleet: Fleet  # its metrics, scaling, inference pool and clients (the Kubernetes components print it)
    kv_offload: str | None = None  # the KV-offload option composed with the strategy (`factory show`)
    kv_offload_notes: tuple[str, ...] = ()  # what such a deployment lacks to start as printed

    @property
    def layout(self) -> str:
        """What names it among the image's deployments, in paths and names: its strategy, and the KV-offload
        option when one composes with it (so the two never replace each other)."""
        return naming.layout(self.strategy, self.kv_offload)

    @property
    def name(self) -> str:
        """Its name in every format and report (its containers carry it as a label)."""
        image = self.image
        return naming.deployment_name(image.slug, image.hardware, image.variant, self.layout)

    def process_name(self, role: NodeRole) -> str:
        """One process of it, as validation and its reports name it: <deployment>/<role>."""
        return f"{self.name}/{role.name}"

    def role_title(self, role: NodeRole) -> str:
        if len(self.roles) == 1:
            return "one node"
        if role.program in TITLES:
            return TITLES[role.program] if self.deploy_type != "pd_cluster" else PD_ROUTER
        if role.pool and self.deploy_type == "kv_store_lb":
            kind = "its head" if role.rank == 0 else f"its node rank {role.rank}"
            size = f"{self.nodes} node{'s' if self.nodes > 1 else ''}"
            return f"{role.pool.replace('-', ' ')} ({size}), {kind} ({role.name})"
        what = (
            f"{role.pool} pool, node {role.rank}" if role.pool else f"node rank {role.rank} of {self.nodes}"
        )
        return f"{what} ({role.name}{'' if role.serves_http else ', headless'})"

    def spec(self, role: NodeRole) -> RunSpec:
        """How that process runs: its node's spec from the group that runs it."""
        for group in self.run:
            if role.name in group.names:
                return group.node(role.name)
        raise KeyError(f"no process {role.name} in {self.strategy}")


class Skipped(Frozen):
    """A combination the factory does not generate, and why."""

    recipe: str
    model: str
    variant: str | None = None
    hardware: str | None = None
    strategy: str | None = None
    reason: str

    @property
    def what(self) -> str:
        parts = [self.recipe]
        parts += [f"on {self.hardware}"] if self.hardware else []
        parts += [f"({self.variant})"] if self.variant else []
        parts += [f"with {self.strategy}"] if self.strategy else []
        return " ".join(parts)
