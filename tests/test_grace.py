"""Grace (GB200, GB300, DGX Station, DGX Spark): a linux/arm64 CUDA image built here, on an amd64 host, and
checked statically under emulation (QEMU, registered by testbench/up-tests).

What runs for real: the arm64 base the tests' setup bootstrapped; the build of MiniMax-M2.5's GB200 image
(vLLM 0.20.2, torch 2.11.0 for CUDA 13.0, from the package index alone) from its generated Dockerfile, its
locked set installed by uv on the build's own platform and copied in; inside the image, under QEMU, the ELF
machine of every file of its venv, `import torch, vllm` (torch's CUDA as the lock says), vLLM's own parser
over every generated command, and the GPU code libtorch_cuda.so and vllm/_C embed, read from the libraries
and judged by CUDA's rules for GB200 (10.0), GB300 (10.3) and GB10 (12.1). What cannot run here: a GPU, so
no server is started (the image is not served; validation says so)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import docker
import pytest

from factory.blueprint import Blueprint, Blueprints
from factory.blueprint.planner import plan_recipe
from factory.builder.builder import BuildResult
from factory.engine.connect import OWNER_LABEL
from factory.project import Project
from factory.report.matrix import LintCache, coverage, hadolint, hadolint_tool
from factory.validate.binaries import gpu_code_results, read_binaries
from factory.validate.report import read_json
from tests.conftest import ROOT, blueprint_of, run_factory

pytestmark = [pytest.mark.docker, pytest.mark.e2e]

MINIMAX = "MiniMaxAI/MiniMax-M2.5"
ARM64_BASE = "factory-local/debian:bookworm-arm64"  # testbench/arm64-base (run by testbench/up-tests)


def grace(project: Project) -> Blueprint:
    return blueprint_of(project, MINIMAX, "gb200")


@pytest.fixture(scope="module")
def grace_built(docker_client: docker.DockerClient, tmp_path_factory: pytest.TempPathFactory) -> BuildResult:
    """Built once, as docs/grace.md says, and kept (about 8.5 GB; a CI machine's next run builds it from
    the builder's cache)."""
    report = tmp_path_factory.mktemp("grace-build") / "build.json"
    built = run_factory(
        ROOT, "build", MINIMAX, "--hardware", "gb200", "--variant", "default", "--report", str(report)
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    return BuildResult(**json.loads(report.read_text())[0])


def test_the_tests_setup_made_an_arm64_debian_base_that_runs_under_qemu(
    docker_client: docker.DockerClient,
) -> None:
    base = docker_client.images.get(ARM64_BASE)
    assert base.attrs["Architecture"] == "arm64" and base.attrs["Os"] == "linux"
    container = docker_client.containers.create(
        ARM64_BASE, ["uname", "-m"], labels={OWNER_LABEL: "test-grace"}, network_disabled=True
    )
    try:
        container.start()
        assert container.wait(timeout=60)["StatusCode"] == 0
        assert bytes(container.logs()).decode().strip() == "aarch64", "an arm64 program, run under QEMU"
    finally:
        container.remove(force=True)
    assert f'arm64_base_image = "{ARM64_BASE}"' in (ROOT / ".factory.local.toml").read_text()


def test_a_grace_image_is_an_arm64_image_built_from_its_generated_dockerfile(
    project: Project, grace_built: BuildResult, docker_client: docker.DockerClient
) -> None:
    image = grace(project).image
    assert grace_built.platform == "linux/arm64" and grace_built.base_image == ARM64_BASE
    built = docker_client.images.get(grace_built.image_id)
    assert built.attrs["Architecture"] == "arm64"
    assert built.labels["ai.vllm.factory.platform"] == "linux/arm64"
    dockerfile = (ROOT / image.directory / "Dockerfile").read_text()
    # The locked set went in without emulating Python: uv ran on the build's platform for the image's.
    assert "FROM --platform=$BUILDPLATFORM ${BUILD_IMAGE} AS install" in dockerfile
    assert dockerfile.count("--python-platform aarch64-manylinux_2_35 \\\n") == 3, "one per layer of the set"
    history = [step.get("CreatedBy", "") for step in built.history()]
    copied = [step for step in history if "COPY" in step or "copy" in step]
    assert len(copied) >= 4, "the venv, then each layer of the set copied in as a layer of its own"


def test_the_grace_image_passes_its_static_checks_under_emulation_and_is_not_served(
    project: Project, grace_built: BuildResult, tmp_path: Path
) -> None:
    command = ["validate", MINIMAX, "--hardware", "gb200", "--variant", "default", "--allow-no-gpu"]
    checked = run_factory(ROOT, *command, "--reports", str(tmp_path))
    assert checked.returncode == 0, checked.stdout[-3000:] + checked.stderr[-3000:]
    assert "static checks passed; GPU probes not run" in checked.stdout
    image = grace(project).image
    report = read_json(tmp_path / f"validate-{image.slug}-{image.tag}.json")
    cases = {case.name: case for case in report.cases}
    static = [case for case in report.cases if case.name.startswith("static:")]
    assert static and all(case.status == "passed" for case in static), [
        c for c in static if c.status != "passed"
    ]
    assert "13.0" in cases["static:torch-cuda"].detail and "torch 2.11.0" in cases["static:torch-cuda"].detail
    assert "0.20.2" in cases["static:vllm-version"].detail
    assert (
        " aarch64" in cases["static:elf-machine"].detail
        and "not aarch64" not in cases["static:elf-machine"].detail
    )
    assert "compute capability 10.0" in cases["static:gpu-code:libtorch_cuda.so"].detail
    assert "sm_100" in cases["static:gpu-code:_C.abi3.so"].detail
    parsed = [name for name in cases if name.startswith("static:serve-args:minimax-m2.5.gb200-default.")]
    assert len(parsed) == len([r for d in grace(project).deployments for r in d.roles if r.program == "vllm"])
    live = [case for case in report.cases if case.name.startswith("live:")]
    assert live and all(case.status == "skipped" and "emulation" in case.detail for case in live)
    assert report.emulated == "linux/arm64 on a linux/amd64 engine (QEMU)"
    assert report.passed and not report.fully_validated
    # The matrix says what was and was not done: built, checked statically under emulation, not on a GPU.
    plan = plan_recipe(project, project.tree.recipe(MINIMAX))
    mine = [b for b in plan.images if b.image.reference == grace(project).image.reference]
    only = Blueprints((dataclasses.replace(plan, images=tuple(mine)),), ())
    lint = LintCache(tmp_path / "lint.json", hadolint, hadolint_tool())
    cell = coverage(only, ROOT, tmp_path, docker.from_env(), lint).rows["MiniMaxAI/MiniMax-M2.5 (default)"]
    assert cell["gb200"].level == "static checks passed"
    assert cell["gb200"].detail.startswith("built, checked statically, under emulation: linux/arm64 on a")
    assert "not run on a GPU" in cell["gb200"].detail


def test_the_grace_libraries_hold_gpu_code_for_gb200_gb300_and_gb10_by_cudas_rules(
    project: Project, grace_built: BuildResult, docker_client: docker.DockerClient
) -> None:
    """One image serves every Grace machine of the release; its libraries are read once, and judged for each
    compute capability: GB200 10.0, GB300 10.3, GB10 12.1. Volta (7.0), which torch 2.11 no longer builds
    for, shows that the check fails where the code is not there."""
    found = read_binaries(docker_client, grace(project).image, scan=False)
    for gpu_arch, machine in (("sm_100", "GB200"), ("sm_103", "GB300"), ("sm_121", "GB10")):
        results = gpu_code_results(found, gpu_arch, machine)
        assert [r.name for r in results] == ["gpu-code:libtorch_cuda.so", "gpu-code:_C.abi3.so"]
        assert all(r.ok for r in results), results
    torch_103 = gpu_code_results(found, "sm_103", "GB300")[0].detail
    assert "runs sm_100, sm_103a" in torch_103, "sm_100 runs on 10.3; sm_100a would not, sm_103a does"
    volta = {r.name: r for r in gpu_code_results(found, "sm_70", "V100")}
    assert (
        not volta["gpu-code:libtorch_cuda.so"].ok
        and "runs none of it" in volta["gpu-code:libtorch_cuda.so"].detail
    )
