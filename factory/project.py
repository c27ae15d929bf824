"""The project's layout: where recipes, catalog and generated output live, loaded once."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from factory.catalog.loader import load_catalog
from factory.catalog.schema import Catalog
from factory.recipes.loader import RecipeTree, load_tree

REPOSITORY_PREFIX = "vllm-factory"


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


def load_project(root: Path) -> Project:
    return Project(root, load_tree(root / "recipes"), load_catalog(root / "catalog" / "hardware.yaml"))
