"""pd_cluster: prefill and decode pools joined by a router, as the site renders them.

Each pool runs TP, TEP or DEP over its nodes (a pool of 0 nodes shares one node half and half with the
other). The pools' sizes come from the variant's memory footprint against a node's, grown to clear the
recipe's GPU floor for the pool's parallelism; the router lists one endpoint per HTTP-serving node.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from factory.recipes.schema import PdRoleOverride, Recipe, Variant
from factory.recipes.tree_schema import HardwareProfile, PdRole, Strategy
from factory.synthesis.hardware import pd_fits_one_node
from factory.synthesis.strategies import nodes_for, pd_pool_modes
from factory.synthesis.values import node_rank, pool_node, start_rank

ROLES = ("prefill", "decode")
MAX_NODES_PER_POOL = 4  # beyond this the site renders no cluster ("don't emit a fantasy cluster")
ROUTER_PORTS = {"prefill": 8001, "decode": 8002}  # each pool's --port in the strategy file


@dataclass(frozen=True)
class PoolSelection:
    """How many nodes a pool spans, and which of them a command is for."""

    nodes: int
    rank: int = 0


PdNodes = dict[str, PoolSelection]


@dataclass(frozen=True)
class PdRoleMeta:
    role: str
    nodes: int  # 0: half of one node shared with the other pool
    parallelism: str
    dp_local: int


def role_spec(strategy: Strategy, role: str) -> PdRole:
    spec = getattr(strategy, role, None)
    return spec if isinstance(spec, PdRole) else PdRole()


def _override(recipe: Recipe, strategy_name: str, role: str) -> PdRoleOverride:
    override = recipe.strategy_overrides.get(strategy_name)
    found = getattr(override, role, None) if override else None
    return found if isinstance(found, PdRoleOverride) else PdRoleOverride()


def declared_parallelism(recipe: Recipe, strategy_name: str, strategy: Strategy, role: str) -> str:
    return _override(recipe, strategy_name, role).parallelism or role_spec(strategy, role).parallelism or "tp"


def pick_nodes(
    recipe: Recipe, variant: Variant, strategy: Strategy, profile: HardwareProfile, profile_id: str
) -> PdNodes | str | None:
    """None: both pools on one node. 'skip': more than four nodes per pool. Else each pool's node count."""
    if pd_fits_one_node(profile, variant):
        return None
    needed = variant.vram_minimum_gb or 0
    if profile.vram_gb <= 0 or needed <= 0:
        return None
    per_pool = math.ceil(needed / profile.vram_gb)
    if per_pool > MAX_NODES_PER_POOL:
        return "skip"
    return {
        role: PoolSelection(
            max(
                per_pool,
                nodes_for(
                    recipe,
                    declared_parallelism(recipe, "pd_cluster", strategy, role),
                    profile.gpu_count,
                    profile_id,
                ),
            )
        )
        for role in ROLES
    }


def with_rank(pd_nodes: PdNodes | None, role: str, rank: int) -> PdNodes | None:
    if pd_nodes is None or role not in pd_nodes:
        return pd_nodes
    return {**pd_nodes, role: replace(pd_nodes[role], rank=rank)}


def _pool_nodes(pd_nodes: PdNodes | None, role: str, node_count: int) -> tuple[int, int]:
    """(nodes, rank) of a pool; without a selection the site's legacy layout: 1 node each, or shared."""
    chosen = pd_nodes.get(role) if pd_nodes else None
    if chosen is not None:
        return chosen.nodes, chosen.rank
    return (1 if node_count > 1 else 0), 0


def pool_args(
    recipe: Recipe,
    strategy_name: str,
    strategy: Strategy,
    profile: HardwareProfile,
    role: str,
    pd_nodes: PdNodes | None,
    node_count: int,
) -> list[str]:
    """Step 3 for one pool: its parallel sizes and where its nodes meet."""
    gpus = profile.gpu_count or 1
    nodes, rank = _pool_nodes(pd_nodes, role, node_count)
    pool_gpus = gpus // 2 if nodes == 0 else nodes * gpus
    parallelism = declared_parallelism(recipe, strategy_name, strategy, role)
    allowed = pd_pool_modes(recipe)
    if parallelism not in allowed:
        parallelism = allowed[0]
    override, spec = _override(recipe, strategy_name, role), role_spec(strategy, role)
    if parallelism == "dep":
        in_pool = max(1, nodes)
        explicit_tp = override.tp if override.tp is not None else spec.tp
        dp_local = max(1, gpus // (explicit_tp or 1))
        index = max(0, min(in_pool - 1, rank))
        found = ["--tensor-parallel-size", str(explicit_tp)] if explicit_tp is not None else []
        found += [
            "--data-parallel-size",
            str(in_pool * dp_local),
            "--data-parallel-size-local",
            str(dp_local),
        ]
        found += ["--data-parallel-start-rank", start_rank(index, dp_local)]
        found += [
            "--data-parallel-address",
            pool_node(role, 1),
            "--data-parallel-rpc-port",
            f"${role.upper()}_DP_RPC_PORT",
        ]
        if in_pool > 1:
            found.append("--data-parallel-hybrid-lb")
        return [*found, "--enable-expert-parallel"]
    flag = override.parallel_flag or spec.parallel_flag or strategy.parallel_flag
    found = [flag, str(max(1, pool_gpus))]
    if parallelism == "tep":
        found.append("--enable-expert-parallel")
    if nodes > 1:
        index = max(0, min(nodes - 1, rank))
        found += [
            "--nnodes",
            str(nodes),
            "--node-rank",
            node_rank(index),
            "--master-addr",
            pool_node(role, 1),
        ]
        if index > 0:
            found.append("--headless")
    return found


def role_metas(
    recipe: Recipe,
    strategy_name: str,
    strategy: Strategy,
    profile: HardwareProfile,
    pd_nodes: PdNodes | None,
    node_count: int,
) -> list[tuple[str, PdRoleMeta]]:
    """Each pool's size and parallelism, as the router needs them (the declared parallelism, unsnapped)."""
    gpus = profile.gpu_count or 1
    metas = []
    for role in ROLES:
        nodes, _ = _pool_nodes(pd_nodes, role, node_count)
        parallelism = declared_parallelism(recipe, strategy_name, strategy, role)
        dp_local = 0
        if parallelism == "dep":
            tp = _override(recipe, strategy_name, role).tp or role_spec(strategy, role).tp or 1
            dp_local = max(1, gpus // tp)
        metas.append((role, PdRoleMeta(role, nodes, parallelism, dp_local)))
    return metas


def router_argv(recipe: Recipe, strategy_name: str, strategy: Strategy, metas: list[PdRoleMeta]) -> list[str]:
    """vllm-router over the pools: one endpoint per node of a DEP pool, the head only of a TP pool."""
    policy = strategy.router.policy if strategy.router else "round_robin"
    argv = ["vllm-router", "--policy", policy, "--vllm-pd-disaggregation"]
    for meta in metas:
        endpoints = max(1, meta.nodes or 1) if meta.parallelism == "dep" else 1
        for index in range(endpoints):
            url = f"http://{pool_node(meta.role, index + 1)}:{ROUTER_PORTS[meta.role]}"
            argv += [f"--{meta.role}", url]
    override = recipe.strategy_overrides.get(strategy_name)
    pinned = override.router.intra_node_data_parallel_size if override and override.router else None
    intra = pinned if pinned is not None else max(*(meta.dp_local for meta in metas), 1)
    return [
        *argv,
        "--host",
        "$ROUTER_HOST",
        "--port",
        "$ROUTER_PORT",
        "--intra-node-data-parallel-size",
        str(intra),
    ]
