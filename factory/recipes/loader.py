"""Load a tree laid out like the vLLM recipes repository and check the references between its files.

The tree's shared files (taxonomy.yaml, strategies/) must be sound or nothing can be planned. A model
recipe is other people's input: one that is malformed or refers to what does not exist is recorded as
that recipe's problem, and every other recipe loads as usual.
"""

from __future__ import annotations

import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from factory.base.errors import FactoryError, InputError
from factory.base.yamlfile import load_model
from factory.recipes import bundled
from factory.recipes.grammar import check_name, check_values, identity
from factory.recipes.ignored import IgnoredKey, extra_keys, ignored_keys, refuse, summary
from factory.recipes.kv_checks import check_kv_store
from factory.recipes.names import check_variants, refuse_folded_names, refused_slugs
from factory.recipes.references import check_references, hardware_keys, unused
from factory.recipes.schema import Recipe
from factory.recipes.tree_schema import KvStore, Strategy, Taxonomy


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
    digest: str = ""  # sha256 of the file's bytes as they were read

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
    # Every shared file read (taxonomy, strategies, KV stores): the sha256 of its bytes as they were read
    inputs: dict[Path, str] = field(default_factory=dict)

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
    kind: type[Named], path: Path, folder: str, what: str, strict: bool, read: SharedRead
) -> Named:
    """A strategy or KV-store file: its keys the site does not read listed (refused under --strict), its
    name its file's (the site keys them by name, the factory by file), its values checked like a recipe's
    (its display name heads compose files; its commands and configs reach the renderings as they are)."""
    loaded = load_model(kind, path, read.inputs)
    extra = extra_keys(loaded)
    if strict:
        refuse(extra, path)
    if extra:  # one line per file, however many keys (a file with 200,000 printed 200,000 lines)
        read.ignored.append(summary(f"{folder}/{path.name}", extra))
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
    if isinstance(loaded, KvStore):
        check_kv_store(loaded, path)
    return loaded


@dataclass
class SharedRead:
    """What reading the tree's shared files found besides their models: each file's digest, and one line per
    file with keys the site does not read."""

    inputs: dict[Path, str] = field(default_factory=dict)
    ignored: list[str] = field(default_factory=list)


def load_tree(root: Path, strict: bool = False) -> RecipeTree:
    """The tree at `root`; with `strict`, a recipe with a key the site would ignore is refused."""
    taxonomy_path = _shared_files(root)
    read = SharedRead()
    taxonomy = load_model(Taxonomy, taxonomy_path, read.inputs)
    check_values(taxonomy.model_dump(), taxonomy_path)
    for profile in taxonomy.hardware_profiles:
        check_name(profile, taxonomy_path, f"hardware_profiles.{profile}", "hardware profile id")
    strategies: dict[str, Strategy] = {}
    paths: dict[str, Path] = {}
    for path in sorted((root / "strategies").glob("*.yaml")):
        strategy = _named_file(Strategy, path, "strategies", "strategy", strict, read)
        strategies[strategy.name], paths[strategy.name] = strategy, path
    kv_stores: dict[str, KvStore] = {}
    kv_paths: list[tuple[str, Path]] = []
    for path in sorted((root / "kv_store").glob("*.yaml")):
        store = _named_file(KvStore, path, "kv_store", "KV store", strict, read)
        kv_stores[store.name] = store
        kv_paths.append((store.name, path))
    refuse_folded_names([*paths.items(), *kv_paths])
    tree = RecipeTree(root, taxonomy, strategies, paths, kv_stores, ignored=read.ignored, inputs=read.inputs)
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


def _shared_files(root: Path) -> Path:
    """The tree's taxonomy, once every shared file is known to be a regular file inside the tree."""
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
        size = path.stat().st_size
        if size > MAX_RECIPE_BYTES:
            raise InputError(
                f"{size:,} bytes: a file of the tree may have at most {MAX_RECIPE_BYTES:,} (read whole)",
                file=path,
            )
    return taxonomy_path


def _refuse_shared_slugs(tree: RecipeTree) -> None:
    """Two recipes whose outputs would share a name are both refused, each naming the other (their earlier
    files are kept, as for any recipe that turned bad): factory.recipes.names decides which."""
    claimants = {recipe_id: (loaded.path, loaded.recipe) for recipe_id, loaded in tree.recipes.items()}
    for recipe_id, error in refused_slugs(claimants).items():
        loaded = tree.recipes.pop(recipe_id)
        tree.problems.append(RecipeProblem(loaded.path, recipe_id, error))


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


# Bounds on what one recipe makes the factory read. Upstream's largest recipe file has 58 kB
# (factory.recipes.names bounds its variants, factory.recipes.bundled a bundled model folder).
MAX_RECIPE_BYTES = 4 * 2**20


def _load_recipe(path: Path, recipe_id: str, tree: RecipeTree, strict: bool) -> LoadedRecipe:
    _check_file(path)
    read: dict[Path, str] = {}
    recipe = load_model(Recipe, path, read)
    check_variants(recipe, path)
    ignored = ignored_keys(recipe, hardware_keys(tree.taxonomy))
    if strict:
        refuse(ignored, path)
    check_references(recipe, path, tree.taxonomy, set(tree.strategies))
    notes = unused(recipe, tree.taxonomy) + tuple(key.line() for key in ignored)
    folder = bundled.checked_folder(path)
    return LoadedRecipe(recipe, path, recipe_id, folder, notes, ignored, digest=read[path])
