"""Keys the recipes site ignores never stop a recipe: they stay out of every command, are listed per recipe
(renderings, show, one warning line in generate) with a "did you mean", and `--strict` refuses them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from factory.recipes.loader import load_tree
from tests.conftest import ROOT, recipes_tree, run_factory, small_recipe

# What upstream recipes carried that refused them whole before (issue 19), each tolerated by the site.
PLANTED = {
    "notes": "a notes key at the top level",
    "hardware_overrides.amd.note": "a note inside an AMD override",
    "omni.label": "a label inside omni",
    "features.spec.hardware": "a hardware map on a feature (the site reads it only on modes)",
}


def with_unknown_keys() -> dict[str, Any]:
    return small_recipe(
        notes="maintainer notes",
        hardware_overrides={"amd": {"extra_args": ["--no-enable-prefix-caching"], "note": "ROCm only"}},
        omni={"label": "Omni", "tasks": []},
        features={"spec": {"args": ["--speculative-config", "{}"], "hardware": {"h200": "unsupported"}}},
        opt_in_features=["spec"],
    )


def without_unknown_keys() -> dict[str, Any]:
    recipe = with_unknown_keys()
    del recipe["notes"], recipe["hardware_overrides"]["amd"]["note"], recipe["omni"]["label"]
    del recipe["features"]["spec"]["hardware"]
    return recipe


def renderings(tree: Path, *args: str) -> tuple[list[dict[str, Any]], str, int]:
    result = run_factory(ROOT, "renderings", "--recipes", str(tree), "--json", *args)
    return [json.loads(line) for line in result.stdout.splitlines()], result.stderr, result.returncode


def test_keys_the_site_ignores_load_and_are_listed_with_what_they_asked(tmp_path: Path) -> None:
    tree = load_tree(recipes_tree(tmp_path, {"acme/Small-8B": with_unknown_keys()}))
    assert not tree.problems, tree.problems
    loaded = tree.recipes["acme/Small-8B"]
    assert sorted(key.field for key in loaded.ignored) == sorted(PLANTED)
    feature = next(key for key in loaded.ignored if key.field == "features.spec.hardware")
    assert feature.asks is not None and "unsupported on h200" in feature.asks
    assert any("features.spec.hardware" in note for note in loaded.notes), "factory show lists them"


def test_an_ignored_key_changes_no_command(tmp_path: Path) -> None:
    planted, _, code = renderings(recipes_tree(tmp_path / "a", {"acme/Small-8B": with_unknown_keys()}))
    clean, _, _ = renderings(recipes_tree(tmp_path / "b", {"acme/Small-8B": without_unknown_keys()}))
    assert code == 0
    rendered = [line for line in planted if "argv" in line or "head_argv" in line]
    assert rendered and all(sorted(line["ignored"]) == sorted(PLANTED) for line in rendered)

    def commands(lines: list[dict[str, Any]]) -> list[Any]:
        return [{k: v for k, v in line.items() if k != "ignored"} for line in lines]

    assert commands(planted) == commands(clean)


def test_strict_refuses_a_recipe_with_an_ignored_key_naming_file_and_field(tmp_path: Path) -> None:
    recipe = small_recipe()
    recipe["model"]["base_arg"] = recipe["model"].pop("base_args")
    tree = recipes_tree(tmp_path, {"acme/Small-8B": recipe})
    lines, stderr, code = renderings(tree, "--strict")
    assert code == 1, stderr
    problem = next(line for line in lines if line.get("file"))
    assert problem["file"].endswith("acme/Small-8B.yaml")
    assert "model.base_arg" in problem["skipped"] and "did you mean 'base_args'" in problem["skipped"]
    lines, _, code = renderings(tree)
    assert code == 0 and all("model.base_arg" in line["ignored"] for line in lines if "argv" in line)


def test_generate_warns_once_per_recipe_with_names_escaped_and_cut(tmp_path: Path) -> None:
    hostile = "\x1b[31mred" + "A" * 500
    recipe = small_recipe()
    recipe["model"][hostile] = 1
    recipe["model"]["base_arg"] = ["--enforce-eager"]
    tree = recipes_tree(tmp_path / "tree", {"acme/Small-8B": recipe})
    result = run_factory(ROOT, "generate", "--recipes", str(tree), "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("ignored keys in acme/Small-8B")]
    assert len(lines) == 1, result.stderr
    assert "\x1b" not in lines[0] and "\\u001b[31mred" in lines[0] and "A" * 100 not in lines[0]
    assert "model.base_arg: not in the recipes schema here" in lines[0] and "'base_args'" in lines[0]


def test_a_known_key_with_a_value_the_factory_cannot_use_still_refuses_the_recipe(tmp_path: Path) -> None:
    recipe = small_recipe()
    recipe["model"]["context_length"] = "a million"
    tree = load_tree(recipes_tree(tmp_path, {"acme/Small-8B": recipe}))
    assert [p.recipe_id for p in tree.problems] == ["acme/Small-8B"]
    assert "model.context_length" in str(tree.problems[0].error)
    assert "a million" in str(tree.problems[0].error)


def test_show_lists_the_ignored_keys_of_the_recipe(tmp_path: Path) -> None:
    tree = recipes_tree(tmp_path, {"acme/Small-8B": with_unknown_keys()})
    result = run_factory(ROOT, "show", "acme/Small-8B", "--hardware", "h200", "--recipes", str(tree))
    assert result.returncode == 0, result.stderr
    listed = [line for line in result.stdout.splitlines() if "ignored, as the site ignores it" in line]
    assert sorted(line.split(":")[0] for line in listed) == sorted(PLANTED)
    assert any("unsupported on h200" in line for line in listed)


def test_an_unknown_key_in_a_strategy_file_stops_nothing_and_strict_refuses_it(tmp_path: Path) -> None:
    tree = recipes_tree(tmp_path / "tree", {"acme/Small-8B": small_recipe()})
    strategy = tree / "strategies" / "single_node_tp.yaml"
    strategy.write_text(strategy.read_text() + "tooltip: shown on hover\n")
    out = ["--recipes", str(tree), "--out", str(tmp_path / "out")]
    result = run_factory(ROOT, "generate", *out)
    assert result.returncode == 0, result.stderr
    assert (  # one line per file, as for a recipe (issue 43: one per key printed 200,000 lines)
        "ignored keys in strategies/single_node_tp.yaml: tooltip: not in the recipes schema" in result.stderr
    )
    refused = run_factory(ROOT, "generate", "--strict", *out)
    assert refused.returncode == 2 and "single_node_tp.yaml: tooltip" in refused.stderr, refused.stderr
