"""Load a tree laid out like the vLLM recipes repository and check the references between its files."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from factory.errors import InputError
from factory.recipes.schema import Recipe, Strategy, Taxonomy
from factory.yamlfile import load_model


@dataclass(frozen=True)
class LoadedRecipe:
    recipe: Recipe
    path: Path
    # A folder beside the YAML with the same name holds model files shipped with the project
    # (config and tokenizer of a tiny test model); the image copies them in and serves that folder.
    bundled_model_dir: Path | None

    @property
    def model_id(self) -> str:
        return self.recipe.model.model_id


@dataclass(frozen=True)
class RecipeTree:
    root: Path
    taxonomy: Taxonomy
    strategies: dict[str, Strategy]
    strategy_paths: dict[str, Path]
    recipes: dict[str, LoadedRecipe] = field(default_factory=dict)

    def recipe(self, model_id: str) -> LoadedRecipe:
        found = self.recipes.get(model_id) or {k.lower(): v for k, v in self.recipes.items()}.get(
            model_id.lower()
        )
        if found is None:
            raise InputError(
                "no recipe for this model", field="MODEL", value=model_id, valid=self.recipes.keys()
            )
        return found


def load_tree(root: Path) -> RecipeTree:
    taxonomy_path = root / "taxonomy.yaml"
    if not taxonomy_path.is_file():
        raise InputError(
            "not a recipes tree: taxonomy.yaml is missing",
            file=root,
            hint="expected models/<org>/<name>.yaml, strategies/*.yaml and taxonomy.yaml",
        )
    taxonomy = load_model(Taxonomy, taxonomy_path)
    strategies: dict[str, Strategy] = {}
    strategy_paths: dict[str, Path] = {}
    for path in sorted((root / "strategies").glob("*.yaml")):
        strategy = load_model(Strategy, path)
        if strategy.name != path.stem:
            raise InputError(
                "the strategy's name must match its file name",
                file=path,
                field="name",
                value=strategy.name,
                valid=[path.stem],
            )
        strategies[strategy.name] = strategy
        strategy_paths[strategy.name] = path
    tree = RecipeTree(root, taxonomy, strategies, strategy_paths)
    for path in sorted((root / "models").glob("*/*.yaml")):
        recipe = load_model(Recipe, path)
        _check_references(recipe, path, tree)
        bundled = path.with_suffix("")
        loaded = LoadedRecipe(recipe, path, bundled if bundled.is_dir() else None)
        if loaded.model_id in tree.recipes:
            raise InputError(
                "two recipes serve the same model_id",
                file=path,
                field="model.model_id",
                value=loaded.model_id,
                hint=f"the other one is {tree.recipes[loaded.model_id].path}",
            )
        tree.recipes[loaded.model_id] = loaded
    return tree


def override_keys(taxonomy: Taxonomy) -> set[str]:
    """Keys a hardware_overrides block may use: a brand, a generation or a hardware profile name."""
    keys = set(taxonomy.hardware_profiles)
    for profile in taxonomy.hardware_profiles.values():
        keys.update({profile.brand.lower(), profile.generation.lower()})
    return keys


def _check_references(recipe: Recipe, path: Path, tree: RecipeTree) -> None:
    known_strategies = set(tree.strategies)
    _each_known(recipe.compatible_strategies, known_strategies, path, "compatible_strategies", "strategy")
    _each_known(recipe.strategy_overrides, known_strategies, path, "strategy_overrides", "strategy")
    _each_known(recipe.meta.hardware, set(tree.taxonomy.hardware_profiles), path, "meta.hardware", "hardware")
    keys = override_keys(tree.taxonomy)
    _each_known(recipe.hardware_overrides, keys, path, "hardware_overrides", "hardware, brand or generation")
    for name, variant in recipe.variants.items():
        _each_known(
            variant.hardware_overrides,
            keys,
            path,
            f"variants.{name}.hardware_overrides",
            "hardware, brand or generation",
        )
    _each_known(recipe.opt_in_features, set(recipe.features), path, "opt_in_features", "feature")
    if not recipe.variants:
        raise InputError("a recipe needs at least one variant", file=path, field="variants")


def _each_known(names: Iterable[str], known: set[str], path: Path, field_name: str, what: str) -> None:
    for index, name in enumerate(names):
        if name not in known:
            where = f"{field_name}[{index}]" if isinstance(names, list) else f"{field_name}.{name}"
            raise InputError(f"unknown {what}", file=path, field=where, value=name, valid=known)
