"""Load a tree laid out like the vLLM recipes repository and check the references between its files.

The tree's shared files (taxonomy.yaml, strategies/) must be sound or nothing can be planned. A model
recipe is other people's input: one that is malformed or refers to what does not exist is recorded as
that recipe's problem, and every other recipe loads as usual.
"""

from __future__ import annotations

import re
import stat
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from factory.errors import FactoryError, InputError
from factory.recipes import bundled
from factory.recipes.grammar import check_model_id, check_name, check_values, identity
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
        return self.lookup(name)[0]

    def lookup(self, name: str) -> tuple[LoadedRecipe, str | None]:
        """The recipe a name means, and the variant it names (when it is a variant's model id). Looked up
        as the exact recipe id, a recipe id in any case, a model id, then a variant's model id: the first
        level that matches decides, and one that matches several recipes is refused with them (a name that
        differs only in case must not take another recipe's place)."""
        wanted = identity(name)
        exact = any(loaded.recipe_id == name for loaded in self.recipes.values())
        for problem in self.problems:
            if problem.recipe_id == name or (not exact and identity(problem.recipe_id) == wanted):
                raise InputError(
                    f"this recipe could not be read:\n{problem.error}", field="MODEL", value=name
                )
        recipes = self.recipes.values()
        levels: list[list[tuple[LoadedRecipe, str | None]]] = [
            # an exact id first: two ids that differ only in case stay reachable, each by its own
            [(loaded, None) for loaded in recipes if loaded.recipe_id == name],
            [(loaded, None) for loaded in recipes if identity(loaded.recipe_id) == wanted],
            [(loaded, None) for loaded in recipes if identity(loaded.model_id) == wanted],
            [
                (loaded, variant)
                for loaded in recipes
                for variant, spec in loaded.recipe.variants.items()
                if spec.model_id and identity(spec.model_id) == wanted
            ],
        ]
        for matches in levels:
            found = {loaded.recipe_id: loaded for loaded, _ in matches}
            if len(found) > 1:
                raise InputError(
                    "this name matches more than one recipe: name one by its id",
                    field="MODEL",
                    value=name,
                    valid=found,
                )
            if found:
                variants = {variant for _, variant in matches}
                return matches[0][0], variants.pop() if len(variants) == 1 else None
        raise InputError("no recipe for this model", field="MODEL", value=name, valid=self.recipes.keys())


Named = TypeVar("Named", Strategy, KvStore)


def _named_file(
    kind: type[Named], path: Path, folder: str, what: str, strict: bool, ignored: list[str]
) -> Named:
    """A strategy or KV-store file: its keys the site does not read listed (refused under --strict), its
    name its file's (the site keys them by name, the factory by file), its values checked like a recipe's
    (its display name heads compose files; its commands and configs reach the renderings as they are)."""
    loaded = load_model(kind, path)
    extra = extra_keys(loaded)
    if strict:
        refuse(extra, path)
    ignored += [f"ignored key in {folder}/{path.name}: {key.line()}" for key in extra]
    if loaded.name != path.stem:
        raise InputError(
            f"the {what}'s name must match its file name",
            file=path,
            field="name",
            value=loaded.name,
            valid=[path.stem],
        )
    check_name(loaded.name, path, "name", f"{what} name")
    check_values(loaded.model_dump(), path)
    return loaded


def load_tree(root: Path, strict: bool = False) -> RecipeTree:
    """The tree at `root`; with `strict`, a recipe with a key the site would ignore is refused."""
    taxonomy_path = root / "taxonomy.yaml"
    if not taxonomy_path.is_file():
        raise InputError(
            "not a recipes tree: taxonomy.yaml is missing",
            file=root,
            hint="expected models/<org>/<name>.yaml, strategies/*.yaml and taxonomy.yaml",
        )
    for folder in (root / "strategies", root / "kv_store"):
        if folder.is_symlink():
            raise InputError("a symlink: the tree's folders are read from inside the tree only", file=folder)
    shared = [taxonomy_path, *(root / "strategies").glob("*.yaml"), *(root / "kv_store").glob("*.yaml")]
    for path in shared:
        if path.is_symlink():
            raise InputError("a symlink: the tree's files are read from inside the tree only", file=path)
        if not path.is_file():  # a FIFO would hang the read, a folder named .yaml would crash it
            raise InputError("not a regular file", file=path)
    taxonomy = load_model(Taxonomy, taxonomy_path)
    check_values(taxonomy.model_dump(), taxonomy_path)
    for profile in taxonomy.hardware_profiles:
        check_name(profile, taxonomy_path, f"hardware_profiles.{profile}", "hardware profile id")
    strategies: dict[str, Strategy] = {}
    strategy_paths: dict[str, Path] = {}
    ignored: list[str] = []
    for path in sorted((root / "strategies").glob("*.yaml")):
        strategy = _named_file(Strategy, path, "strategies", "strategy", strict, ignored)
        strategies[strategy.name] = strategy
        strategy_paths[strategy.name] = path
    kv_stores: dict[str, KvStore] = {}
    for path in sorted((root / "kv_store").glob("*.yaml")):
        store = _named_file(KvStore, path, "kv_store", "KV store", strict, ignored)
        kv_stores[store.name] = store
    tree = RecipeTree(root, taxonomy, strategies, strategy_paths, kv_stores, ignored=ignored)
    for path in sorted(recipe_paths(root)):  # the order a glob gave: the bake file and lock digest keep it
        recipe_id = f"{path.parent.name}/{path.stem}"
        try:
            loaded = _load_recipe(path, recipe_id, tree, strict)
        except FactoryError as exc:
            tree.problems.append(RecipeProblem(path, recipe_id, exc))
            continue
        tree.recipes[recipe_id] = loaded
    _refuse_shared_slugs(tree)
    return tree


def recipe_paths(root: Path) -> list[Path]:
    """Every models/<org>/<name>.yaml entry, whatever it is (a link, a folder): loading says what is wrong
    with one. Links are listed, never followed: an org folder that is a link is one entry of its own."""
    models = root / "models"
    if models.is_symlink():
        raise InputError("models/ is a symlink: recipes are read from inside the tree only", file=models)
    found = []
    for org in _entries(models):
        if org.is_symlink():
            found.append(org / "(symlinked folder).yaml")
        elif org.is_dir():
            found += [path for path in _entries(org) if path.name.endswith(".yaml")]
    return found


def _entries(folder: Path) -> Iterator[Path]:
    try:
        entries = sorted(folder.iterdir())
    except OSError:  # absent or not a folder: no recipes there
        return
    yield from (entry for entry in entries if not entry.name.startswith("."))


def _check_file(path: Path) -> None:
    """A recipe is a regular file inside the tree under a usable name: no link (it may point anywhere on
    the build host), no folder or device (one line, not a traceback), no name that would put a line break
    or a separator into the header of every file generated from it."""
    if path.parent.is_symlink():
        raise InputError(
            "the org folder is a symlink: recipes are read from inside the tree only", file=path.parent
        )
    check_name(path.parent.name, path, "(org folder name)", "org folder name")
    check_name(path.stem, path, "(file name)", "recipe file name")
    info = path.lstat()
    if stat.S_ISLNK(info.st_mode):
        raise InputError("a symlink: recipes are read from inside the tree only", file=path)
    if not stat.S_ISREG(info.st_mode):
        raise InputError("not a regular file (a folder named .yaml?)", file=path)
    size = info.st_size
    if size > MAX_RECIPE_BYTES:
        raise InputError(
            f"{size:,} bytes: a recipe file may have at most {MAX_RECIPE_BYTES:,} (it is read whole)",
            file=path,
        )


# Bounds on what one recipe makes the factory read or plan. Upstream's largest recipe file has 58 kB and
# 5 variants (factory.recipes.bundled bounds a bundled model folder).
MAX_RECIPE_BYTES = 4 * 2**20
MAX_VARIANTS = 64


# Names of the factory's own entries beside the recipes' folders (images/docker-bake.hcl, the PD router's
# image folder and repository): a recipe whose slug is one of them would overwrite or share it.
RESERVED_SLUGS = frozenset({"docker-bake.hcl", "vllm-router"})


def _refuse_shared_slugs(tree: RecipeTree) -> None:
    """Two recipes whose outputs would share a name overwrite each other's files, containers or objects:
    both are refused, each naming the other (their earlier files are kept, as for any recipe that turned
    bad). Names are compared as every output folds them: image repositories (ASCII capitals fold),
    compose project names ('.' and '_' become '-') and Kubernetes object names (every run of other
    characters becomes one '-')."""
    claims: dict[tuple[str, str], list[LoadedRecipe]] = {}
    for loaded in tree.recipes.values():
        for claim in _slugs(loaded):
            claims.setdefault(claim, []).append(loaded)
    order = {"image name": 0, "compose project name": 1, "Kubernetes name": 2}  # the plainest first
    for (how, slug), claimants in sorted(claims.items(), key=lambda item: (order[item[0][0]], item[0][1])):
        reserved = how == "image name" and slug in RESERVED_SLUGS
        if len(claimants) < 2 and not reserved:
            continue
        files = [str(loaded.path) for loaded in claimants]
        for loaded in claimants:
            if tree.recipes.pop(loaded.recipe_id, None) is None:
                continue  # already refused for another slug
            why = (
                f"the image name {slug!r} is the factory's own (images/{slug})"
                if reserved
                else f"{len(claimants)} recipes claim the {how} {slug!r}: {', '.join(files)}"
            )
            error = InputError(
                why,
                file=loaded.path,
                field="meta.slug",
                value=loaded.recipe.meta.slug,
                hint="give each recipe a meta.slug of its own",
            )
            tree.problems.append(RecipeProblem(loaded.path, loaded.recipe_id, error))


def _slugs(loaded: LoadedRecipe) -> set[tuple[str, str]]:
    """The names a recipe's variants take (as factory.plan.naming makes them), in each output's fold."""
    given = loaded.recipe.meta.slug
    models = {variant.model_id or loaded.model_id for variant in loaded.recipe.variants.values()}
    found: set[tuple[str, str]] = set()
    for model in models:
        name = identity(given or model.split("/")[-1])
        found.add(("image name", name))
        found |= {(how, fold(name)) for how, fold in FOLDS.items()}
    return found


def _compose_fold(name: str) -> str:
    return re.sub(r"[._]", "-", name.lower())


def _kubernetes_fold(name: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")


# How each output folds a name: compose project names ('.' and '_' become '-'), Kubernetes object names
# (every run of other characters becomes one '-').
FOLDS: dict[str, Callable[[str], str]] = {
    "compose project name": _compose_fold,
    "Kubernetes name": _kubernetes_fold,
}


def _check_variants(recipe: Recipe, path: Path) -> None:
    """A recipe is refused with more than MAX_VARIANTS variants (each plans an image per hardware: 10,000
    ran for minutes), or with variants whose names fold together (`v1.0`, `v1-0`, `v1_0`), which would
    share compose projects and Kubernetes objects: starting one would replace the other's containers."""
    if len(recipe.variants) > MAX_VARIANTS:
        raise InputError(
            f"{len(recipe.variants):,} variants: a recipe may have at most {MAX_VARIANTS}",
            file=path,
            field="variants",
        )
    for how, fold in FOLDS.items():
        folded: dict[str, list[str]] = {}
        for name in recipe.variants:
            folded.setdefault(fold(name), []).append(name)
        for same, names in sorted(folded.items()):
            if len(names) > 1:
                raise InputError(
                    f"variants {', '.join(repr(n) for n in names)} share the {how} {same!r}",
                    file=path,
                    field="variants",
                    value=names[1],
                    hint="name the variants so they differ in letters or digits, not in '.', '_' or case",
                )


def _load_recipe(path: Path, recipe_id: str, tree: RecipeTree, strict: bool) -> LoadedRecipe:
    _check_file(path)
    recipe = load_model(Recipe, path)
    _check_variants(recipe, path)
    ignored = ignored_keys(recipe, hardware_keys(tree.taxonomy))
    if strict:
        refuse(ignored, path)
    check_references(recipe, path, tree)
    notes = unused(recipe, tree) + tuple(key.line() for key in ignored)
    return LoadedRecipe(recipe, path, recipe_id, bundled.checked_folder(path), notes, ignored)


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
