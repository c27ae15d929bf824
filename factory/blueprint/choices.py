"""What a user's choices leave of a recipe's combinations: `--nodes N` and `--kv-offload KEY`, each with
the combinations it refuses and why."""

from __future__ import annotations

from dataclasses import replace

from factory.base.errors import escaped
from factory.recipes.loader import LoadedRecipe, RecipeTree
from factory.recipes.tree_schema import KvOffloadOption
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


def offload_notes(key: str, option: KvOffloadOption) -> tuple[str, ...]:
    """What a deployment composed with the option lacks to start as printed, one line each (they go into
    YAML comments: the option's own text is escaped onto one line)."""
    notes = [f"printed by `factory show --kv-offload {key}`; `factory generate` writes no file for it"]
    if option.install:
        notes.append(f"needs `{escaped(option.install)}`: not in the factory's images")
    if option.companion is not None and option.companion.command:
        label = escaped(option.companion.label or key)
        notes.append(f"the {label} runs beside `vllm serve` on the same node: nothing here starts it")
    return tuple(notes)
