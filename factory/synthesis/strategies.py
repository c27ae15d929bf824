"""Which strategies a recipe offers on a hardware, at how many nodes, and which one it recommends.

The upstream site's rules: `compatible_strategies` membership is the default, `strategy_hardware` opts
strategies in or out per hardware, `strategy_min_gpus` sets GPU floors that grow multi-node counts and
drop single-node strategies, and `default_strategy` steers the recommendation.
"""

from __future__ import annotations

import math
import re

from factory.recipes.schema import Recipe
from factory.recipes.tree_schema import HardwareProfile
from factory.synthesis.hardware import keyed_value

MAX_NODES = 16  # the most nodes the site offers for one deployment, and per PD pool
MULTI_NODE_DEFAULT = 2  # a multi-node strategy renders on two nodes unless a GPU floor asks for more


def offered(recipe: Recipe) -> list[str]:
    """compatible_strategies, then strategies opted in somewhere by `strategy_hardware: supported`."""
    listed = list(recipe.compatible_strategies)
    opted_in = [
        name
        for name, by_hardware in recipe.strategy_hardware.items()
        if name not in listed and "supported" in by_hardware.values()
    ]
    return listed + opted_in


def supported_on(recipe: Recipe, strategy: str, profile: HardwareProfile, profile_id: str) -> bool:
    gate = keyed_value(recipe.strategy_hardware.get(strategy), profile, profile_id)
    if gate is not None:
        return gate != "unsupported"
    return strategy in recipe.compatible_strategies


def _floor_of(block: int | dict[str, int] | None, key: str) -> int:
    if block is None:
        return 0
    if isinstance(block, int):
        return block
    for name in (key, f"multi_node_{key}", f"single_node_{key}"):
        if name in block:
            return block[name]
    return 0


def min_gpus(recipe: Recipe, key: str, profile_id: str | None) -> int:
    """The recipe's GPU floor for a strategy (or a PD pool mode tp/tep/dep); exact-GPU floors may raise it."""
    floors = recipe.strategy_min_gpus
    if floors is None:
        return 0
    if isinstance(floors, int):
        return floors
    strategy_floor = _floor_of({k: v for k, v in floors.items() if isinstance(v, int)}, key)
    hardware_floor = floors.get(profile_id or "")
    return max(strategy_floor, _floor_of(hardware_floor, key) if profile_id else 0)


def nodes_for(recipe: Recipe, key: str, gpus_per_node: int, profile_id: str | None) -> int:
    return max(1, math.ceil(min_gpus(recipe, key, profile_id) / (gpus_per_node or 8)))


def reachable(recipe: Recipe, key: str, deploy_type: str, gpus_per_node: int, profile_id: str) -> bool:
    """Multi-node and PD deployments scale to MAX_NODES; others must clear the floor on one node."""
    max_nodes = MAX_NODES if deploy_type in ("multi_node", "pd_cluster") else 1
    return max_nodes * (gpus_per_node or 8) >= min_gpus(recipe, key, profile_id)


def default_nodes(
    recipe: Recipe, strategy: str, deploy_type: str, gpus_per_node: int, profile_id: str
) -> int:
    """The node count a strategy renders at: two for multi-node, grown to clear the recipe's GPU floor."""
    usual = MULTI_NODE_DEFAULT if deploy_type == "multi_node" else 1
    return max(usual, nodes_for(recipe, strategy, gpus_per_node, profile_id))


def recommend(recipe: Recipe, node_count: int = 1) -> str:
    """TP first for every model, unless the recipe names its default; multi-node siblings beyond one node."""
    compatible = offered(recipe)
    explicit = recipe.default_strategy
    if explicit and explicit in compatible:
        if node_count > 1 and explicit.startswith("single_node_"):
            sibling = "multi_node_" + explicit.removeprefix("single_node_")
            if sibling in compatible:
                return sibling
        else:
            return explicit
    if node_count > 1:
        for name in ("multi_node_tp", "multi_node_dep", "multi_node_tep"):
            if name in compatible:
                return name
    if "single_node_tp" in compatible:
        return "single_node_tp"
    return compatible[0] if compatible else "single_node_tp"


def pd_pool_modes(recipe: Recipe) -> list[str]:
    """PD pool parallelisms the recipe offers, from its strategies' suffixes; pool_modes may narrow them."""
    modes = set()
    for name in offered(recipe):
        if name == "pd_cluster":
            continue
        if re.search(r"(?:^|_)dep$", name):
            modes.add("dep")
        elif re.search(r"(?:^|_)tep$", name):
            modes.add("tep")
        elif re.search(r"(?:^|_)tp(?:_pp|_dp)?$", name):
            modes.add("tp")
    ordered: list[str] = [mode for mode in ("tp", "tep", "dep") if mode in (modes or {"tp"})]
    override = recipe.strategy_overrides.get("pd_cluster")
    if override and override.pool_modes:
        narrowed: list[str] = [mode for mode in ordered if mode in override.pool_modes]
        ordered = narrowed or ordered
    return ordered
