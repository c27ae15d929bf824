"""The project's layout: where recipes, catalog and generated output live, loaded once."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from factory.catalog.loader import load_catalog
from factory.catalog.schema import Catalog
from factory.errors import InputError
from factory.recipes.loader import RecipeTree, load_tree


@dataclass(frozen=True)
class Project:
    root: Path
    tree: RecipeTree
    catalog: Catalog

    @property
    def catalog_path(self) -> Path:
        return self.root / "catalog" / "hardware.yaml"

    def relative(self, path: Path) -> str:
        try:
            return path.resolve().relative_to(self.root.resolve()).as_posix()
        except ValueError:
            return path.as_posix()


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


def load_project(root: Path) -> Project:
    return Project(root, load_tree(root / "recipes"), load_catalog(root / "catalog" / "hardware.yaml"))
