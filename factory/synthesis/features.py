"""Recipe features: which are on by default, and the flags each adds on a given hardware and strategy."""

from __future__ import annotations

from factory.recipes.schema import Feature, FeatureMode, Recipe
from factory.recipes.tree_schema import HardwareProfile
from factory.synthesis.hardware import generation_block, keyed_value


def default_features(recipe: Recipe, profile_id: str, variant_key: str) -> list[str]:
    """Every feature but the opt-in ones (globally or on this hardware); a variant's default_modes turn
    their feature on even when it is opt-in."""
    off = set(recipe.opt_in_features) | set(recipe.hardware_opt_in_features.get(profile_id, []))
    variant = recipe.variants.get(variant_key)
    forced = set(variant.default_modes) if variant else set()
    return [name for name in recipe.features if name in forced or name not in off]


def allowed_for_strategy(feature: Feature, strategy: str) -> bool:
    return not feature.strategies or strategy in feature.strategies


def _mode_supported(mode: FeatureMode, profile: HardwareProfile, profile_id: str) -> bool:
    return mode.hardware.get(profile.gen) != "unsupported" and mode.hardware.get(profile_id) != "unsupported"


def mode_key(
    feature: Feature, name: str, recipe: Recipe, variant_key: str, profile: HardwareProfile, profile_id: str
) -> str | None:
    """The mode in effect: of the modes this variant and hardware allow, the variant's default_modes pick,
    else the feature's default_mode, else the first."""
    modes = feature.modes or {}
    allowed = [
        key
        for key, mode in modes.items()
        if (not mode.variants or variant_key in mode.variants) and _mode_supported(mode, profile, profile_id)
    ]
    if not allowed:
        return None
    variant = recipe.variants.get(variant_key)
    for choice in (variant.default_modes.get(name) if variant else None, feature.default_mode):
        if choice and choice in allowed:
            return choice
    return allowed[0]


def feature_args(
    feature: Feature, name: str, recipe: Recipe, variant_key: str, profile: HardwareProfile, profile_id: str
) -> list[str]:
    """The flags one enabled feature adds: its mode's (a per-hardware block replaces them) or its own."""
    if feature.modes is not None:
        key = mode_key(feature, name, recipe, variant_key, profile, profile_id)
        if key is None:
            return []
        mode = feature.modes[key]
        block = keyed_value(mode.hardware_overrides, profile, profile_id)
        return list(block.args if block is not None and block.args is not None else mode.args)
    block = generation_block(feature.hardware_overrides, profile)
    if block is not None and block.args is not None:
        return list(block.args)
    return list(feature.args or [])
