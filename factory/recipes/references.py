"""A recipe's references to the rest of its tree: every strategy, hardware key, feature, variant and mode it
names must exist; and what it sets that shapes no command or image, listed with why."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from factory.base.errors import InputError
from factory.recipes.grammar import check_model_id, check_name, check_values
from factory.recipes.ignored import known_data
from factory.recipes.schema import NOT_USED, InstallSection, Recipe
from factory.recipes.tree_schema import Taxonomy


def unused(recipe: Recipe, taxonomy: Taxonomy) -> tuple[str, ...]:
    """What the recipe sets that shapes no command or image, each with why (shown by `factory show`)."""
    notes = [f"{key}: {why}" for key, why in NOT_USED.items() if _is_set(recipe, key)]
    notes += [
        f"meta.hardware.{name}: no such hardware profile in the taxonomy; nothing renders for it"
        for name in recipe.meta.hardware
        if name not in taxonomy.hardware_profiles
    ]
    return tuple(notes)


def _is_set(recipe: Recipe, dotted: str) -> bool:
    value: object = recipe
    for part in dotted.split("."):
        value = getattr(value, part, None)
    return value not in (None, "", [], {}) and value != InstallSection()


def hardware_keys(taxonomy: Taxonomy) -> set[str]:
    """Keys an override or a per-hardware value may use: a profile id, a generation or a brand."""
    keys = set(taxonomy.hardware_profiles)
    for profile in taxonomy.hardware_profiles.values():
        keys.update(profile.generations)
        keys.add(profile.brand.lower())
    return keys


def check_references(recipe: Recipe, path: Path, taxonomy: Taxonomy, strategies: set[str]) -> None:
    """Every name a recipe uses must exist: strategies, hardware keys, features, variants, modes."""
    profiles = set(taxonomy.hardware_profiles)
    if not recipe.variants:
        raise InputError("a recipe needs at least one variant", file=path, field="variants")
    check_model_id(recipe.model.model_id, path, "model.model_id")
    if recipe.meta.slug is not None:
        check_name(recipe.meta.slug, path, "meta.slug", "slug")
    for name, variant in recipe.variants.items():
        check_name(name, path, f"variants.{name}", "variant name")
        if variant.model_id:
            check_model_id(variant.model_id, path, f"variants.{name}.model_id")
    check_values(known_data(recipe), path)  # ignored keys are in no command: their values are not checked
    _each_known(recipe.compatible_strategies, strategies, path, "compatible_strategies", "strategy")
    _each_known(recipe.strategy_overrides, strategies, path, "strategy_overrides", "strategy")
    _each_known(recipe.strategy_hardware, strategies, path, "strategy_hardware", "strategy")
    if recipe.default_strategy:
        _each_known([recipe.default_strategy], strategies, path, "default_strategy", "strategy")
    # A per-hardware key that names no hardware is ignored, as the site ignores it (factory.recipes.ignored).
    for name, variant in recipe.variants.items():
        where = f"variants.{name}"
        _each_known(variant.supported_hardware, profiles, path, f"{where}.supported_hardware", "hardware")
        _each_known(variant.default_modes, set(recipe.features), path, f"{where}.default_modes", "feature")
    _each_known(recipe.opt_in_features, set(recipe.features), path, "opt_in_features", "feature")
    for hardware, names in recipe.hardware_opt_in_features.items():
        _each_known(names, set(recipe.features), path, f"hardware_opt_in_features.{hardware}", "feature")
    _check_features(recipe, path, strategies)


def _check_features(recipe: Recipe, path: Path, strategies: set[str]) -> None:
    """What the site's build refuses about feature modes, named the same way."""
    for name, feature in recipe.features.items():
        where = f"features.{name}"
        _each_known(feature.strategies, strategies, path, f"{where}.strategies", "strategy")
        if feature.modes is None:
            continue
        if not feature.modes:
            raise InputError("modes must be a non-empty map", file=path, field=f"{where}.modes")
        if feature.args is not None:
            raise InputError("a feature declares args or modes, not both", file=path, field=f"{where}.args")
        if feature.default_mode:
            _each_known([feature.default_mode], set(feature.modes), path, f"{where}.default_mode", "mode")
        for mode_name, mode in feature.modes.items():
            _each_known(
                mode.variants, set(recipe.variants), path, f"{where}.modes.{mode_name}.variants", "variant"
            )
    for name, variant in recipe.variants.items():
        for feature_name, mode_name in variant.default_modes.items():
            modes = recipe.features[feature_name].modes or {}
            field = f"variants.{name}.default_modes.{feature_name}"
            _each_known([mode_name], set(modes), path, field, f"mode of {feature_name}")


def _each_known(names: Iterable[str], known: set[str], path: Path, field_name: str, what: str) -> None:
    for index, name in enumerate(names):
        if name not in known:
            where = f"{field_name}[{index}]" if isinstance(names, list) else f"{field_name}.{name}"
            raise InputError(f"unknown {what}", file=path, field=where, value=name, valid=known)
