"""The upstream site's command synthesis, rule by rule, on small recipes of the tests' own.

Each test states one rule of src/lib/command-synthesis.js (the site's code) as a user of the recipes
repository would read it off the recipe page. test_corpus.py checks the whole corpus against the site's
own output where it is available."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from factory.recipes.loader import load_tree
from factory.synthesis.args import dedupe
from factory.synthesis.command import resolve
from factory.synthesis.matrix import combinations, hardware_for
from factory.synthesis.selection import Selection
from tests.conftest import recipes_tree, small_recipe


def commands(tmp_path: Path, recipe: dict[str, Any], hardware: str, strategy: str, variant: str = "default"):  # type: ignore[no-untyped-def]
    tree = load_tree(recipes_tree(tmp_path, {"acme/Small-8B": recipe}))
    assert not tree.problems, [p.one_line() for p in tree.problems]
    loaded = tree.recipes["acme/Small-8B"]
    combos, refusals = combinations(loaded.recipe, variant, hardware, tree.strategies, tree.taxonomy)
    combo = next((c for c in combos if c.strategy == strategy), None)
    assert combo is not None, f"{strategy} not rendered on {hardware}: {refusals}"
    selection = Selection(
        loaded.recipe, variant, strategy, hardware, combo.features, combo.node_count, combo.pd_nodes
    )
    return resolve(selection, tree.strategies, tree.taxonomy)


def flags(process) -> list[str]:  # type: ignore[no-untyped-def]
    return list(process.args)


def test_later_duplicates_win_in_place_and_single_dash_flags_are_flags() -> None:
    args = ["--max-model-len", "1000", "-cc.pass_config.fuse_rope_kvcache=True", "--max-model-len", "2000"]
    assert dedupe(args) == ["-cc.pass_config.fuse_rope_kvcache=True", "--max-model-len", "2000"]
    # A lone flag followed by a flag takes no value; an exact spelling is one flag (the site's rule).
    assert dedupe(["--enforce-eager", "--no-enforce-eager"]) == ["--enforce-eager", "--no-enforce-eager"]


def test_single_node_tp_fits_one_gpu_else_the_node(tmp_path: Path) -> None:
    small = commands(tmp_path / "a", small_recipe(), "h200", "single_node_tp")
    assert flags(small.nodes[0])[-2:] == ["--tensor-parallel-size", "1"], "20 GB fits one 141 GB GPU"
    big = small_recipe(variants={"default": {"precision": "bf16", "vram_minimum_gb": 400}})
    assert flags(commands(tmp_path / "b", big, "h200", "single_node_tp").nodes[0])[-1] == "8"


def test_a_variant_tp_map_wins_over_the_strategy_override_and_is_capped_by_the_node(tmp_path: Path) -> None:
    recipe = small_recipe(
        variants={"default": {"precision": "bf16", "vram_minimum_gb": 20, "tp": {"hopper": 4, "gb200": 8}}},
        strategy_overrides={"single_node_tp": {"tp": 2}},
    )
    assert flags(commands(tmp_path / "a", recipe, "h200", "single_node_tp").nodes[0])[-1] == "4"
    assert flags(commands(tmp_path / "b", recipe, "gb200", "single_node_tp").nodes[0])[-1] == "4", "4 GPUs"
    assert flags(commands(tmp_path / "c", recipe, "mi300x", "single_node_tp").nodes[0])[-1] == "2"


def test_a_strategy_flag_is_not_lost_to_the_base_args(tmp_path: Path) -> None:
    """A base `--tensor-parallel-size 8` on a 4-GPU tray gives way to the strategy's size (it comes later)."""
    recipe = small_recipe(
        model={**small_recipe()["model"], "base_args": ["--tensor-parallel-size", "8"]},
        variants={"default": {"precision": "bf16", "vram_minimum_gb": 900}},
    )
    single = commands(tmp_path / "a", recipe, "gb200", "single_node_tp")
    assert flags(single.nodes[0]) == ["--tensor-parallel-size", "4"]
    multi = commands(tmp_path / "b", recipe, "gb200", "multi_node_tp")
    head, worker = multi.nodes
    assert flags(head)[:2] == ["--tensor-parallel-size", "8"] and "--nnodes" in flags(head)
    assert flags(worker)[-1] == "--headless"


def test_strategy_overrides_and_their_hardware_blocks_replace_the_recipes(tmp_path: Path) -> None:
    recipe = small_recipe(
        hardware_overrides={"hopper": {"extra_args": ["--a", "1"], "extra_env": {"RECIPE": "1"}}},
        strategy_overrides={
            "single_node_tp": {
                "extra_args": ["--b", "2"],
                "env": {"STRATEGY": "1"},
                "hardware_overrides": {
                    "hopper": {"extra_args": ["--c", "3"]},
                    "h200": {"extra_args": ["--d"]},
                },
            }
        },
    )
    process = commands(tmp_path, recipe, "h200", "single_node_tp").nodes[0]
    assert flags(process) == [
        "--trust-remote-code",
        "--tensor-parallel-size",
        "1",
        "--b",
        "2",
        "--c",
        "3",
        "--d",
    ]
    assert process.env == {"STRATEGY": "1"}, "the strategy's hopper block replaced the recipe's, env too"


def test_features_modes_and_strategy_gating(tmp_path: Path) -> None:
    recipe = small_recipe(
        features={
            "reasoning": {"args": ["--reasoning-parser", "x"], "strategies": ["multi_node_tp"]},
            "spec_decoding": {
                "default_mode": "mtp",
                "modes": {
                    "mtp": {"args": ["--speculative-config", "mtp"]},
                    "dflash": {
                        "args": ["--speculative-config", "dflash"],
                        "hardware": {"hopper": "unsupported"},
                    },
                },
            },
        },
        variants={
            "default": {"precision": "bf16", "vram_minimum_gb": 20},
            "fast": {
                "precision": "bf16",
                "vram_minimum_gb": 20,
                "default_modes": {"spec_decoding": "dflash"},
            },
        },
        opt_in_features=["spec_decoding"],
    )
    default = flags(commands(tmp_path / "a", recipe, "b200", "single_node_tp").nodes[0])
    assert "--reasoning-parser" not in default, "gated to multi_node_tp"
    assert "--speculative-config" not in default, "opt-in"
    fast_b200 = flags(commands(tmp_path / "b", recipe, "b200", "single_node_tp", "fast").nodes[0])
    assert fast_b200[-2:] == ["--speculative-config", "dflash"], "default_modes turns it on with its mode"
    fast_h200 = flags(commands(tmp_path / "c", recipe, "h200", "single_node_tp", "fast").nodes[0])
    assert fast_h200[-2:] == ["--speculative-config", "mtp"], "dflash is unsupported on hopper"


def test_gpu_floors_grow_multi_node_and_drop_single_node(tmp_path: Path) -> None:
    recipe = small_recipe(
        compatible_strategies=["single_node_tp", "multi_node_tp", "multi_node_dep"],
        model={**small_recipe()["model"], "architecture": "moe"},
        strategy_min_gpus={"multi_node_tp": 16, "h100": 32},
        strategy_hardware={"multi_node_dep": {"h100": "unsupported", "default": "supported"}},
    )
    tree = load_tree(recipes_tree(tmp_path, {"acme/Small-8B": recipe}))
    loaded = tree.recipes["acme/Small-8B"]
    on = {
        hw: {
            c.strategy: c.node_count
            for c in combinations(loaded.recipe, "default", hw, tree.strategies, tree.taxonomy)[0]
        }
        for hw in ("h200", "h100", "gb200")
    }
    assert on["h200"] == {"single_node_tp": 1, "multi_node_tp": 2, "multi_node_dep": 2}
    assert on["h100"] == {"multi_node_tp": 4}, "32 GPUs on H100: no single node, DEP opted out"
    assert on["gb200"]["multi_node_tp"] == 4, "16 GPUs on 4-GPU trays"


def test_nvfp4_needs_blackwell_and_restricted_profiles_need_listing(tmp_path: Path) -> None:
    recipe = small_recipe(
        variants={
            "default": {"precision": "bf16", "vram_minimum_gb": 20},
            "nvfp4": {"precision": "nvfp4", "vram_minimum_gb": 10, "model_id": "acme/Small-8B-NVFP4"},
        },
        meta={"title": "Small", "hardware": {"rtx_pro_6000": "verified", "h100": "unsupported"}},
    )
    tree = load_tree(recipes_tree(tmp_path, {"acme/Small-8B": recipe}))
    loaded = tree.recipes["acme/Small-8B"].recipe
    default = hardware_for(loaded, "default", tree.taxonomy)
    nvfp4 = hardware_for(loaded, "nvfp4", tree.taxonomy)
    assert "rtx_pro_6000" in default and "rtx_5090" not in default and "h100" not in default
    assert "h200" not in nvfp4 and "b200" in nvfp4 and "mi300x" not in nvfp4


def test_pd_cluster_pools_and_router(tmp_path: Path) -> None:
    recipe = small_recipe(
        compatible_strategies=["single_node_tp", "multi_node_dep", "pd_cluster"],
        model={**small_recipe()["model"], "architecture": "moe"},
        variants={"default": {"precision": "bf16", "vram_minimum_gb": 1500}},
        strategy_overrides={"pd_cluster": {"decode": {"parallelism": "dep"}}},
    )
    pd = commands(tmp_path, recipe, "h200", "pd_cluster")
    prefill, decode = pd.pools
    assert prefill.meta.nodes == decode.meta.nodes == 2, "1500 GB over 1128 GB nodes: two per pool"
    assert "--headless" in prefill.processes[1].args and "--port" in prefill.processes[0].args
    assert decode.processes[1].args[decode.processes[1].args.index("--data-parallel-start-rank") + 1] == "8"
    assert decode.processes[1].env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == "$DECODE_NODE_2"
    router = list(pd.router)
    assert router.count("--decode") == 2 and router.count("--prefill") == 1, "DEP nodes each serve HTTP"
