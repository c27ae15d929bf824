"""Mooncake composed with pd_cluster, against the site's own command builder: its JSON API writes only the
plain pools, so `tests/oracle/resolve_command.mjs` calls the site's resolveCommand (src/lib beside the
oracle's build-api) with the same inputs the factory plans each prefill/decode deployment from. Each pool's
command (exactly, in order) and environment (with its types), and the router, must be the factory's."""

from __future__ import annotations

import shlex
from dataclasses import replace
from typing import Any

from factory.recipes.loader import load_tree
from factory.synthesis import kv_store
from factory.synthesis.command import resolve, served_model
from factory.synthesis.selection import Selection
from tests.site_builder import every_combination, resolve_on_the_site, upstream_tree

MULTI = "MultiConnector"


def test_mooncake_with_prefill_decode_is_what_the_sites_command_builder_computes() -> None:
    tree_path = upstream_tree()
    tree = load_tree(tree_path)
    cases: list[dict[str, Any]] = []
    ours: list[dict[str, Any]] = []
    for rendered in every_combination(tree):
        combo, recipe = rendered.combo, rendered.loaded.recipe
        if combo.strategy != "pd_cluster":
            continue
        for store_id, store in sorted(tree.kv_stores.items()):
            if not kv_store.eligible(recipe, rendered.profile, combo.hardware, store_id):
                continue
            selection = Selection(
                recipe, combo.variant, "pd_cluster", combo.hardware, combo.features, combo.node_count
            )
            selection = replace(selection, pd_nodes=combo.pd_nodes)
            command = resolve(selection, tree.strategies, tree.taxonomy, kv_store=store)
            model = served_model(recipe, combo.variant)
            pools = {pool.role: pool.processes[0] for pool in command.pools}
            ours.append(
                {role: {"argv": process.argv(model), "env": process.env} for role, process in pools.items()}
                | {
                    "router": list(command.router),
                    "key": f"{rendered.recipe_id}/{combo.variant}/{combo.hardware}/{store_id}",
                }
            )
            chosen_nodes = combo.pd_nodes or {}
            pd_nodes = {role: chosen.nodes for role, chosen in chosen_nodes.items()} or None
            cases.append(rendered.case(pd_nodes=pd_nodes, kv=store_id))
    site = resolve_on_the_site(tree_path, cases)
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
