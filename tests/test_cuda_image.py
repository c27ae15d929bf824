"""The Kimi-Linear CUDA images, built for real (on the local Debian base: no registry is reachable).

No GPU exists here: the live probes cannot run and the tests check that validation says so. What runs
for real: the build, vLLM 0.11.2's own argument parser over every generated command, the version and
drift checks, the GPU request in the container's configuration, and layer sharing between targets."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import docker
import pytest
import yaml

from factory.base.settings import load_settings
from factory.blueprint import Blueprint
from factory.builder.builder import BuildResult, build_image
from factory.cli.parser import build_parser
from factory.engine.connect import OWNER_LABEL
from factory.plan.runspec import RunSpec
from factory.plan.settings import setting
from factory.project import Project
from factory.validate import runner
from factory.validate.container import gpu_run_options
from factory.validate.report import ValidationReport, read_json
from factory.validate.static import check_serve_args
from tests.conftest import KIMI, ROOT, blueprint_of, factory_containers, run_factory

pytestmark = [pytest.mark.docker, pytest.mark.e2e]


def one_node(blueprint: Blueprint) -> RunSpec:
    """The run spec of the image's one-node deployment: what validation starts."""
    deployment = blueprint.deployment("single_node_tp")
    return deployment.spec(deployment.roles[0])


def kimi(project: Project, hardware: str) -> Blueprint:
    return blueprint_of(project, KIMI, hardware)


@pytest.fixture(scope="module")
def h200_built(project: Project, docker_client: docker.DockerClient) -> BuildResult:
    return build_image(ROOT, kimi(project, "h200"), load_settings(ROOT))


def read_report(path: Path) -> ValidationReport:
    """A validation report as `factory validate` wrote it (JSON), read back into the report it was."""
    data = json.loads(path.read_text())
    report = read_json(path)
    assert (data["passed"], data["fully_validated"]) == (report.passed, report.fully_validated)
    return report


@pytest.fixture(scope="module")
def h200_validated(
    h200_built: BuildResult, docker_client: docker.DockerClient, tmp_path_factory: pytest.TempPathFactory
) -> tuple[subprocess.CompletedProcess[str], ValidationReport]:
    """`factory validate` of the H200 image as a user runs it here (no GPU: --allow-no-gpu), once for the
    tests that read it: its static checks run vLLM's parser in the image for every process, and the same
    checks ran three times when each test ran its own. Its output and the JSON report it wrote, read back;
    like any test that starts containers, it must leave none behind."""
    reports = tmp_path_factory.mktemp("h200-validation")
    containers, networks = factory_containers(docker_client), {n.id for n in docker_client.networks.list()}
    result = run_factory(
        ROOT, "validate", KIMI, "--hardware", "h200", "--reports", str(reports), "--allow-no-gpu"
    )
    assert not factory_containers(docker_client) - containers, "containers left behind"
    assert not {n.id for n in docker_client.networks.list()} - networks, "networks left behind"
    written = sorted(reports.glob("validate-*.json"))
    assert len(written) == 1, result.stdout[-2000:] + result.stderr[-2000:]
    return result, read_report(written[0])


def test_h200_static_checks_pass_and_gpu_probes_are_reported_not_run(
    h200_validated: tuple[subprocess.CompletedProcess[str], ValidationReport],
) -> None:
    _, report = h200_validated
    static = [case for case in report.cases if case.name.startswith("static:")]
    assert static and all(case.status == "passed" for case in static), static
    # each process named by its deployment and role, not by a file of one format
    prefix = "static:serve-args:kimi-linear-48b-a3b-instruct.h200-default."
    parsed = [case.name for case in static if case.name.startswith(prefix)]
    assert len(parsed) == 9, "single node + 2 nodes for each of the 4 multi-node strategies"
    live = [case for case in report.cases if case.name.startswith("live:")]
    assert live and all(case.status == "skipped" and "NVIDIA" in case.detail for case in live)
    assert report.passed and not report.fully_validated


def test_validate_cli_fails_without_the_gpu_unless_told_static_is_enough(
    project: Project,
    h200_validated: tuple[subprocess.CompletedProcess[str], ValidationReport],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Told static is enough, the real run passes. Not told, the command fails: that verdict is the
    command's reading of the report, so the same report (the real run's) is given to the command again,
    in place of running the same static checks a second time."""
    relaxed, report = h200_validated
    assert relaxed.returncode == 0, relaxed.stdout + relaxed.stderr
    assert "built; static checks passed; GPU probes not run" in relaxed.stdout
    monkeypatch.setattr(runner, "validate_image", lambda *args, **kwargs: report)
    args = build_parser().parse_args(
        ["--root", str(ROOT), "validate", KIMI, "--hardware", "h200", "--reports", str(tmp_path)]
    )
    assert args.func(project, args) == 1
    strict = capsys.readouterr()
    assert "GPU probes not run" in strict.out + strict.err


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
        h200_built.image_id, labels={OWNER_LABEL: "test"}, **gpu_run_options(one_node(kimi(project, "h200")))
    )
    try:
        requests = container.attrs["HostConfig"]["DeviceRequests"]
        assert requests[0]["Count"] == -1 and requests[0]["Capabilities"] == [["gpu"]]
    finally:
        container.remove(force=True)


def test_amd_containers_get_the_devices_groups_and_profile_their_compose_files_name(
    project: Project, h200_built: BuildResult, docker_client: docker.DockerClient
) -> None:
    """Created, never started (no /dev/kfd here): what validate asks the engine for, read back from the
    engine, and the same as what the generated compose file asks for."""
    mi300x = kimi(project, "mi300x")
    container = docker_client.containers.create(
        h200_built.image_id,
        labels={OWNER_LABEL: "test"},
        **gpu_run_options(one_node(mi300x), {"RENDER_GID": "109"}),
    )
    try:
        host = container.attrs["HostConfig"]
    finally:
        container.remove(force=True)
    devices = {device["PathOnHost"]: device["PathInContainer"] for device in host["Devices"]}
    assert devices == {"/dev/kfd": "/dev/kfd", "/dev/dri": "/dev/dri"}
    assert host["GroupAdd"] == ["video", "109"] and host["SecurityOpt"] == ["seccomp=unconfined"]
    compose = yaml.safe_load(
        (ROOT / "compose/kimi-linear-48b-a3b-instruct/mi300x-default/single_node_tp/compose.yaml").read_text()
    )
    service = next(iter(compose["services"].values()))
    assert service["devices"] == list(devices) and service["security_opt"] == host["SecurityOpt"]
    assert service["group_add"] == [
        "video",
        "${RENDER_GID:?set RENDER_GID: " + setting("RENDER_GID").why + " (see .env.example)}",
    ]


def test_check_args_parses_every_target_of_the_release_in_one_built_image(
    h200_built: BuildResult, tiny_built: BuildResult, omni_built: BuildResult
) -> None:
    """AMD, Grace and B-series targets cannot be built here; their commands still meet vLLM 0.11.2's own
    parser, inside the H200 image (the parser is the same whatever the accelerator). The omni recipe's
    commands meet vllm-omni's parser, in the omni image; its AMD images are named not buildable. (The Grace
    recipe's vLLM 0.20.2 commands meet their parser in its arm64 image: tests/test_grace.py.)"""
    result = run_factory(ROOT, "check-args", KIMI, "stabilityai/stable-diffusion-3.5-medium")
    assert result.returncode == 0, result.stdout + result.stderr
    accepted = set(
        re.findall(r"^accepted +\S+kimi-linear\S+:vllm0\.11\.2-(\w+)-default:", result.stdout, re.M)
    )
    every = {"h100", "h200", "b200", "b300", "gb200", "gb300", "mi300x", "mi325x", "mi350x", "mi355x"}
    assert every <= accepted, result.stdout
    assert "not parser-checked" not in result.stdout, result.stdout
    omni = re.findall(r"^accepted +\S+stable-diffusion-3\.5:vllm0\.12\.0-(\w+)-default:", result.stdout, re.M)
    assert {"h100", "h200", "b200", "b300"} <= set(omni), result.stdout
    amd = [line for line in result.stdout.splitlines() if "stable-diffusion-3.5:vllm-unresolved-mi" in line]
    assert amd and all(line.startswith("not buildable") and "vllm-omni" in line for line in amd)


def test_check_args_names_a_rejected_value_on_a_target_not_built_here(
    h200_built: BuildResult, scratch: Path
) -> None:
    recipe = scratch / "recipes/models/moonshotai/Kimi-Linear-48B-A3B-Instruct.yaml"
    data = yaml.safe_load(recipe.read_text())
    data["hardware_overrides"]["amd"]["extra_args"] += ["--max-num-seqs", "many"]
    recipe.write_text(yaml.safe_dump(data, sort_keys=False))
    assert run_factory(scratch, "generate").returncode == 0
    result = run_factory(scratch, "check-args")
    assert result.returncode == 1, result.stdout + result.stderr
    rejected = [line for line in result.stderr.splitlines() if line.startswith("REJECTED")]
    assert rejected and all("mi3" in line for line in rejected), result.stderr
    assert "invalid int value: 'many'" in result.stderr
    assert "vllm0.11.2-mi300x-default" in result.stderr
