"""The site's own command builder for what its JSON API does not write: `tests/oracle/resolve_command.mjs`
runs resolveCommand (src/lib beside the oracle's build-api) on a list of cases, in one node process."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from factory.recipes.loader import LoadedRecipe, RecipeTree
from factory.recipes.tree_schema import HardwareProfile
from factory.synthesis.matrix import Combination, combinations, hardware_for
from tests.conftest import ROOT, missing_tool, needs_path

HARNESS = ROOT / "tests" / "oracle" / "resolve_command.mjs"


def upstream_tree() -> Path:
    """The shared corpus (a skip, or a failure under FACTORY_REQUIRE_UPSTREAM, when it is not here)."""
    return needs_path("FACTORY_UPSTREAM_RECIPES")


def resolve_on_the_site(tree: Path, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What resolveCommand gives for each case (see the harness for the case's keys), in order."""
    oracle = needs_path("FACTORY_RECIPES_ORACLE").parent
    node = shutil.which("node") or missing_tool("node", "apt-get install nodejs")
    result = subprocess.run(
        [node, str(HARNESS), str(oracle), str(tree)],
        input=json.dumps(cases), capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    site: list[dict[str, Any]] = json.loads(result.stdout)
    assert len(site) == len(cases)
    return site


@dataclass(frozen=True)
class Rendered:
    """One combination the site renders for a recipe of the tree."""

    recipe_id: str
    loaded: LoadedRecipe
    profile: HardwareProfile
    combo: Combination

    def case(self, **extra: Any) -> dict[str, Any]:
        """The harness's case for it, with what the test adds (strategy, kv, pd_nodes)."""
        return {
            "recipe": str(self.loaded.path),
            "hf_id": self.recipe_id,
            "variant": self.combo.variant,
            "hardware": self.combo.hardware,
            "strategy": self.combo.strategy,
            "features": list(self.combo.features),
            "node_count": self.combo.node_count,
            **extra,
        }


def every_combination(tree: RecipeTree) -> Iterator[Rendered]:
    """Every combination the site renders for the tree's recipes (omni recipes have their own commands)."""
    for recipe_id, loaded in tree.recipes.items():
        recipe = loaded.recipe
        if recipe.is_omni:
            continue
        for variant in recipe.variants:
            for hardware in hardware_for(recipe, variant, tree.taxonomy):
                profile = tree.taxonomy.hardware_profiles[hardware]
                found, _ = combinations(recipe, variant, hardware, tree.strategies, tree.taxonomy)
                yield from (Rendered(recipe_id, loaded, profile, combo) for combo in found)
