"""What a user's choices leave of a recipe's combinations: `--nodes N` and `--kv-offload KEY`, each with
the combinations it refuses and why."""

from __future__ import annotations

from dataclasses import replace

from factory.recipes.loader import LoadedRecipe, RecipeTree
from factory.synthesis.kv_offload import refusal
from factory.synthesis.matrix import Combination


def with_offload(
    combos: list[Combination], key: str, loaded: LoadedRecipe, tree: RecipeTree
) -> tuple[list[Combination], list[tuple[Combination, str]]]:
    """The combinations the KV-offload option composes with (the site's three gates), and the others with
    the gate that refused them."""
    option = tree.taxonomy.kv_offload[key]
    kept, refused = [], []
    for combo in combos:
        strategy = tree.strategies[combo.strategy]
        profile = tree.taxonomy.hardware_profiles[combo.hardware]
        why = refusal(key, option, loaded.recipe, combo.strategy, strategy.deploy_type, profile)
        if why is None:
            kept.append(replace(combo, kv_offload=key))
        else:
            refused.append((combo, why))
    return kept, refused


def with_nodes(
    combos: list[Combination], nodes: int | None
) -> tuple[list[Combination], list[tuple[Combination, str]]]:
    """With --nodes N, multi-node deployments render on N nodes, unless the recipe's GPU floor needs more."""
    if nodes is None:
        return combos, []
    kept, refused = [], []
    for combo in combos:
        if combo.node_count < 2 or combo.pd_nodes is not None:
            kept.append(combo)
        elif nodes < combo.node_count:
            refused.append(
                (combo, f"needs {combo.node_count} nodes (strategy_min_gpus); --nodes gave {nodes}")
            )
        else:
            kept.append(replace(combo, node_count=nodes))
    return kept, refused
