"""Every (variant, hardware, strategy) the site renders for a recipe, with its node count, and what it
leaves out with why: a port of buildVariantRendering (scripts/build-recipes-api.mjs).
"""

from __future__ import annotations

from dataclasses import dataclass

from factory.recipes.schema import Recipe
from factory.recipes.tree_schema import HardwareProfile, Strategy, Taxonomy
from factory.synthesis import hardware as hw
from factory.synthesis import pd
from factory.synthesis import strategies as st
from factory.synthesis.features import default_features


@dataclass(frozen=True)
class Combination:
    variant: str
    hardware: str
    strategy: str
    node_count: int
    pd_nodes: pd.PdNodes | None
    features: tuple[str, ...]
    recommended: bool  # the strategy the site recommends on this hardware
    kv_offload: str | None = None  # a pick of the site's KV-offload row, never a default


@dataclass(frozen=True)
class Refusal:
    variant: str
    hardware: str
    strategy: str | None  # None: nothing renders on this hardware
    reason: str


def hardware_for(recipe: Recipe, variant_key: str, taxonomy: Taxonomy) -> list[str]:
    """Profiles the variant may land on: precision, opt-outs and variant allowlists; restricted profiles
    (workstations, TPU, CPU) only when the recipe lists them in meta.hardware."""
    variant = recipe.variants[variant_key]
    return [
        profile_id
        for profile_id, profile in taxonomy.hardware_profiles.items()
        if hw.runs_on(recipe, variant, profile, profile_id)
        and (not profile.restricted or profile_id in recipe.meta.hardware)
    ]


def combinations(
    recipe: Recipe, variant_key: str, profile_id: str, strategies: dict[str, Strategy], taxonomy: Taxonomy
) -> tuple[list[Combination], list[Refusal]]:
    """What renders for one variant on one hardware, as the site's JSON API renders it."""
    profile = taxonomy.hardware_profiles[profile_id]
    variant = recipe.variants[variant_key]
    if not profile.scalable and not hw.fits_one_node(profile, variant):
        fitting = hw.fitting_variant(recipe, profile, profile_id)
        instead = f"; the site renders the {fitting} variant there instead" if fitting else ""
        why = (
            f"needs {variant.vram_minimum_gb:g} GB and {profile_id} holds {profile.vram_gb:g} GB"
            f" on one box that cannot be clustered{instead}"
        )
        return [], [Refusal(variant_key, profile_id, None, why)]
    gpus = profile.gpu_count
    refusals: list[Refusal] = []
    compatible = []
    for name in st.offered(recipe):
        strategy = strategies.get(name)
        reason = _why_not(recipe, name, strategy, profile, profile_id)
        if reason:
            refusals.append(Refusal(variant_key, profile_id, name, reason))
        else:
            compatible.append(name)
    multi = profile.scalable and any(name.startswith("multi_node_") for name in compatible)
    base_nodes = 2 if not hw.fits_one_node(profile, variant) and multi else 1
    recommended = st.recommend(recipe, base_nodes)
    if recommended not in compatible:
        recommended = next((name for name in compatible if name != "pd_cluster"), None) or next(
            iter(compatible), recommended
        )

    def nodes_of(name: str) -> int:
        deploy = strategies[name].deploy_type
        return st.default_nodes(recipe, name, deploy, gpus, profile_id)

    features = tuple(default_features(recipe, profile_id, variant_key))
    found = []
    for name in compatible:
        pd_nodes = None
        if strategies[name].deploy_type == "pd_cluster":
            picked = pd.pick_nodes(recipe, variant, strategies[name], profile, profile_id)
            if picked == "skip":
                reason = "the variant needs more than 4 nodes per prefill/decode pool (the site renders none)"
                refusals.append(Refusal(variant_key, profile_id, name, reason))
                if name == recommended:
                    return [], [Refusal(variant_key, profile_id, None, reason)]
                continue
            pd_nodes = picked if isinstance(picked, dict) else None
        is_recommended = name == recommended
        if is_recommended:
            count = max(base_nodes, nodes_of(name))
        elif strategies[name].deploy_type == "pd_cluster":
            count = 1
        else:
            count = nodes_of(name)
        found.append(Combination(variant_key, profile_id, name, count, pd_nodes, features, is_recommended))
    return found, refusals


def _why_not(
    recipe: Recipe, name: str, strategy: Strategy | None, profile: HardwareProfile, profile_id: str
) -> str | None:
    """Why the site does not offer a strategy the recipe lists on this hardware, or None."""
    if strategy is None:
        return f"no strategy {name} in the tree's strategies/"
    if not st.supported_on(recipe, name, profile, profile_id):
        return f"strategy_hardware marks {name} unsupported on {profile_id}"
    if not st.reachable(recipe, name, strategy.deploy_type, profile.gpu_count, profile_id):
        floor = st.min_gpus(recipe, name, profile_id)
        return f"{name} needs {floor} GPUs (strategy_min_gpus), more than {profile_id} reaches with it"
    if not profile.scalable and (name.startswith("multi_node_") or name == "pd_cluster"):
        return f"{profile_id} is one box that cannot be clustered"
    return None
