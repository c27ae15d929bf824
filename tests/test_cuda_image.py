"""The Kimi-Linear CUDA images, built for real (on the local Debian base: no registry is reachable).

No GPU exists here: the live probes cannot run and the tests check that validation says so. What runs
for real: the build, vLLM 0.11.2's own argument parser over every generated command, the version and
drift checks, the GPU request in the container's configuration, and layer sharing between targets."""

from __future__ import annotations

from pathlib import Path

import docker
import pytest

from factory.blueprint import Blueprint
from factory.build.builder import BuildResult, build_image
from factory.engine import OWNER_LABEL
from factory.project import Project
from factory.settings import load_settings
from factory.validate.container import gpu_run_options
from factory.validate.runner import validate_image
from factory.validate.static import check_serve_args
from tests.conftest import KIMI, ROOT, blueprint_of, run_factory

pytestmark = [pytest.mark.docker, pytest.mark.e2e]


def kimi(project: Project, hardware: str) -> Blueprint:
    return blueprint_of(project, KIMI, hardware)


@pytest.fixture(scope="module")
def h200_built(project: Project, docker_client: docker.DockerClient) -> BuildResult:
    return build_image(ROOT, kimi(project, "h200"), load_settings(ROOT))


def test_h200_static_checks_pass_and_gpu_probes_are_reported_not_run(
    project: Project, h200_built: BuildResult, tmp_path: Path, no_leftovers: None
) -> None:
    report = validate_image(kimi(project, "h200"), tmp_path)
    static = [case for case in report.cases if case.name.startswith("static:")]
    assert static and all(case.status == "passed" for case in static), static
    parsed = [case.name for case in static if case.name.startswith("static:serve-args:compose/")]
    assert len(parsed) == 9, "single node + 2 nodes for each of the 4 multi-node strategies"
    live = [case for case in report.cases if case.name.startswith("live:")]
    assert live and all(case.status == "skipped" and "NVIDIA" in case.detail for case in live)
    assert report.passed and not report.fully_validated


def test_validate_cli_fails_without_the_gpu_unless_told_static_is_enough(
    h200_built: BuildResult, tmp_path: Path
) -> None:
    strict = run_factory(ROOT, "validate", KIMI, "--hardware", "h200", "--reports", str(tmp_path))
    assert strict.returncode == 1 and "GPU probes not run" in strict.stdout + strict.stderr
    relaxed = run_factory(
        ROOT, "validate", KIMI, "--hardware", "h200", "--reports", str(tmp_path), "--allow-no-gpu"
    )
    assert relaxed.returncode == 0
    assert "built; static checks passed; GPU probes not run" in relaxed.stdout


def test_vllm_0_11_2_rejects_max_model_len_auto(
    project: Project, h200_built: BuildResult, docker_client: docker.DockerClient
) -> None:
    base = ["--model", KIMI, "--trust-remote-code", "--tensor-parallel-size", "8"]
    results = {
        r.name: r
        for r in check_serve_args(
            docker_client,
            kimi(project, "h200").image,
            {
                "seed-rocm-example": [*base, "--max-model-len", "auto"],
                "ours": [*base, "--max-model-len", "1048576"],
            },
        )
    }
    assert not results["serve-args:seed-rocm-example"].ok
    assert "invalid human_readable_int value: 'auto'" in results["serve-args:seed-rocm-example"].detail
    assert results["serve-args:ours"].ok


def test_h100_reuses_every_layer_of_h200(
    project: Project, h200_built: BuildResult, docker_client: docker.DockerClient
) -> None:
    h100 = build_image(ROOT, kimi(project, "h100"), load_settings(ROOT))
    assert h100.cached_steps == h100.total_steps, "a second target of one platform rebuilds nothing"
    layers = docker_client.images.get(h100.image_id).attrs["RootFS"]["Layers"]
    assert layers == docker_client.images.get(h200_built.image_id).attrs["RootFS"]["Layers"]
    assert h100.image_id != h200_built.image_id, "metadata (labels, env) differs per target"


def test_gpu_images_request_their_gpus(
    project: Project, h200_built: BuildResult, docker_client: docker.DockerClient
) -> None:
    # Created, never started: the request is in the container's configuration; running it needs a GPU.
    container = docker_client.containers.create(
        h200_built.image_id, labels={OWNER_LABEL: "test"}, **gpu_run_options(kimi(project, "h200").vendor)
    )
    try:
        requests = container.attrs["HostConfig"]["DeviceRequests"]
        assert requests[0]["Count"] == -1 and requests[0]["Capabilities"] == [["gpu"]]
    finally:
        container.remove(force=True)
    amd = gpu_run_options(kimi(project, "mi300x").vendor, {"RENDER_GID": "109"})
    assert amd["devices"] == ["/dev/kfd", "/dev/dri"] and amd["group_add"] == ["video", "109"]
    assert amd["security_opt"] == ["seccomp=unconfined"]
