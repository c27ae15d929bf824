"""The site's KV-offload row (taxonomy `kv_offload`): which option may compose with which deployment.

A port of the three gates resolveCommand applies (src/lib/command-synthesis.js): the strategy (pd_cluster
and the KV stores own --kv-transfer-config, and an option may list the strategies it runs with), the
recipe (`kv_offload_support`: `unsupported` opts out; an option that `requires_opt_in` needs `verified`)
and the hardware brand. The site drops an option that fails a gate in silence; the factory says which gate.
"""

from __future__ import annotations

from factory.recipes.schema import Recipe
from factory.recipes.tree_schema import HardwareProfile, KvOffloadOption, Strategy

# Deployments that write their own --kv-transfer-config: a second one would replace it (last wins).
OWN_CONNECTOR = ("pd_cluster", "kv_store_lb")


def refusal(
    key: str,
    option: KvOffloadOption,
    recipe: Recipe,
    strategy_name: str,
    deploy_type: str,
    profile: HardwareProfile,
) -> str | None:
    """Why the page does not offer option `key` here, or None when it does."""
    if deploy_type in OWN_CONNECTOR:
        return f"a {deploy_type} deployment sets its own --kv-transfer-config, which {key}'s would replace"
    if option.strategies and strategy_name not in option.strategies:
        return f"{key} runs with the strategies {', '.join(option.strategies)} only, not {strategy_name}"
    support = recipe.kv_offload_support.get(key)
    if support == "unsupported":
        return f"the recipe's kv_offload_support marks {key} unsupported"
    if option.requires_opt_in and support != "verified":
        return f"{key} is offered only where the recipe's kv_offload_support.{key} is `verified`"
    if option.brands and profile.brand not in option.brands:
        return f"{key} runs on {', '.join(option.brands)} hardware only, not {profile.brand}"
    return None


def offered(
    options: dict[str, KvOffloadOption],
    recipe: Recipe,
    strategy_name: str,
    strategy: Strategy,
    profile: HardwareProfile,
) -> list[str]:
    """The options the page offers for this deployment, in the row's order."""
    keys = [
        key
        for key, option in options.items()
        if refusal(key, option, recipe, strategy_name, strategy.deploy_type, profile) is None
    ]

    def position(key: str) -> int:  # an option without an order comes after those with one
        order = options[key].order
        return order if order is not None else 1 << 30

    return sorted(keys, key=position)
