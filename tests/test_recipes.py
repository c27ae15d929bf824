"""Recipes in the upstream schema load; bad input fails naming file, field, value and choices."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from factory.base.errors import InputError, RefusedError
from factory.lock.pins import pinned_vllm
from factory.project import Project
from factory.recipes.loader import load_tree
from tests.conftest import FIXTURES, KIMI, run_factory, tree_snapshot

KIMI_FILE = Path("recipes/models/moonshotai/Kimi-Linear-48B-A3B-Instruct.yaml")


def test_upstream_schema_samples_load() -> None:
    tree = load_tree(FIXTURES / "upstream-schema")
    moe = tree.recipe("acme/Moe-Agent-1T").recipe
    assert moe.model.docker_image["amd"] == "vllm/vllm-openai-rocm:nightly"
    assert moe.variants["nvfp4"].model_id == "acme/Moe-Agent-1T-NVFP4"
    assert moe.hardware_opt_in_features["gb200"] == ["encoder_parallel"]
    assert "pd_cluster" in moe.strategy_overrides
    small = tree.recipe("example/small-moe-it").recipe
    assert small.strategy_overrides["single_node_tp"].tp == 1
    assert small.variants["default"].hardware_overrides["rtx_pro_6000"].extra_args[-1] == "0.9"
    assert tree.strategies["pd_cluster"].deploy_type == "pd_cluster"


def test_project_recipe_has_the_seed_facts(project: Project) -> None:
    recipe = project.tree.recipe(KIMI).recipe
    assert recipe.model.min_vllm_version == "0.11.2"
    assert pinned_vllm(project.tree.recipe(KIMI), project.catalog) == "0.11.2"
    assert recipe.hardware_overrides["amd"].extra_env == {"SAFETENSORS_FAST_GPU": "1"}
    assert recipe.hardware_overrides["amd"].extra_args == ["--no-enable-prefix-caching"]
    assert recipe.compatible_strategies == [
        "single_node_tp",
        "multi_node_tp",
        "multi_node_tp_pp",
        "multi_node_tep",
        "multi_node_dep",
    ]


def _edit(root: Path, change) -> None:
    path = root / KIMI_FILE
    data = yaml.safe_load(path.read_text())
    change(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def _kimi_files(root: Path) -> dict[str, bytes]:
    return {k: v for k, v in tree_snapshot(root).items() if "kimi-linear" in k}


def _fails_clearly(root: Path, *expected: str, strict: bool = False) -> str:
    """A bad recipe is that recipe's problem: named in one line, its files kept, the others generated."""
    before = _kimi_files(root)
    tiny = root / "images" / "tiny-random-llama"
    shutil.rmtree(tiny)  # proof that the good recipe is still generated
    result = run_factory(root, "generate", *(["--strict"] if strict else []))
    assert result.returncode == 1, result.stdout + result.stderr
    line = next(line for line in result.stderr.splitlines() if line.startswith("bad recipe:"))
    for text in expected:
        assert text in line, line
    assert _kimi_files(root) == before, "the bad recipe's earlier files were changed"
    assert (tiny / "vllm0.32.0-cpu-default" / "Dockerfile").is_file(), "the good recipe was not generated"
    assert "docker-bake" not in result.stderr
    bake = (root / "images" / "docker-bake.hcl").read_text()
    assert "kimi-linear-48b-a3b-instruct-vllm0-11-2-h200-default" in bake, "its bake targets are kept too"
    return line


def _fails_for_everything(root: Path, *expected: str) -> None:
    """Bad shared input (the catalog, the taxonomy) stops the run before anything is written."""
    before = tree_snapshot(root)
    result = run_factory(root, "generate")
    assert result.returncode == 2, result.stdout + result.stderr
    for text in expected:
        assert text in result.stderr, result.stderr
    assert tree_snapshot(root) == before


def _ignored_with_a_warning(root: Path, *expected: str) -> str:
    """A key the site ignores stops nothing: the recipe generates, with one warning line naming it."""
    result = run_factory(root, "generate")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("ignored keys in ")]
    assert len(lines) == 1, result.stderr
    for text in expected:
        assert text in lines[0], lines[0]
    return lines[0]


def test_a_typo_in_a_field_is_ignored_with_a_did_you_mean_and_refused_when_strict(scratch: Path) -> None:
    _edit(scratch, lambda d: d["model"].update(base_arg=d["model"].pop("base_args")))
    _ignored_with_a_warning(
        scratch, "moonshotai/Kimi-Linear-48B-A3B-Instruct", "model.base_arg", "'base_args'"
    )
    line = _fails_clearly(scratch, str(KIMI_FILE), "model.base_arg", "--strict", "'base_args'", strict=True)
    assert "the site" in line


def test_an_unknown_hardware_override_key_is_ignored_and_refused_when_strict(scratch: Path) -> None:
    _edit(scratch, lambda d: d["hardware_overrides"].update(amdd=d["hardware_overrides"].pop("amd")))
    _ignored_with_a_warning(scratch, "hardware_overrides.amdd", "names no hardware", "'amd'")
    _fails_clearly(scratch, "hardware_overrides.amdd", "names no hardware", "'amd'", strict=True)


def test_unknown_strategy(scratch: Path) -> None:
    _edit(scratch, lambda d: d["compatible_strategies"].append("multi_node_tpp"))
    _fails_clearly(scratch, "compatible_strategies[5]", "unknown strategy", "did you mean: 'multi_node_tp'")


def test_malformed_yaml_names_the_line(scratch: Path) -> None:
    path = scratch / KIMI_FILE
    path.write_text(path.read_text().replace("variants:\n", "variants:\n  - [unclosed\n", 1))
    _fails_clearly(scratch, str(KIMI_FILE), "malformed YAML at line")


def test_a_key_written_twice_is_an_error(scratch: Path) -> None:
    path = scratch / KIMI_FILE
    path.write_text(
        path.read_text().replace("  architecture: moe\n", "  architecture: moe\n  architecture: dense\n")
    )
    _fails_clearly(scratch, "the key 'architecture' appears twice", "first at line")


def test_known_bad_pin_is_refused_with_its_reason(scratch: Path) -> None:
    _edit(scratch, lambda d: d["dependencies"][0].update(command="uv pip install vllm==0.12.0"))
    _fails_clearly(scratch, "dependencies[0].command", "0.12.0", "indexer_rotary_emb")


def test_pin_below_minimum(scratch: Path) -> None:
    _edit(scratch, lambda d: d["dependencies"][0].update(command="uv pip install vllm==0.10.2"))
    _fails_clearly(scratch, "older than the recipe's min_vllm_version 0.11.2", "'0.10.2'")


def test_pin_that_is_not_a_version(scratch: Path) -> None:
    _edit(scratch, lambda d: d["dependencies"][0].update(command="uv pip install vllm==latest"))
    _fails_clearly(scratch, "not a version number", "'latest'")


def test_wrong_type(scratch: Path) -> None:
    _edit(scratch, lambda d: d["model"].update(context_length="a million"))
    _fails_clearly(scratch, "model.context_length", "'a million'")


def test_bad_catalog_install_reference(scratch: Path) -> None:
    path = scratch / "catalog" / "hardware.yaml"
    path.write_text(path.read_text().replace("install: cuda-pypi", "install: cuda-pipy", 1))
    _fails_for_everything(scratch, "hardware.h100.install", "'cuda-pipy'", "did you mean: 'cuda-pypi'")


def test_known_bad_pin_raises_refused(project: Project) -> None:
    loaded = project.tree.recipe(KIMI)
    bad = loaded.recipe.model_copy(
        update={
            "dependencies": [
                loaded.recipe.dependencies[0].model_copy(update={"command": "pip install vllm==0.12.0"})
            ]
        }
    )
    with pytest.raises(RefusedError, match="indexer_rotary_emb"):
        pinned_vllm(replace(loaded, recipe=bad), project.catalog)


def test_input_error_format() -> None:
    error = InputError(
        "unknown hardware", file="r.yaml", field="--hardware", value="h2000", valid=["h200", "h100"]
    )
    assert str(error).splitlines() == [
        "r.yaml: --hardware: unknown hardware",
        "  got: 'h2000'",
        "  did you mean: 'h200'?",
        "  valid: h100, h200",
    ]
