"""Deliberate differences from the site's commands: each rule records exactly what it changed, and a
version-gated rule is judged by the vLLM version the image would run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from factory.base.errors import InputError
from factory.recipes.loader import load_tree
from factory.report.conformance import judge
from tests.conftest import ROOT, recipes_tree, run_factory, small_recipe


def rendered(tmp_path: Path, **model: Any) -> dict[str, Any]:
    """The factory's single-node rendering of a small recipe (no lock: the recipe's own floor counts)."""
    recipe = small_recipe(dependencies=[])
    recipe["model"].update(model)
    tree = recipes_tree(tmp_path, {"acme/Small-8B": recipe})
    result = run_factory(ROOT, "renderings", "--recipes", str(tree), "--json")
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    return next(r for r in lines if r.get("hardware") == "h200" and r.get("strategy") == "single_node_tp")


def site_of(mine: dict[str, Any], argv: list[str]) -> dict[str, Any]:
    """The site's rendering of the same deployment: the argv its JSON API gives (one token per entry)."""
    return {"variant": "default", "hardware": "h200", "strategy": "single_node_tp", "argv": argv} | {
        "deploy_type": "single_node",
        "env": mine["env"],
    }


def flags(rendering: dict[str, Any]) -> list[str]:
    return rendering["argv"][3:]


def test_a_flag_and_its_value_in_one_entry_become_two_words_listed_as_a_deviation(tmp_path: Path) -> None:
    mine = rendered(
        tmp_path, min_vllm_version="0.21.0", base_args=["--max-model-len auto", "--enforce-eager"]
    )
    assert flags(mine)[:3] == ["--max-model-len", "auto", "--enforce-eager"]
    split = next(
        d for d in mine["deviations"] if d["edits"] and d["edits"][0]["before"] == ["--max-model-len auto"]
    )
    assert split["edits"] == [
        {"process": "argv", "before": ["--max-model-len auto"], "after": ["--max-model-len", "auto"]}
    ]
    site = site_of(
        mine, ["vllm", "serve", "acme/Small-8B", "--max-model-len auto", "--enforce-eager", *flags(mine)[3:]]
    )
    assert judge(site, mine) == ("deviation", "")


@pytest.mark.parametrize("entry", ["--max-model-len 4096 --api-key leaked", "--max-model-len -1", "--a  b"])
def test_any_other_entry_with_whitespace_in_a_flag_is_refused(tmp_path: Path, entry: str) -> None:
    recipe = small_recipe()
    recipe["model"]["base_args"] = [entry]
    tree = load_tree(recipes_tree(tmp_path, {"acme/Small-8B": recipe}))
    assert len(tree.problems) == 1
    error = tree.problems[0].error
    assert isinstance(error, InputError) and error.field == "model.base_args[0]" and error.value == entry


def test_max_model_len_auto_is_kept_where_the_recipes_floor_accepts_it(tmp_path: Path) -> None:
    mine = rendered(tmp_path, min_vllm_version="0.21.0", base_args=["--max-model-len", "auto"])
    assert mine["vllm_version"] == "0.21.0" and mine["vllm_version_from"] == "min_vllm_version"
    assert flags(mine)[:2] == ["--max-model-len", "auto"]
    assert not [d for d in mine["deviations"] if d["flag"] == "--max-model-len"]


def test_max_model_len_auto_is_dropped_below_0_14_with_the_edit_recorded(tmp_path: Path) -> None:
    mine = rendered(tmp_path, min_vllm_version="0.11.2", base_args=["--max-model-len", "auto"])
    assert "--max-model-len" not in flags(mine)
    rule = next(d for d in mine["deviations"] if d["flag"] == "--max-model-len")
    assert rule["edits"] == [{"process": "argv", "before": ["--max-model-len", "auto"], "after": []}]
    site = site_of(mine, ["vllm", "serve", "acme/Small-8B", "--max-model-len", "auto", *flags(mine)])
    assert judge(site, mine) == ("deviation", "")


@pytest.mark.parametrize(
    "image", ["vllm/vllm-openai:nightly", "vllm/vllm-openai:latest", "vllm/vllm-openai:qwen38"]
)
def test_with_no_readable_version_the_recipes_own_flag_is_kept_and_the_version_is_unknown(
    tmp_path: Path, image: str
) -> None:
    mine = rendered(
        tmp_path, min_vllm_version="0.11.2", docker_image=image, base_args=["--max-model-len", "auto"]
    )
    assert mine["vllm_version"] == "unknown" and image in mine["vllm_version_from"]
    assert flags(mine)[:2] == ["--max-model-len", "auto"]


def test_a_versioned_image_tag_is_the_version_judged(tmp_path: Path) -> None:
    mine = rendered(
        tmp_path,
        min_vllm_version="0.11.2",
        docker_image={"nvidia": "vllm/vllm-openai:v0.22.1", "amd": "rocm/vllm:nightly"},
        base_args=["--max-model-len", "auto"],
    )
    assert (mine["vllm_version"], mine["vllm_version_from"]) == ("0.22.1", "docker_image")
    assert flags(mine)[:2] == ["--max-model-len", "auto"]
