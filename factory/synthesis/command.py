"""The `vllm serve` commands of one deployment, exactly as the upstream recipes site synthesizes them.

A port of resolveCommand (src/lib/command-synthesis.js): arguments in the site's order (base, variant,
strategy with its parallel sizes, strategy overrides, hardware overrides, features), later duplicates
winning; the environment in its order; single-node, multi-node (head and every follower rank) and
pd_cluster (prefill and decode pools, router) shapes. The factory's own deliberate differences are
applied afterwards, from data (factory.plan.deviations), never here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from factory.recipes.schema import Recipe
from factory.recipes.sections import EnvValue
from factory.recipes.tree_schema import HardwareProfile, KvStore, Strategy, Taxonomy
from factory.synthesis import multinode, pd
from factory.synthesis.args import dedupe
from factory.synthesis.env import build_env
from factory.synthesis.features import allowed_for_strategy, feature_args
from factory.synthesis.hardware import generation_block, keyed_value
from factory.synthesis.multinode import HEAD
from factory.synthesis.pd import PdRoleMeta
from factory.synthesis.selection import Selection


@dataclass(frozen=True)
class Process:
    """One `vllm serve` process: one node of a deployment, or one node of a PD pool."""

    args: tuple[str, ...]  # the flags after `vllm serve MODEL`, deduplicated
    env: dict[str, EnvValue]

    def argv(self, model: str) -> list[str]:
        return ["vllm", "serve", model, *self.args]


@dataclass(frozen=True)
class KvInstance:
    """A vLLM instance of a KV-store deployment: the store it shares, and where its ranks meet."""

    store: KvStore
    head: str


@dataclass(frozen=True)
class Pool:
    """A pd_cluster pool (prefill or decode): one process per node it spans (at least one)."""

    role: str
    meta: PdRoleMeta
    processes: tuple[Process, ...]


@dataclass(frozen=True)
class Command:
    deploy_type: str  # single_node, multi_node, pd_cluster
    model: str
    node_count: int
    nodes: tuple[Process, ...] = ()  # single node: one; multi-node: the head, then each follower rank
    pools: tuple[Pool, ...] = ()  # pd_cluster: prefill, then decode
    router: tuple[str, ...] = ()  # pd_cluster: the vllm-router argv
    companions: tuple[str, ...] = field(default=())  # helper commands a feature runs beside vllm serve


def served_model(recipe: Recipe, variant_key: str) -> str:
    variant = recipe.variants.get(variant_key) or recipe.variants.get("default")
    return (variant.model_id if variant else None) or recipe.model.model_id


def single_node_tp(selection: Selection, profile: HardwareProfile) -> int:
    """Single-node TP: the variant's `tp`, else the strategy override's, else 1 when the weights fit one
    GPU and the whole node when not. TEP and DEP always use the whole node."""
    gpus = profile.gpu_count or 1
    if selection.strategy_name != "single_node_tp":
        return gpus
    recipe = selection.recipe
    variant = recipe.variants[selection.variant_key]
    is_cpu = profile.generation == "cpu"  # a CPU profile's gpu_count is no limit on TP
    override = recipe.strategy_overrides.get("single_node_tp")
    for declared in (variant.tp, override.tp if override else None):
        size = declared if isinstance(declared, int) else keyed_value(declared, profile, selection.profile_id)
        if isinstance(size, int) and size > 0:
            return size if is_cpu else min(size, gpus)
    per_gpu = profile.vram_gb / gpus if profile.vram_gb and gpus else 0
    needed = variant.vram_minimum_gb or 0
    if not needed or per_gpu <= 0:
        return gpus
    return 1 if needed <= per_gpu else gpus


def build_args(
    selection: Selection,
    strategy: Strategy,
    profile: HardwareProfile,
    role: str | None = None,
    node_role: str | None = None,
    rank: int = 1,
    kv: KvInstance | None = None,
) -> list[str]:
    """The undeduplicated flags of one process, in the site's order; `kv`: the process is an instance of
    a KV-store deployment (its rendezvous address, its connector flags last)."""
    recipe = selection.recipe
    variant = recipe.variants[selection.variant_key]
    exact = variant.hardware_overrides.get(selection.profile_id)
    args = [*recipe.model.base_args, *variant.extra_args, *(exact.extra_args if exact else [])]
    if strategy.deploy_type != "pd_cluster":
        args += strategy.vllm_args
    elif role:
        args += pd.role_spec(strategy, role).vllm_args
    args += parallel_args(selection, strategy, profile, role, node_role, rank, kv.head if kv else HEAD)
    override = recipe.strategy_overrides.get(selection.strategy_name)
    if override:
        part = getattr(override, role) if role else override
        if part:
            args += [*part.extra_args, *part.vllm_args]
    args += hardware_args(selection, profile, role)
    # A feature that runs a helper process beside vLLM is left out of a KV-store instance (the site's).
    composing = kv is not None and strategy.deploy_type != "pd_cluster"
    for name in selection.features:
        feature = recipe.features.get(name)
        if feature and composing and feature.companion is not None and feature.companion.command:
            continue
        if feature and allowed_for_strategy(feature, selection.strategy_name):
            args += feature_args(feature, name, recipe, selection.variant_key, profile, selection.profile_id)
    if selection.kv_offload is not None:  # step 8: last, so its --kv-transfer-config wins the dedupe
        args += selection.kv_offload.option.args
    if kv is None:
        return args
    if strategy.deploy_type == "pd_cluster":  # each pool's NIXL connector becomes NIXL and Mooncake
        pool = getattr(kv.store.pd, role) if kv.store.pd and role else None
        return [*args, *(pool.args if pool else [])]
    return [*args, *kv.store.vllm.vllm_args]


def parallel_args(
    selection: Selection,
    strategy: Strategy,
    profile: HardwareProfile,
    role: str | None,
    node_role: str | None,
    rank: int,
    head: str = HEAD,
) -> list[str]:
    """Step 3 of the site's order: the parallel sizes and the rendezvous of this process."""
    if strategy.deploy_type == "multi_node" and selection.node_count > 1:
        return multinode.args(
            selection.recipe,
            selection.strategy_name,
            strategy,
            profile,
            selection.profile_id,
            selection.node_count,
            node_role,
            rank,
            head,
        )
    if strategy.deploy_type == "pd_cluster":
        assert role is not None
        return pd.pool_args(
            selection.recipe,
            selection.strategy_name,
            strategy,
            profile,
            role,
            selection.pd_nodes,
            selection.node_count,
        )
    return [strategy.parallel_flag, str(single_node_tp(selection, profile))]


def hardware_args(selection: Selection, profile: HardwareProfile, role: str | None) -> list[str]:
    """Step 5: a strategy's generation override replaces the recipe's and the variant's; exact-GPU
    strategy and pool overrides are added last."""
    recipe = selection.recipe
    variant = recipe.variants[selection.variant_key]
    override = recipe.strategy_overrides.get(selection.strategy_name)
    strategy_block = generation_block(override.hardware_overrides, profile) if override else None
    args: list[str] = []
    if strategy_block is not None:
        args += strategy_block.extra_args
    else:
        for mapping in (recipe.hardware_overrides, variant.hardware_overrides):
            block = generation_block(mapping, profile)
            args += block.extra_args if block else []
    if override:
        exact = override.hardware_overrides.get(selection.profile_id)
        args += exact.extra_args if exact else []
        pool = getattr(override, role) if role else None
        pool_exact = pool.hardware_overrides.get(selection.profile_id) if pool else None
        args += pool_exact.extra_args if pool_exact else []
    return args


def resolve(
    selection: Selection,
    strategies: dict[str, Strategy],
    taxonomy: Taxonomy,
    kv_store: KvStore | None = None,
) -> Command:
    """The commands of one deployment: every node's flags and environment. `kv_store` (pd_cluster only):
    Mooncake composed with the pools, as the site's command builder composes it (its JSON API writes
    the plain pools)."""
    strategy = strategies[selection.strategy_name]
    profile = taxonomy.hardware_profiles[selection.profile_id]
    model = served_model(selection.recipe, selection.variant_key)

    def process(role: str | None = None, node_role: str | None = None, rank: int = 1) -> Process:
        args = build_args(selection, strategy, profile, role, node_role, rank)
        env = build_env(selection, strategy, profile, role)
        return Process(tuple(dedupe(args)), env)

    if strategy.deploy_type == "pd_cluster":
        pools = tuple(
            Pool(
                role,
                meta,
                tuple(
                    process_at_rank(selection, strategy, profile, role, rank, kv_store)
                    for rank in range(max(1, meta.nodes))
                ),
            )
            for role, meta in pd.role_metas(
                selection.recipe,
                selection.strategy_name,
                strategy,
                profile,
                selection.pd_nodes,
                selection.node_count,
            )
        )
        router = pd.router_argv(selection.recipe, selection.strategy_name, strategy, [p.meta for p in pools])
        return Command("pd_cluster", model, selection.node_count, pools=pools, router=tuple(router))
    if strategy.deploy_type == "multi_node" and selection.node_count > 1:
        head = process(node_role="head")
        workers = [process(node_role="worker", rank=rank) for rank in range(1, selection.node_count)]
        return Command("multi_node", model, selection.node_count, nodes=(head, *workers))
    companions = tuple(
        feature.companion.command.rstrip()
        for name in selection.features
        if (feature := selection.recipe.features.get(name)) is not None
        and feature.companion is not None
        and allowed_for_strategy(feature, selection.strategy_name)
    )
    offload = selection.kv_offload.option if selection.kv_offload else None
    if offload is not None and offload.companion is not None and offload.companion.command:
        companions += (offload.companion.command.rstrip(),)
    return Command(
        strategy.deploy_type, model, selection.node_count, nodes=(process(),), companions=companions
    )


def process_at_rank(
    selection: Selection,
    strategy: Strategy,
    profile: HardwareProfile,
    role: str,
    rank: int,
    kv_store: KvStore | None = None,
) -> Process:
    """One node of a PD pool: the site renders node `rank` of a pool when its pd_nodes entry says so."""
    ranked = pd.with_rank(selection.pd_nodes, role, rank)
    at_rank = Selection(
        selection.recipe,
        selection.variant_key,
        selection.strategy_name,
        selection.profile_id,
        selection.features,
        selection.node_count,
        ranked,
    )
    kv = KvInstance(kv_store, HEAD) if kv_store else None
    args = build_args(at_rank, strategy, profile, role, kv=kv)
    # The store's variables reach a pool only where the store composes with pools (its `pd`).
    kv_env = kv_store.vllm.env if kv_store and kv_store.pd else None
    return Process(tuple(dedupe(args)), build_env(at_rank, strategy, profile, role, kv_env))
