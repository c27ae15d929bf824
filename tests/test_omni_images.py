"""Omni images (image, video and audio generation): the catalog says which vLLM each vllm-omni release runs
with, and where no omni image can exist, with the evidence; the lock picks both releases and locks them
together with hashes; the Dockerfile installs vllm-omni in a layer of its own after vLLM's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

from factory.lock.choose import ask
from factory.lock.model import OMNI
from factory.lock.omni import choose_omni, omni_refusal
from factory.project import Project
from factory.recipes.loader import load_tree
from tests.conftest import ROOT, recipes_tree, run_factory, small_recipe

# What the index lists for vllm (a 0.29 has no vllm-omni release: vllm-omni follows even minors).
RELEASES = [Version(v) for v in ("0.33.0", "0.31.0", "0.30.1", "0.30.0", "0.29.0", "0.28.0", "0.12.0")]


def omni_recipe(**changes: Any) -> dict[str, Any]:
    """A text-to-image recipe with its vllm-omni section, serving on port 9000."""
    recipe = small_recipe(
        meta={"title": "Pics", "slug": "pics", "hardware": {}, "tasks": ["omni"]},
        omni={"tasks": ["t2i"], "port": 9000},
        dependencies=[],
    )
    recipe["model"] = {**recipe["model"], "min_vllm_version": "0.27.0"}
    recipe.update(changes)
    return recipe


def loaded_omni(tmp_path: Path, **changes: Any):  # type: ignore[no-untyped-def]
    tree = load_tree(recipes_tree(tmp_path, {"acme/Pics": omni_recipe(**changes)}))
    assert not tree.problems, [p.one_line() for p in tree.problems]
    return tree.recipes["acme/Pics"]


def test_the_catalog_pairs_each_vllm_omni_release_with_its_vllm_minor_and_cites_where_it_was_read(
    project: Project,
) -> None:
    omni = project.catalog.omni
    assert omni is not None and omni.package == "vllm-omni"
    paired = omni.release_for("0.30.1")
    assert paired is not None and paired.omni == "0.30.0"
    assert omni.release_for("0.29.0") is None, "vllm-omni publishes a release for even vLLM minors only"
    assert {r.omni for r in omni.releases} >= {"0.14.0", "0.18.0", "0.28.0", "0.30.0"}
    assert all("vllm-omni" in r.source and "major.minor" in r.source for r in omni.releases)


def test_the_lock_picks_the_newest_paired_vllm_and_the_vllm_omni_release_that_runs_with_it(
    project: Project, tmp_path: Path
) -> None:
    loaded = loaded_omni(tmp_path / "a")
    cuda = project.catalog.installs["cuda-pypi"]
    chosen = choose_omni(
        project.catalog, ask(loaded, "default", project.catalog, "NVIDIA"), cuda, RELEASES, []
    )
    assert (chosen.vllm, chosen.omni) == ("0.30.1", "0.30.0"), "0.33.0 and 0.31.0 have no vllm-omni"
    assert "vllm-omni 0.30.0 runs with vLLM 0.30.x" in chosen.why and "major.minor" in chosen.why
    pinned = loaded_omni(
        tmp_path / "b",
        dependencies=[{"command": "uv pip install vllm==0.12.0"}],
        model={**omni_recipe()["model"], "min_vllm_version": "0.12.0"},
    )
    refused = choose_omni(
        project.catalog, ask(pinned, "default", project.catalog, "NVIDIA"), cuda, RELEASES, []
    )
    assert refused.vllm is None and refused.omni is None and refused.cause == OMNI
    assert "==0.12.0" in refused.why and "0.14.0 (vLLM 0.14.x)" in refused.why


def test_cpu_rocm_and_arm64_omni_images_are_refused_with_the_evidence(project: Project) -> None:
    catalog, installs = project.catalog, project.catalog.installs
    cpu = omni_refusal(catalog, installs["cpu-pypi"])
    assert cpu is not None and "no CPU platform" in cpu and "vllm_omni/platforms/__init__.py" in cpu
    rocm = omni_refusal(catalog, installs["rocm-vendor-image"])
    assert rocm is not None and "vendor images" in rocm and "source:" in rocm
    arm = omni_refusal(catalog, installs["cuda-pypi"], "linux/arm64")
    assert arm is not None and "fa3-fwd" in arm and "aarch64" in arm and "cp39-abi3-linux_x86_64" in arm
    assert omni_refusal(catalog, installs["cuda-pypi"], "linux/amd64") is None
    assert omni_refusal(catalog, installs["cuda-pypi"]) is None, "the release is chosen per install"


@pytest.mark.index
def test_an_omni_recipe_gets_cuda_images_that_install_vllm_omni_with_hashes_after_vllm(
    tmp_path: Path,
) -> None:
    """Against the real package index: uv resolves vLLM and vllm-omni together (no wheel is downloaded)."""
    pin = [{"command": "uv pip install vllm==0.30.0"}]
    plain = small_recipe(dependencies=pin)
    plain["model"] = {**plain["model"], "min_vllm_version": "0.30.0"}
    tree = recipes_tree(
        tmp_path / "tree", {"acme/Pics": omni_recipe(dependencies=pin), "acme/Small-8B": plain}
    )
    out = tmp_path / "out"
    locked = run_factory(ROOT, "lock", "--recipes", str(tree), "--out", str(out))
    assert locked.returncode == 0, locked.stderr
    lock = json.loads((out / "lock" / "vllm.lock.json").read_text())
    release = lock["releases"]["acme/Pics"]["default"]["cuda-pypi"]
    assert (release["vllm"], release["omni"]) == ("0.30.0", "0.30.0")
    generated = run_factory(ROOT, "generate", "--recipes", str(tree), "--out", str(out))
    assert generated.returncode == 0, generated.stderr
    image = next((out / "images" / "pics").glob("vllm*-h100-default"))
    layers = image / "requirements"
    assert f"vllm=={release['vllm']} " in (layers / "requirements.txt").read_text()
    omni_layer = (layers / "omni.txt").read_text()
    assert f"vllm-omni=={release['omni']} " in omni_layer and "fa3-fwd==" in omni_layer
    assert "--hash=sha256:" in omni_layer and "vllm==" not in omni_layer
    assert "torch==" in (layers / "heavy.txt").read_text() and "torch==" not in omni_layer
    dockerfile = (image / "Dockerfile").read_text()
    assert dockerfile.index("requirements/requirements.txt") < dockerfile.index("requirements/omni.txt")
    plain_layers = out / "images" / "small" / "vllm0.30.0-h100-default" / "requirements"
    assert (plain_layers / "heavy.txt").read_bytes() == (layers / "heavy.txt").read_bytes(), (
        "torch's layer (the gigabytes) is the plain image's of the same release"
    )
    assert (plain_layers / "uv.txt").read_bytes() == (layers / "uv.txt").read_bytes()
    assert "EXPOSE 9000" in dockerfile and '"http://127.0.0.1:9000/health"]' in dockerfile, "omni.port"
    listed = run_factory(ROOT, "list", "--recipes", str(tree), "--out", str(out)).stdout
    gb200 = next(line for line in listed.splitlines() if "-gb200-default" in line)
    assert "not built (vllm-omni)" in gb200 and "fa3-fwd" in gb200
    assert "images/pics/vllm" in next(line for line in listed.splitlines() if "-h100-default" in line)


def _package(root: Path, name: str, says: str) -> None:
    """A stand-in CLI module `name`.entrypoints.cli.main whose main() prints who ran and with what."""
    folder = root / name / "entrypoints" / "cli"
    folder.mkdir(parents=True)
    for part in (root / name, root / name / "entrypoints", folder):
        (part / "__init__.py").write_text("")
    (folder / "main.py").write_text(f"import sys\ndef main():\n    print({says!r}, sys.argv)\n")


def test_the_image_entrypoint_serves_omni_commands_through_vllm_omnis_cli_when_the_image_has_it(
    tmp_path: Path,
) -> None:
    """vllm-omni cannot be installed here (CUDA kernels): its CLI module and vLLM's are stand-ins that
    print; the entrypoint itself is the file every image copies."""
    launcher = ROOT / "factory" / "image_files" / "factory-serve"
    _package(tmp_path / "plain", "vllm", "vllm")
    _package(tmp_path / "omni", "vllm", "vllm")
    _package(tmp_path / "omni", "vllm_omni", "vllm-omni")

    def serve(site: Path) -> str:
        env = {**os.environ, "PYTHONPATH": str(site)}
        ran = subprocess.run(
            [sys.executable, str(launcher), "acme/Pics", "--port", "9000", "--omni"],
            capture_output=True, text=True, env=env, check=True, timeout=60,
        )  # fmt: skip
        return ran.stdout

    assert serve(tmp_path / "omni").startswith("vllm-omni ['vllm', 'serve', 'acme/Pics', '--port', '9000'")
    assert serve(tmp_path / "plain").startswith("vllm ['vllm', 'serve', 'acme/Pics'")
