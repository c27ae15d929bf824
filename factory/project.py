"""The project: a recipes tree, the factory's catalog, and the folder generated files go to.

By default all three are the project's own (recipes/, catalog/, and images/ and compose/ beside them).
`--recipes DIR` (or FACTORY_RECIPES) reads another tree, such as a checkout of the upstream recipes
repository, and `--out DIR` writes its images and compose files elsewhere.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from factory.base.errors import InputError
from factory.catalog.loader import load_catalog
from factory.catalog.schema import Catalog
from factory.lockfile.model import Lock
from factory.lockfile.published import PublishRecord, read_record, record_file
from factory.lockfile.store import LOCK_NAME, read_lock
from factory.recipes.loader import RecipeTree, load_tree


@dataclass(frozen=True)
class Project:
    root: Path  # the factory project: its catalog/ (and, by default, its recipes/)
    tree: RecipeTree
    catalog: Catalog
    out: Path  # where images/ and compose/ are generated
    lock_path: Path  # the vLLM lock: beside the project's recipes, else in the output folder
    lock: Lock | None  # None until `factory lock` has written one
    # What `factory publish` (and publish-platforms) pushed: compose files run a published image by digest.
    published: PublishRecord = field(default_factory=PublishRecord)

    @property
    def catalog_path(self) -> Path:
        return self.root / "catalog" / "hardware.yaml"

    def relative(self, path: Path) -> str:
        """A path as generated files name it: from the project root, else from the recipes tree's root
        (so files generated from a checkout elsewhere do not carry this machine's paths)."""
        for base in (self.root, self.tree.root):
            try:
                return path.resolve().relative_to(base.resolve()).as_posix()
            except ValueError:
                continue
        return path.name

    def named(self, path: Path) -> str:
        """A file a generated file names as its source: from the output folder where it lives there (a
        --recipes tree's lock/), else as relative() names it; never by this machine's path."""
        out = self.out.resolve()
        inside = path.resolve().is_relative_to(out)
        return path.resolve().relative_to(out).as_posix() if inside else self.relative(path)

    def source(self, relative: str) -> Path:
        """The file or folder a `relative()` path names."""
        for base in (self.root, self.tree.root):
            if (base / relative).exists():
                return base / relative
        return self.root / relative


def find_root(start: Path) -> Path:
    """The project folder: the first of `start` and its parents that holds recipes/ and catalog/."""
    for folder in [start, *start.parents]:
        if (folder / "recipes" / "taxonomy.yaml").is_file() and (folder / "catalog").is_dir():
            return folder
    raise InputError(
        "no factory project here: looked for recipes/taxonomy.yaml and catalog/ here and above",
        file=start,
        hint="run inside the project, or pass --root",
    )


def load_project(
    root: Path,
    recipes: Path | None = None,
    out: Path | None = None,
    lock: Path | None = None,
    strict: bool = False,
) -> Project:
    """The project at `root`: recipes from `recipes` (else FACTORY_RECIPES, else root/recipes), output to
    `out` (else root). `strict`: a recipe with a key the site would ignore is refused."""
    chosen = recipes or (Path(os.environ["FACTORY_RECIPES"]) if os.environ.get("FACTORY_RECIPES") else None)
    tree = load_tree(chosen or root / "recipes", strict)
    out = out or root
    own_tree = tree.root.resolve() == (root / "recipes").resolve()
    lock_path = lock or ((root / "recipes" if own_tree else out) / "lock" / LOCK_NAME)
    catalog = load_catalog(root / "catalog" / "hardware.yaml")
    published = read_record(record_file(lock_path))
    return Project(root, tree, catalog, out, lock_path, read_lock(lock_path), published)
