"""Plan the deployments of one image: the site's commands for each strategy the hardware offers, with the
factory's deliberate deviations applied, as one NodeRole per process."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from factory.base.site_text import site_text
from factory.plan.deployment import Deviation, FlagEdit, NodeRole, node_role
from factory.plan.deviations import Process as Facts
from factory.plan.deviations import apply
from factory.plan.images import model_start_period
from factory.project import Project
from factory.recipes.loader import LoadedRecipe
from factory.recipes.sections import EnvValue
from factory.recipes.tree_schema import Taxonomy
from factory.synthesis.command import Command, Process, resolve
from factory.synthesis.matrix import Combination
from factory.synthesis.selection import KvOffload, Selection
from factory.synthesis.values import own_address


@dataclass(frozen=True)
class PlannedCommands:
    """One combination's processes, before the image they run in exists."""

    combination: Combination
    deploy_type: Literal["single_node", "multi_node", "pd_cluster"]
    roles: tuple[NodeRole, ...]
    deviations: tuple[Deviation, ...]


def env_text(value: EnvValue) -> str:
    """An environment value as the site prints it (JavaScript's String(): YAML's `1.0` is `1`, `.inf` is
    `Infinity`, `1e-7` is `1e-7`, `true` is `true`); text stays the token it is (a pool node's own address
    keeps its rule)."""
    return value if isinstance(value, str) else site_text(value)


def offload(taxonomy: Taxonomy, key: str | None) -> KvOffload | None:
    return KvOffload(key, taxonomy.kv_offload[key]) if key is not None else None


def plan_commands(
    project: Project, loaded: LoadedRecipe, combination: Combination, version: str | None, weights: str
) -> PlannedCommands:
    """The site's commands for one combination, each process then changed by the catalog's rules."""
    tree = project.tree
    selection = Selection(
        loaded.recipe,
        combination.variant,
        combination.strategy,
        combination.hardware,
        combination.features,
        combination.node_count,
        combination.pd_nodes,
        kv_offload=offload(tree.taxonomy, combination.kv_offload),
    )
    command = resolve(selection, tree.strategies, tree.taxonomy)
    finisher = Finisher(project, loaded, version, weights, command)
    roles = finisher.roles()
    # The shape the commands have: a multi-node strategy on one node is the site's single-node command.
    shape: Literal["single_node", "multi_node", "pd_cluster"] = (
        "pd_cluster" if command.pools else "multi_node" if len(command.nodes) > 1 else "single_node"
    )
    return PlannedCommands(combination, shape, tuple(roles), tuple(finisher.deviations.values()))


class Finisher:
    """Turns the site's processes into the factory's NodeRoles: model, pinned revision, deviations."""

    def __init__(
        self, project: Project, loaded: LoadedRecipe, version: str | None, weights: str, command: Command
    ) -> None:
        self.rules = project.catalog.deviations
        self.recipe = loaded.recipe
        self.version = version
        self.weights = weights
        self.command = command
        self.bundled = loaded.bundled_model_dir is not None
        self.deviations: dict[str, Deviation] = {}

    def record(self, deviation: Deviation) -> None:
        """One deviation per rule for the deployment, with the edits it made on every process."""
        known = self.deviations.get(deviation.flag)
        if known is not None:
            deviation = known.model_copy(update={"edits": [*known.edits, *deviation.edits]})
        self.deviations[deviation.flag] = deviation

    def roles(self) -> list[NodeRole]:
        command = self.command
        if command.deploy_type == "pd_cluster":
            roles = [
                self.role(pool.role if rank == 0 else f"{pool.role}-{rank}", rank, process, pool=pool.role)
                for pool in command.pools
                for rank, process in enumerate(pool.processes)
            ]
            router = self.router_role(list(command.router[1:]))
            return [*roles, router]
        if command.deploy_type == "multi_node":
            return [
                self.role("head" if rank == 0 else f"worker-{rank}", rank, process)
                for rank, process in enumerate(command.nodes)
            ]
        return [self.role("node", 0, command.nodes[0])]

    def router_role(self, args: list[str], path: str = "roles.router.argv") -> NodeRole:
        """The router, changed by the rules for it: it waits as long as the processes it fronts take to
        start."""
        about = Facts(
            self.version,
            self.recipe.model.context_length,
            True,
            "$ROUTER_HOST",
            path,
            program="vllm-router",
            workers_start_s=model_start_period(self.recipe.model.parameter_count),
        )
        flags, applied = apply(self.rules, args, about)
        for deviation in applied:
            self.record(deviation)
        return node_role("router", 0, flags, {}, program="vllm-router")

    def role(
        self,
        name: str,
        rank: int,
        process: Process,
        pool: str | None = None,
        bind: str | None = None,
        path: str | None = None,
    ) -> NodeRole:
        """One process: the rules applied (`bind`: where it listens on the host's network, by default a PD
        pool node's own address, else where the user says; `path`: its key in a rendering)."""
        if bind is None:
            bind = own_address(pool, rank) if pool else "$BIND_ADDRESS"
        path = path or self.path(rank, pool)
        about = Facts(
            self.version,
            self.recipe.model.context_length,
            self.command.deploy_type != "single_node",
            bind,
            path,
        )
        flags, applied = apply(self.rules, process.args, about)
        for deviation in applied:
            self.record(deviation)
        flags = [*self.model_flags(path), *flags]
        env = {key: env_text(value) for key, value in process.env.items()}
        return node_role(name, rank, [self.weights, *flags], env, pool=pool)

    def path(self, rank: int, pool: str | None) -> str:
        """The process's key path in a rendering (factory.report.renderings), which its edits name."""
        if pool:
            return f"roles.{pool}.argv" if rank == 0 else f"roles.{pool}.node_argvs[{rank}]"
        if len(self.command.nodes) > 1:
            return "head_argv" if rank == 0 else f"worker_argvs[{rank - 1}]"
        return "argv"

    def model_flags(self, path: str) -> list[str]:
        """What the factory adds before the site's flags: the served name of a model the image carries, and
        the pinned revision of code and weights (--trust-remote-code runs the repository's code)."""
        flags = []
        if self.bundled:
            served = ["--served-model-name", self.command.model]
            flags += served
            why = "the image carries the model; it serves it by its id"
            self.record(
                Deviation(flag=served[0], reason=why, edits=[FlagEdit(process=path, before=[], after=served)])
            )
        revision = self.recipe.model.revision
        if revision:
            for flag in ("--revision", "--code-revision"):
                pinned = [flag, revision]
                flags += pinned
                why = "the recipe pins the model's revision (weights and, with --trust-remote-code, code)"
                self.record(
                    Deviation(flag=flag, reason=why, edits=[FlagEdit(process=path, before=[], after=pinned)])
                )
        return flags


def default_command(planned: list[PlannedCommands], weights: str) -> list[str]:
    """What `docker run IMAGE` serves: the recommended deployment when it is one node, else the first
    one-node deployment, else the model alone."""
    singles = [p for p in planned if p.deploy_type == "single_node"]
    chosen = next((p for p in singles if p.combination.recommended), singles[0] if singles else None)
    return chosen.roles[0].words if chosen else [weights]


def common_env(planned: list[PlannedCommands]) -> dict[str, str]:
    """The variables every process of every deployment sets to one value, placeholders aside: the image's
    ENV. (A variable only some deployments set stays in their compose files: an image cannot unset it.)"""
    envs = [role.environment for p in planned for role in p.roles if role.program == "vllm"]
    if not envs:
        return {}
    first = envs[0]
    return {
        key: value
        for key, value in first.items()
        if "$" not in value and all(env.get(key) == value for env in envs[1:])
    }
