"""Omni images (image, video and audio generation): the catalog says which vLLM each vllm-omni release runs
with, and where no omni image can exist, with the evidence; the lock picks both releases and locks them
together with hashes; the Dockerfile installs vllm-omni in a layer of its own after vLLM's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from textwrap import dedent
from typing import Any

import docker
import pytest
from packaging.version import Version

from factory.base.settings import load_settings
from factory.builder.builder import BuildResult, build_image
from factory.lock.choose import ask
from factory.lock.omni import choose_omni, omni_refusal
from factory.lockfile.model import OMNI, split_omni
from factory.project import Project
from factory.recipes.loader import load_tree
from factory.validate.runner import validate_image
from factory.validate.static import check_serve_args
from tests.conftest import KIMI, ROOT, SD35, blueprint_of, recipes_tree, run_factory, small_recipe

# What the index lists for vllm (a 0.29 has no vllm-omni release: vllm-omni follows even minors).
RELEASES = [
    Version(v) for v in ("0.33.0", "0.31.0", "0.30.1", "0.30.0", "0.29.0", "0.28.0", "0.13.0", "0.12.0")
]


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
    stable = [r for r in omni.releases if not Version(r.omni).is_prerelease]
    assert all("vllm-omni" in r.source and "major.minor" in r.source for r in stable)
    # Before 0.14.0 a release candidate per vLLM minor; 0.12.0rc1 is what the recipes pinning vllm==0.12.0
    # (Stable Diffusion 3.5, Wan2.2, LongCat-Image-Edit) install.
    candidate = omni.release_for("0.12.0")
    assert candidate is not None and candidate.omni == "0.12.0rc1"
    assert "quickstart.md" in candidate.source and "vllm==0.12.0" in candidate.source


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
        dependencies=[{"command": "uv pip install vllm==0.13.0"}],
        model={**omni_recipe()["model"], "min_vllm_version": "0.12.0"},
    )
    refused = choose_omni(
        project.catalog, ask(pinned, "default", project.catalog, "NVIDIA"), cuda, RELEASES, []
    )
    assert refused.vllm is None and refused.omni is None and refused.cause == OMNI
    assert "==0.13.0" in refused.why and "0.14.0 (vLLM 0.14.x)" in refused.why


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
    fa3 = omni_refusal(catalog, installs["cuda-pypi"], "linux/arm64", "0.14.0")
    assert fa3 is not None and "fa3-fwd" in fa3 and "0.0.1 in 0.14.0" in fa3
    assert omni_refusal(catalog, installs["cuda-pypi"], "linux/arm64", "0.12.0rc1") is None, (
        "0.12.0rc1 requires no fa3-fwd: its arm64 set meets torch's own limits, not this refusal"
    )


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


def test_vllm_omnis_layer_takes_every_package_only_vllm_omni_needs_however_deep(project: Project) -> None:
    """gradio is vllm-omni's alone, and so is gradio-client, which only gradio needs: one level of `# via`
    would leave gradio-client in vLLM's dependency layer, which then differs from the plain image's."""
    lock = dedent("""\
        vllm==1.0 \\
            --hash=sha256:aa
        fastapi==1.0 \\
            --hash=sha256:bb
            # via
            #   gradio
            #   vllm
        gradio==1.0 \\
            --hash=sha256:cc
            # via vllm-omni
        gradio-client==1.0 \\
            --hash=sha256:dd
            # via gradio
        diffusers==1.0 \\
            --hash=sha256:ee
            # via
            #   cache-dit
            #   vllm-omni
        cache-dit==1.0 \\
            --hash=sha256:ff
            # via vllm-omni
        torch==1.0 \\
            --hash=sha256:00
            # via
            #   gradio
        vllm-omni==1.0 \\
            --hash=sha256:11
        """)
    kept, omni = split_omni(lock, ["torch"], "vllm-omni")
    names = lambda text: {line.split("==")[0] for line in text.splitlines() if "==" in line}  # noqa: E731
    assert names(omni) == {"vllm-omni", "gradio", "gradio-client", "diffusers", "cache-dit"}
    assert names(kept) == {"vllm", "fastapi", "torch"}, "vLLM needs fastapi too; torch stays torch's layer"
    # The project's omni image: gradio's own dependencies are in vllm-omni's layer, not in vLLM's.
    layers = ROOT / "images" / "stable-diffusion-3.5" / "vllm0.12.0-h100-default" / "requirements"
    assert "gradio-client==" in (layers / "omni.txt").read_text()
    assert "gradio-client==" not in (layers / "dependencies.txt").read_text()


def _fake_site(site: Path, versions: dict[str, str]) -> None:
    """Installed distributions as importlib.metadata sees them: a dist-info folder with its METADATA."""
    for name, version in versions.items():
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True, exist_ok=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def test_the_build_s_drift_guard_checks_vllm_omni_as_it_checks_vllm(tmp_path: Path) -> None:
    """image_info.py is the file every image copies and runs at build (--expect-*) and at validation."""
    script = ROOT / "factory" / "image_files" / "image_info.py"
    site = tmp_path / "site"
    _fake_site(site, {"vllm": "0.12.0", "torch": "2.9.0", "vllm-omni": "0.12.0rc1"})

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PYTHONPATH": str(site)}
        return subprocess.run(
            [sys.executable, "-S", str(script), *args], capture_output=True, text=True, env=env, timeout=60
        )

    wrong = run("--expect-vllm", "0.12.0", "--expect-omni", "0.12.0")
    assert wrong.returncode == 1 and "vllm-omni is 0.12.0rc1, the pin is 0.12.0" in wrong.stderr
    record = tmp_path / "versions.json"
    right = run("--expect-vllm", "0.12.0", "--expect-omni", "0.12.0rc1", "--record", str(record))
    assert right.returncode == 0, right.stderr
    assert json.loads(record.read_text())["vllm-omni"] == "0.12.0rc1"
    (site / "vllm_omni-0.12.0rc1.dist-info").rename(site / "vllm_omni-0.14.0.dist-info")
    _fake_site(site, {"vllm-omni": "0.14.0"})
    drifted = run("--same-as", str(record))
    assert drifted.returncode == 1 and "vllm-omni drifted from 0.12.0rc1 to 0.14.0" in drifted.stderr
    dockerfile = (ROOT / "images/stable-diffusion-3.5/vllm0.12.0-h100-default/Dockerfile").read_text()
    assert "--expect-vllm 0.12.0 --expect-omni 0.12.0rc1" in dockerfile


def test_a_serve_binary_other_than_vllm_serve_or_vllm_omni_serve_is_refused_naming_file_field_and_value(
    tmp_path: Path,
) -> None:
    for binary in ("vllm serve", "vllm-omni serve"):
        assert loaded_omni(
            tmp_path / binary.replace(" ", "-"), omni={"tasks": ["t2i"], "serve_binary": binary}
        )
    bad = omni_recipe(omni={"tasks": ["t2i"], "serve_binary": "sglang serve"})
    tree = load_tree(recipes_tree(tmp_path / "bad", {"acme/Pics": bad}))
    assert "acme/Pics" not in tree.recipes
    message = " ".join(problem.one_line() for problem in tree.problems)
    assert "Pics.yaml" in message and "omni.serve_binary" in message and "sglang serve" in message
    assert "valid: vllm serve, vllm-omni serve" in message


@pytest.mark.docker
@pytest.mark.e2e
def test_the_cuda_omni_image_holds_the_locked_releases_and_vllm_omnis_parser_takes_every_command(
    project: Project, omni_built: BuildResult, tmp_path: Path, no_leftovers: None
) -> None:
    """Built here for real, no GPU: validation's static checks run inside it; the GPU probes cannot."""
    report = validate_image(blueprint_of(project, SD35, "h100"), tmp_path)
    static = {case.name: case for case in report.cases if case.name.startswith("static:")}
    assert all(case.status == "passed" for case in static.values()), static
    assert "installed vLLM 0.12.0, pinned 0.12.0" in static["static:vllm-version"].detail
    assert "installed vllm-omni 0.12.0rc1, pinned 0.12.0rc1" in static["static:vllm-omni-version"].detail
    assert "vllm-omni 0.12.0rc1 now" in static["static:no-drift"].detail
    help_shown = static["static:serve-help"].detail
    assert "--stage-configs-path" in help_shown and "usage: vllm serve [model_tag] --omni" in help_shown
    parsed = [name for name in static if name.startswith("static:serve-args:")]
    assert parsed == [
        "static:serve-args:image-default",
        "static:serve-args:stable-diffusion-3.5.h100-default.omni-t2i/node",
    ]
    assert all(static[name].detail == "accepted by vllm-omni's parser" for name in parsed)
    live = [case for case in report.cases if case.name.startswith("live:")]
    assert live and all(case.status == "skipped" for case in live)
    assert report.passed and not report.fully_validated


@pytest.mark.docker
@pytest.mark.e2e
def test_vllm_omnis_parser_rejects_a_bad_omni_flag_that_vllms_would_not_know(
    project: Project, omni_built: BuildResult, docker_client: docker.DockerClient
) -> None:
    model = [SD35, "--omni"]
    results = {
        result.name: result
        for result in check_serve_args(
            docker_client,
            blueprint_of(project, SD35, "h100").image,
            {
                "ulysses": [*model, "--ulysses-degree", "2", "--cache-backend", "cache_dit"],
                "bad-degree": [*model, "--ulysses-degree", "two"],
                "without-omni": [SD35, "--ulysses-degree", "2"],
            },
        )
    }
    assert results["serve-args:ulysses"].ok, results["serve-args:ulysses"].detail
    assert (
        "argument --usp/--ulysses-degree: invalid int value: 'two'" in results["serve-args:bad-degree"].detail
    )
    # Without --omni the entrypoint hands the command to vLLM's CLI, which has no such flag.
    assert "unrecognized arguments: --ulysses-degree 2" in results["serve-args:without-omni"].detail


@pytest.mark.docker
@pytest.mark.e2e
def test_the_omni_image_shares_the_layers_below_vllm_with_the_plain_cuda_image_where_the_pins_agree(
    project: Project, omni_built: BuildResult, docker_client: docker.DockerClient
) -> None:
    """Kimi-Linear's H200 image (vLLM 0.11.2) and the omni image (vLLM 0.12.0) lock the same torch 2.9.0
    set: its layer (gigabytes) is stored once. The dependency layers differ: other releases, other pins."""
    plain = build_image(ROOT, blueprint_of(project, KIMI, "h200"), load_settings(ROOT))
    omni_layers = docker_client.images.get(omni_built.image_id).attrs["RootFS"]["Layers"]
    plain_layers = docker_client.images.get(plain.image_id).attrs["RootFS"]["Layers"]
    shared = 4  # the base, the system packages, the venv, torch's layer
    assert omni_layers[:shared] == plain_layers[:shared]
    assert omni_layers[shared] != plain_layers[shared]
    heavy = (ROOT / "images/stable-diffusion-3.5/vllm0.12.0-h100-default/requirements/heavy.txt").read_bytes()
    plain_heavy = ROOT / "images/kimi-linear-48b-a3b-instruct/vllm0.11.2-h200-default/requirements/heavy.txt"
    assert heavy == plain_heavy.read_bytes()
