"""A KV store's instance count, against the site's own command builder: the page lets a reader pick how many
vLLM instances share the store (its JSON API writes each store's default), and `factory show --instances N`
does the same. For every KV-store deployment of the shared corpus with 1, 2 and 3 instances, each instance's
commands (every node, exactly, in order) and environment, and the router, must be what resolveCommand gives
for that instance."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from factory.recipes.loader import load_tree
from factory.synthesis import kv_store
from factory.synthesis.features import default_features
from tests.conftest import ROOT, run_factory
from tests.site_builder import resolve_on_the_site, upstream_tree

COUNTS = (1, 2, 3)


def test_every_kv_store_with_one_to_three_instances_is_what_the_sites_command_builder_computes() -> None:
    tree_path = upstream_tree()
    tree = load_tree(tree_path)
    cases: list[dict[str, Any]] = []
    ours: list[dict[str, Any]] = []
    for recipe_id, loaded in tree.recipes.items():
        recipe = loaded.recipe
        for variant in recipe.variants:
            for hardware in tree.taxonomy.hardware_profiles:
                for count in COUNTS:
                    stores = kv_store.commands(
                        recipe,
                        variant,
                        hardware,
                        tree.kv_stores,
                        tree.strategies,
                        tree.taxonomy,
                        instances=count,
                    )
                    for command in stores:
                        assert len(command.instances) == count
                        router = list(command.router)
                        for current, instance in enumerate(command.instances):
                            ours.append(
                                {
                                    "nodes": [process.argv(command.model) for process in instance.nodes],
                                    "env": command.env,
                                    "router": router,
                                    "key": f"{recipe_id}/{variant}/{hardware}/{command.store_id}"
                                    f" x{count} #{current}",
                                }
                            )
                            cases.append(
                                {
                                    "recipe": str(loaded.path),
                                    "hf_id": recipe_id,
                                    "variant": variant,
                                    "hardware": hardware,
                                    "strategy": command.serving,
                                    "features": default_features(recipe, hardware, variant),
                                    "node_count": command.node_count,
                                    "kv": command.store_id,
                                    "instances": {"count": count, "current": current},
                                }
                            )
    site = resolve_on_the_site(tree_path, cases)
    assert len(ours) > 5000, len(ours)
    differing = []
    for theirs, mine in zip(site, ours, strict=True):
        for part in ("nodes", "env"):
            if theirs[part] != mine[part]:
                differing.append(f"{mine['key']} {part}")
        router = shlex.split(theirs["router"].replace("\\\n", " ")) if theirs["router"] else []
        if router != mine["router"]:
            differing.append(f"{mine['key']} router")
    multi = sum(len(m["nodes"]) > 1 for m in ours)
    print(
        f"KV-store instances: {len(ours)} instance commands ({multi} spanning nodes), as the site builds them"
    )
    assert not differing, f"{len(differing)} differ, e.g. {differing[:5]}"


def test_show_scales_a_kv_store_and_refuses_instances_elsewhere(tmp_path: Path) -> None:
    def show(*args: str) -> Any:
        return run_factory(
            ROOT, "show", "moonshotai/Kimi-Linear-48B-A3B-Instruct", "--recipes", str(upstream_tree()),
            "--out", str(tmp_path), "--hardware", "h200", *args,
        )  # fmt: skip

    three = show("--strategy", "kv_store_distributed_mooncake", "--instances", "3")
    assert three.returncode == 0, three.stderr
    assert [
        f"## Serve — instance {n} (1 node), its head (instance-{n})" in three.stdout for n in (1, 2, 3)
    ] == [True] * 3
    assert "'http://$VLLM_INSTANCE_3:8000'" in three.stdout  # the router lists the third instance
    plain = show("--strategy", "single_node_tp", "--instances", "2")
    assert plain.returncode != 0 and "is not a KV store" in plain.stderr, plain.stderr
    zero = show("--strategy", "kv_store_distributed_mooncake", "--instances", "0")
    assert zero.returncode != 0 and "0 is outside 1..64" in zero.stderr, zero.stderr
