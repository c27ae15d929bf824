"""The factory on the upstream recipes repository as a whole: every recipe generated, the site's own
commands reproduced, one bad recipe never blocking the rest.

These tests need the upstream tree (FACTORY_UPSTREAM_RECIPES) and the site's build script
(FACTORY_RECIPES_ORACLE, a command `build-api TREE OUT`). A user's clone has neither, so they skip and
say why; .ci/run sets both where they exist, with FACTORY_REQUIRE_UPSTREAM=1, so there they fail instead.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from types import UnionType
from typing import Any, Union, get_args, get_origin

import pytest
import yaml
from packaging.specifiers import SpecifierSet
from packaging.version import Version
from pydantic import BaseModel

from factory.catalog.loader import load_catalog
from factory.recipes.schema import Recipe
from factory.report.conformance import compare, oracle_renderings
from tests.conftest import ROOT, needs_path, run_factory

FLOOR = json.loads((ROOT / "tests" / "data" / "conformance-floor.json").read_text())["rate"]


@pytest.fixture(scope="module")
def upstream() -> Path:
    return needs_path("FACTORY_UPSTREAM_RECIPES")


@pytest.fixture(scope="module")
def oracle(upstream: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_site(upstream, tmp_path_factory.mktemp("oracle"))


def renderings(tree: Path) -> list[dict[str, Any]]:
    result = run_factory(ROOT, "renderings", "--recipes", str(tree), "--json")
    assert result.returncode == 0, result.stderr[-2000:]
    return [json.loads(line) for line in result.stdout.splitlines()]


@pytest.fixture(scope="module")
def upstream_lines(upstream_renderings: list[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in upstream_renderings]


def run_site(tree: Path, out: Path) -> Path:
    build_api = needs_path("FACTORY_RECIPES_ORACLE")
    result = subprocess.run(
        [str(build_api), str(tree), str(out)], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    return out


def test_every_upstream_rendering_matches_the_site_exactly_or_by_its_recorded_edits(
    oracle: Path, upstream_lines: list[dict[str, Any]]
) -> None:
    site = oracle_renderings(oracle)
    comparison = compare(site, upstream_lines)
    print(comparison.table())
    assert comparison.counts["missing"] == 0, comparison.table()
    assert comparison.rate >= FLOOR, comparison.table()
    assert comparison.counts["skipped"] <= comparison.total // 10, "skips beyond TPU/XPU/Ascend hardware"
    # Every kind of process is compared: one node, head and workers, both PD pools and the router.
    kinds = {data.get("deploy_type") for data in site.renderings.values()}
    assert {"single_node", "multi_node", "pd_cluster", "kv_store_lb"} <= kinds
    assert comparison.uncompared, "what either side renders without a counterpart is counted with why"


def test_the_whole_corpus_locks_generates_and_checks_clean(upstream: Path, upstream_generated: Path) -> None:
    out = upstream_generated  # the run's corpus lock, and `factory generate` of the corpus with it
    lock = json.loads((out / "lock" / "vllm.lock.json").read_text())
    chosen = [r for v in lock["releases"].values() for i in v.values() for r in i.values()]
    for record in chosen:
        if record.get("vllm") is None:  # a refusal, not a choice whose version went missing
            assert not record["why"].startswith(("the newest release", "as the recipe asks")), record
        else:  # the chosen release satisfies what the recipe asks
            spec = record["constraint"].split(",")[0]
            if spec[:1] in "<>=!~":
                assert Version(record["vllm"]) in SpecifierSet(spec), record
    # No release that cannot be installed is chosen for a recipe that did not ask for it exactly.
    installs = load_catalog(ROOT / "catalog" / "hardware.yaml").installs
    packages = {name: install.package for name, install in installs.items() if install.kind == "pip"}
    broken = {(s["package"], s["vllm"]) for s in lock["sets"].values() if s.get("missing")}
    for variants in lock["releases"].values():
        for chosen_installs in variants.values():
            for name, record in chosen_installs.items():
                if name in packages and (packages[name], record.get("vllm")) in broken:
                    assert record["constraint"].startswith("=="), record
    generated = (out / "generate.stdout").read_text()
    said = re.search(r"(\d+) images, \d+ deployments, (\d+) files", generated)
    assert said, generated[-2000:]
    files = [p for p in (out / "images").rglob("*") if p.is_file()]
    files += [p for p in (out / "compose").rglob("*") if p.is_file()]
    files += [p for p in (out / "k8s").rglob("*") if p.is_file()]
    assert len(files) == int(said[2]) > 10_000, "every file generate counted is on disk, and no other"
    # Each image `factory list` names as buildable has its Dockerfile and bake target; the others say why.
    listing = run_factory(ROOT, "list", "--recipes", str(upstream), "--out", str(out))
    rows = [line.split("\t") for line in listing.stdout.splitlines()]
    routers = [row for row in rows if row[0].startswith("vllm-factory/vllm-router:")]
    assert len(routers) == 1, "the PD router's own image is listed once, beside the recipes' images"
    assert len(rows) == int(said[1]) + 1
    built = {row[2] for row in rows if not row[2].startswith("not built")}
    dockerfiles = {p.parent.relative_to(out).as_posix() for p in out.glob("images/*/*/Dockerfile")}
    assert dockerfiles == built and len(built) > 1000
    # each image not built says why: its cause in a word, then the reason
    unexplained = [
        row
        for row in rows
        if row[2] not in built and not re.match(r"not built \([A-Za-z0-9 -]+\): .{10,}", row[2])
    ]
    assert not unexplained, unexplained[:5]
    assert (out / "images" / "docker-bake.hcl").read_text().count("\ntarget ") == len(dockerfiles)
    check = run_factory(ROOT, "generate", "--check", "--recipes", str(upstream), "--out", str(out))
    assert check.returncode == 0, check.stderr[-2000:]
    assert str(upstream.resolve()) not in (out / "images" / "docker-bake.hcl").read_text(), "no machine paths"


def test_one_broken_recipe_is_reported_and_the_others_still_render(
    upstream: Path, tmp_path: Path, upstream_lines: list[dict[str, Any]]
) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(upstream, tree)
    victim = sorted((tree / "models").glob("*/*.yaml"))[0]
    data = yaml.safe_load(victim.read_text())
    data["model"]["context_length"] = "a million"  # a known key with a value no one can use
    victim.write_text(yaml.safe_dump(data))
    result = run_factory(ROOT, "renderings", "--recipes", str(tree), "--json")
    assert result.returncode == 1, "a bad recipe makes the run fail, after everything else is done"
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    bad = [line for line in lines if line.get("file") and "model.context_length" in str(line.get("skipped"))]
    victim_id = f"{victim.parent.name}/{victim.stem}"
    assert len(bad) == 1 and bad[0]["recipe"] == victim_id
    # Every other recipe renders exactly as it does in the unbroken tree: the bad one takes only itself.
    whole = upstream_lines  # the unbroken tree's renderings
    assert [line for line in lines if line.get("recipe") != victim_id] == [
        line for line in whole if line.get("recipe") != victim_id
    ]
    assert len({line["recipe"] for line in whole}) == len(list((tree / "models").glob("*/*.yaml")))


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models a field's type may hold directly (X, X | None, X | Literal[False])."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if get_origin(annotation) in (Union, UnionType):
        return [m for arg in get_args(annotation) for m in _models_in(arg)]
    return []


def plant_unknown_keys(data: Any, model: type[BaseModel]) -> int:
    """An unknown key in every schema-keyed mapping of a recipe, and an unknown hardware in every
    per-hardware override map; returns how many were planted."""
    if not isinstance(data, dict):
        return 0
    planted = 0
    for key, value in list(data.items()):
        field = model.model_fields.get(str(key))
        if field is None:
            continue
        annotation = field.annotation
        for candidate in _models_in(annotation):
            planted += plant_unknown_keys(value, candidate)
            break
        else:
            inner = [a for a in get_args(annotation) if get_origin(a) in (dict, list)] or [annotation]
            kind = inner[0]
            if get_origin(kind) is dict and isinstance(value, dict):
                members = _models_in(get_args(kind)[1])
                for item in value.values():
                    planted += sum(plant_unknown_keys(item, m) for m in members[:1])
                if key == "hardware_overrides" and members:
                    value["zz_unknown_gpu"] = {}
                    planted += 1
            elif get_origin(kind) is list and isinstance(value, list):
                members = [m for arg in get_args(kind) for m in _models_in(arg)]
                for item in value:
                    planted += sum(plant_unknown_keys(item, m) for m in members[:1])
    data["zz_unknown_key"] = "planted"
    return planted + 1


def test_unknown_keys_at_every_schema_level_stop_no_recipe_and_change_no_command(
    upstream: Path, oracle: Path, tmp_path: Path
) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(upstream, tree)
    recipes = sorted((tree / "models").glob("*/*.yaml"))
    planted = 0
    for path in recipes:
        data = yaml.safe_load(path.read_text())
        planted += plant_unknown_keys(data, Recipe)
        path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert planted > 10 * len(recipes)  # 1,322 in the 111 recipes of 2026-11
    lines = renderings(tree)
    assert not [line for line in lines if line.get("file")], "every recipe loads"
    rendered = [line for line in lines if not line.get("skipped")]
    assert all(line["ignored"] for line in rendered), "each rendering lists what was ignored"
    # The site renders the planted tree too, and the factory's commands still match it exactly.
    comparison = compare(oracle_renderings(run_site(tree, tmp_path / "site")), lines)
    assert comparison.counts["missing"] == 0 and comparison.rate == 1.0, comparison.table()
