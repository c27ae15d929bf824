"""The PD router's image goes the way every image goes: `factory build`, `factory validate` and `factory
publish` with MODEL `vllm-router`, through the same build, the same validation report and record, and the
same publish record that pins the manifests by digest."""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import docker
import pytest
import requests
import yaml

from factory.blueprint.router import locked_router
from factory.plan.router import SLUG
from factory.project import load_project
from tests.conftest import ROOT, run_factory

REGISTRY = "127.0.0.1:5000"  # testbench/up's registry on loopback


@pytest.mark.docker
def test_the_router_is_built_validated_and_published_as_every_image_is(
    scratch: Path, router_built: object, docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    try:
        requests.get(f"http://{REGISTRY}/v2/", timeout=5)
    except requests.RequestException as exc:
        pytest.fail(f"no registry on {REGISTRY} (testbench/up starts one): {exc}")
    shutil.copy(ROOT / ".factory.local.toml", scratch)  # this machine's build settings (its base image)
    image = locked_router(load_project(scratch)).image
    built = run_factory(scratch, "build", SLUG, "--report", str(tmp_path / "build.json"))
    assert built.returncode == 0, built.stderr[-2000:]
    assert json.loads((tmp_path / "build.json").read_text())[0]["image"] == image.reference

    reports = tmp_path / "reports"
    validated = run_factory(scratch, "validate", SLUG, "--reports", str(reports))
    assert validated.returncode == 0, validated.stdout[-2000:] + validated.stderr[-2000:]
    assert f"validated {image.reference}" in validated.stdout
    report = json.loads((reports / f"validate-{SLUG}-{image.tag}.json").read_text())
    cases = {case["name"]: case["status"] for case in report["cases"]}
    assert cases == {"static:router-version": "passed", "live:health": "passed", "live:routes": "passed"}
    assert report["fully_validated"], report

    namespace = f"{REGISTRY}/router-{uuid.uuid4().hex[:8]}"
    # Signing attests an SBOM and a provenance made from a recipe's locked set: not the router's yet.
    signed = run_factory(scratch, "publish", SLUG, "--registry", namespace, "--reports", str(reports))
    assert signed.returncode != 0 and "not signed yet" in signed.stderr, signed.stderr[-2000:]
    published = run_factory(
        scratch, "publish", SLUG, "--registry", namespace, "--reports", str(reports), "--unsigned"
    )
    assert published.returncode == 0, published.stderr[-2000:]
    record = json.loads((scratch / "recipes" / "lock" / "published.json").read_text())
    entry = record["images"][image.reference]
    assert entry["repository"] == f"{namespace}/{image.repository}"
    assert entry["immutable_tag"] == image.immutable_tag
    served = requests.head(
        f"http://{REGISTRY}/v2/{entry['repository'].split('/', 1)[1]}/manifests/{image.tag}",
        headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"},
        timeout=10,
    )
    assert served.headers["Docker-Content-Digest"] == entry["digest"]
    # The manifests of a P/D deployment now run the router by that digest.
    assert run_factory(scratch, "generate").returncode == 0
    component = yaml.safe_load((scratch / "k8s" / "_published" / "kustomization.yaml").read_text())
    pinned = {item["name"]: item for item in component["images"]}
    assert pinned[image.reference]["digest"] == entry["digest"], component


def test_an_image_command_without_hardware_says_which_is_needed(scratch: Path) -> None:
    result = run_factory(scratch, "build", "factory/tiny-random-llama")
    assert result.returncode != 0
    assert "--hardware" in result.stderr and "Traceback" not in result.stderr
