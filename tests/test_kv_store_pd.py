"""Mooncake composed with pd_cluster, against the site's own command builder: its JSON API writes only the
plain pools, so `tests/oracle/pd_mooncake.mjs` calls the site's resolveCommand (src/lib beside the
oracle's build-api) with the same inputs the factory plans each prefill/decode deployment from. Each pool's
command (exactly, in order) and environment (with its types), and the router, must be the factory's."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from typing import Any

from factory.recipes.loader import load_tree
from factory.synthesis import kv_store
from factory.synthesis.command import resolve, served_model
from factory.synthesis.matrix import combinations, hardware_for
from factory.synthesis.selection import Selection
from tests.conftest import ROOT, missing_tool, needs_path

HARNESS = ROOT / "tests" / "oracle" / "pd_mooncake.mjs"
MULTI = "MultiConnector"


def test_mooncake_with_prefill_decode_is_what_the_sites_command_builder_computes() -> None:
    tree_path = needs_path("FACTORY_UPSTREAM_RECIPES")
    oracle = needs_path("FACTORY_RECIPES_ORACLE").parent
    node = shutil.which("node") or missing_tool("node", "apt-get install nodejs")
    tree = load_tree(tree_path)
    cases: list[dict[str, Any]] = []
    ours: list[dict[str, Any]] = []
    for recipe_id, loaded in tree.recipes.items():
        recipe = loaded.recipe
        if recipe.is_omni:
            continue
        for variant in recipe.variants:
            for hardware in hardware_for(recipe, variant, tree.taxonomy):
                profile = tree.taxonomy.hardware_profiles[hardware]
                found, _ = combinations(recipe, variant, hardware, tree.strategies, tree.taxonomy)
                for combo in (c for c in found if c.strategy == "pd_cluster"):
                    for store_id, store in sorted(tree.kv_stores.items()):
                        if not kv_store.eligible(recipe, profile, hardware, store_id):
                            continue
                        selection = Selection(
                            recipe,
                            variant,
                            "pd_cluster",
                            hardware,
                            combo.features,
                            combo.node_count,
                            combo.pd_nodes,
                        )
                        command = resolve(selection, tree.strategies, tree.taxonomy, kv_store=store)
                        model = served_model(recipe, variant)
                        pools = {pool.role: pool.processes[0] for pool in command.pools}
                        ours.append(
                            {
                                role: {"argv": process.argv(model), "env": process.env}
                                for role, process in pools.items()
                            }
                            | {
                                "router": list(command.router),
                                "key": f"{recipe_id}/{variant}/{hardware}/{store_id}",
                            }
                        )
                        pd_nodes = (
                            {role: chosen.nodes for role, chosen in combo.pd_nodes.items()}
                            if combo.pd_nodes
                            else None
                        )
                        cases.append(
                            {
                                "recipe": str(loaded.path),
                                "hf_id": recipe_id,
                                "variant": variant,
                                "hardware": hardware,
                                "features": list(combo.features),
                                "node_count": combo.node_count,
                                "pd_nodes": pd_nodes,
                                "kv": store_id,
                            }
                        )
    result = subprocess.run(
        [node, str(HARNESS), str(oracle), str(tree_path)],
        input=json.dumps(cases), capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    site = json.loads(result.stdout)
    assert len(site) == len(ours) > 500, len(ours)
    differing = []
    for theirs, mine in zip(site, ours, strict=True):
        for role in ("prefill", "decode"):
            if theirs[role] != mine[role]:
                differing.append(f"{mine['key']} {role}")
            assert MULTI in mine[role]["argv"][-1], f"{mine['key']} {role}: the pool's connector is not last"
        router = shlex.split(theirs["router"].replace("\\\n", " ")) if theirs["router"] else []
        if router != mine["router"]:
            differing.append(f"{mine['key']} router")
    print(f"PD x Mooncake: {len(ours)} compositions ({len(ours) * 2} pools) against the site's builder")
    assert not differing, f"{len(differing)} differ, e.g. {differing[:5]}"
