"""Load a tree laid out like the vLLM recipes repository and check the references between its files.

The tree's shared files (taxonomy.yaml, strategies/) must be sound or nothing can be planned. A model
recipe is other people's input: one that is malformed or refers to what does not exist is recorded as
that recipe's problem, and every other recipe loads as usual.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from factory.errors import FactoryError, InputError
from factory.recipes.grammar import check_model_id, check_name, check_values
from factory.recipes.ignored import IgnoredKey, extra_keys, ignored_keys, known_data, refuse
from factory.recipes.schema import NOT_USED, InstallSection, Recipe
from factory.recipes.tree_schema import KvStore, Strategy, Taxonomy
from factory.yamlfile import load_model


@dataclass(frozen=True)
class LoadedRecipe:
    recipe: Recipe
    path: Path
    recipe_id: str  # <org>/<name>, from the file's path: how the recipes repository names it
    # A folder beside the YAML with the same name holds model files shipped with the project
    # (config and tokenizer of a tiny test model); the image copies them in and serves that folder.
    bundled_model_dir: Path | None
    notes: tuple[str, ...] = ()  # what the recipe says that the factory does not use, and why
    ignored: tuple[IgnoredKey, ...] = ()  # keys the site does not read either (factory.recipes.ignored)

    @property
    def model_id(self) -> str:
        return self.recipe.model.model_id


@dataclass(frozen=True)
class RecipeProblem:
    """A recipe the factory could not read, and why: it is left out, and its earlier output kept."""

    path: Path
    recipe_id: str
    error: FactoryError

    def one_line(self) -> str:
        return " ".join(str(self.error).split())


@dataclass(frozen=True)
class RecipeTree:
    root: Path
    taxonomy: Taxonomy
    strategies: dict[str, Strategy]
    strategy_paths: dict[str, Path]
    kv_stores: dict[str, KvStore] = field(default_factory=dict)
    recipes: dict[str, LoadedRecipe] = field(default_factory=dict)
    problems: list[RecipeProblem] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)  # shared files' keys the site does not read, a line each

    def recipe(self, name: str) -> LoadedRecipe:
        """A recipe by its id (<org>/<name>), its model_id or a variant's model_id; case does not matter."""
        wanted = name.lower()
        for loaded in self.recipes.values():
            ids = {loaded.recipe_id, loaded.model_id}
            ids |= {v.model_id for v in loaded.recipe.variants.values() if v.model_id}
            if wanted in {i.lower() for i in ids}:
                return loaded
        for problem in self.problems:
            if problem.recipe_id.lower() == wanted:
                raise InputError(
                    f"this recipe could not be read:\n{problem.error}", field="MODEL", value=name
                )
        raise InputError("no recipe for this model", field="MODEL", value=name, valid=self.recipes.keys())


def load_tree(root: Path, strict: bool = False) -> RecipeTree:
    """The tree at `root`; with `strict`, a recipe with a key the site would ignore is refused."""
    taxonomy_path = root / "taxonomy.yaml"
    if not taxonomy_path.is_file():
        raise InputError(
            "not a recipes tree: taxonomy.yaml is missing",
            file=root,
            hint="expected models/<org>/<name>.yaml, strategies/*.yaml and taxonomy.yaml",
        )
    taxonomy = load_model(Taxonomy, taxonomy_path)
    for profile in taxonomy.hardware_profiles:
        check_name(profile, taxonomy_path, f"hardware_profiles.{profile}", "hardware profile id")
    strategies: dict[str, Strategy] = {}
    strategy_paths: dict[str, Path] = {}
    ignored: list[str] = []
    for path in sorted((root / "strategies").glob("*.yaml")):
        strategy = load_model(Strategy, path)
        extra = extra_keys(strategy)
        if strict:
            refuse(extra, path)
        ignored += [f"ignored key in strategies/{path.name}: {key.line()}" for key in extra]
        if strategy.name != path.stem:
            raise InputError(
                "the strategy's name must match its file name",
                file=path,
                field="name",
                value=strategy.name,
                valid=[path.stem],
            )
        check_name(strategy.name, path, "name", "strategy name")
        strategies[strategy.name] = strategy
        strategy_paths[strategy.name] = path
    kv_stores = {path.stem: load_model(KvStore, path) for path in sorted((root / "kv_store").glob("*.yaml"))}
    tree = RecipeTree(root, taxonomy, strategies, strategy_paths, kv_stores, ignored=ignored)
    for path in sorted((root / "models").glob("*/*.yaml")):
        recipe_id = f"{path.parent.name}/{path.stem}"
        try:
            loaded = _load_recipe(path, recipe_id, tree, strict)
        except FactoryError as exc:
            tree.problems.append(RecipeProblem(path, recipe_id, exc))
            continue
        tree.recipes[recipe_id] = loaded
    return tree


def _load_recipe(path: Path, recipe_id: str, tree: RecipeTree, strict: bool) -> LoadedRecipe:
    recipe = load_model(Recipe, path)
    ignored = ignored_keys(recipe, hardware_keys(tree.taxonomy))
    if strict:
        refuse(ignored, path)
    check_references(recipe, path, tree)
    bundled = path.with_suffix("")
    notes = unused(recipe, tree) + tuple(key.line() for key in ignored)
    return LoadedRecipe(recipe, path, recipe_id, bundled if bundled.is_dir() else None, notes, ignored)


def unused(recipe: Recipe, tree: RecipeTree) -> tuple[str, ...]:
    """What the recipe sets that shapes no command or image, each with why (shown by `factory show`)."""
    notes = [f"{key}: {why}" for key, why in NOT_USED.items() if _is_set(recipe, key)]
    notes += [
        f"meta.hardware.{name}: no such hardware profile in the taxonomy; nothing renders for it"
        for name in recipe.meta.hardware
        if name not in tree.taxonomy.hardware_profiles
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


def check_references(recipe: Recipe, path: Path, tree: RecipeTree) -> None:
    """Every name a recipe uses must exist: strategies, hardware keys, features, variants, modes."""
    strategies = set(tree.strategies)
    profiles = set(tree.taxonomy.hardware_profiles)
    if not recipe.variants:
        raise InputError("a recipe needs at least one variant", file=path, field="variants")
    check_model_id(recipe.model.model_id, path, "model.model_id")
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
