"""A published image runs by registry and digest in the Kubernetes manifests; any other by its tag.

`factory publish` writes the record (recipes/lock/published.json), `factory generate` prints from it the
kustomize component every deployment's kustomization includes, and `kubectl kustomize` shows the result."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import docker
import pytest
import yaml

from factory.lockfile.published import PublishedImage, record_file, record_published
from factory.plan.models import ImagePlan
from factory.project import load_project
from factory.publish.publisher import Published, record_publish
from factory.publish.pusher import push
from factory.publish.registry import Credentials, manifest_digest
from factory.render import kubernetes
from tests.conftest import KIMI, ROOT, TINY, blueprint_of, kubectl, run_factory
from tests.registry import LocalRegistry

SMALL_IMAGE = "factory-local/debian:bookworm"  # testbench/up makes it: a real image, small to push


def _kubectl() -> str:
    return kubectl()


def images_rendered(folder: Path) -> list[str]:
    """Every container image of the deployment's objects, as `kubectl kustomize DIR` prints them."""
    result = subprocess.run(
        [_kubectl(), "kustomize", str(folder)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    found = []
    for doc in yaml.safe_load_all(result.stdout):
        if not doc or doc["kind"] not in ("Deployment", "LeaderWorkerSet"):
            continue
        spec = doc["spec"]
        group = spec.get("leaderWorkerTemplate", {})
        templates = (
            [spec["template"]]
            if doc["kind"] == "Deployment"
            else [
                group["leaderTemplate"],
                group["workerTemplate"],
            ]
        )
        found += [c["image"] for t in templates for c in t["spec"]["containers"]]
    return found


def folder_of(root: Path, model: str, hardware: str, strategy: str) -> tuple[ImagePlan, Path]:
    blueprint = blueprint_of(load_project(root), model, hardware)
    return blueprint.image, root / kubernetes.directory(blueprint.deployment(strategy))


def test_without_a_record_every_deployment_runs_its_image_by_tag() -> None:
    image, folder = folder_of(ROOT, TINY, "cpu", "single_node_tp")
    assert not record_file(load_project(ROOT).lock_path).exists(), "nothing of the project is published"
    assert images_rendered(folder) == [image.reference]


@pytest.mark.docker
def test_a_published_image_runs_by_registry_and_digest_once_generated(
    scratch: Path,
    shared_registry: LocalRegistry,
    docker_client: docker.DockerClient,
    untag: list[str],
) -> None:
    """A real push to a real registry: its digest reaches the one-node Deployment and every pod of the LWS,
    and pulling by that reference gives the image that was pushed."""
    image, one_node = folder_of(scratch, TINY, "cpu", "single_node_tp")
    _, multi_node = folder_of(scratch, TINY, "cpu", "multi_node_tp_dp")
    credentials = Credentials(shared_registry.user, shared_registry.password)
    # A small stand-in pushed under the image's own name (the 3 GB image is not needed to get a digest), in
    # a namespace of its own: the session's registry holds the real image under that name without one.
    target = f"{shared_registry.address}/stand-in/{image.repository}"
    docker_client.images.get(SMALL_IMAGE).tag(target, image.tag)
    untag.append(f"{target}:{image.tag}")
    pushed = push(docker_client, target, image.tag, credentials)
    published = Published(pushed.reference, pushed.digest, "sha256:" + "0" * 64, pushed.attempts, True)
    record = record_file(load_project(scratch).lock_path)
    record_publish(image, [published], record)

    stale = run_factory(scratch, "generate", "--check")
    assert stale.returncode == 1 and "changed: k8s/_published/kustomization.yaml" in stale.stderr
    assert run_factory(scratch, "generate").returncode == 0
    assert run_factory(scratch, "generate", "--check").returncode == 0
    by_digest = f"{target}@{pushed.digest}"
    assert images_rendered(one_node) == [by_digest]
    assert images_rendered(multi_node) == [by_digest, by_digest], "leader and workers"
    untag.append(by_digest)
    pulled = docker_client.images.pull(by_digest, auth_config=credentials.as_auth_config())
    assert pulled.id == docker_client.images.get(SMALL_IMAGE).id


def _entry(image: ImagePlan, immutable_tag: str | None = None) -> PublishedImage:
    return PublishedImage(
        repository=f"registry.example.com/team/{image.repository}",
        digest="sha256:" + "ab" * 32,
        immutable_tag=immutable_tag or image.immutable_tag,
    )


def test_only_the_published_tag_is_pinned_and_not_an_image_built_from_other_inputs(scratch: Path) -> None:
    """One repository, several tags (Kimi on H100, H200, B200): the record pins H100's tag alone; H200's
    record names other inputs (an older build), so H200 keeps its tag, and the component says why."""
    h100, h100_folder = folder_of(scratch, KIMI, "h100", "single_node_tp")
    h200, h200_folder = folder_of(scratch, KIMI, "h200", "multi_node_tp")
    b200, b200_folder = folder_of(scratch, KIMI, "b200", "single_node_tp")
    assert h100.repository == h200.repository == b200.repository
    record = record_file(load_project(scratch).lock_path)
    record_published(record, h100.reference, _entry(h100))
    record_published(record, h200.reference, _entry(h200, f"{h200.tag}-0123456789ab"))
    assert run_factory(scratch, "generate").returncode == 0

    pinned = f"registry.example.com/team/{h100.repository}@sha256:" + "ab" * 32
    assert images_rendered(h100_folder) == [pinned]
    assert images_rendered(h200_folder) == [h200.reference] * 2
    assert images_rendered(b200_folder) == [b200.reference]
    component = (scratch / kubernetes.IMAGES_COMPONENT / "kustomization.yaml").read_text()
    assert f"{h200.reference}: published as {h200.tag}-0123456789ab, now planned as {h200.immutable_tag}" in (
        component
    )


def test_the_record_is_one_sorted_entry_per_image_and_the_last_publish_wins(scratch: Path) -> None:
    image = blueprint_of(load_project(scratch), TINY, "cpu").image
    record = record_file(load_project(scratch).lock_path)
    record_published(record, image.reference, _entry(image))
    newer = _entry(image).model_copy(update={"digest": "sha256:" + "cd" * 32})
    record_published(record, image.reference, newer)
    written: dict[str, Any] = json.loads(record.read_text())
    assert list(written["images"]) == [image.reference]
    assert written["images"][image.reference]["digest"] == "sha256:" + "cd" * 32


def test_a_bad_record_is_an_error_naming_the_file_the_field_and_the_value(scratch: Path) -> None:
    image = blueprint_of(load_project(scratch), TINY, "cpu").image
    record = record_file(load_project(scratch).lock_path)
    entry = _entry(image).model_dump() | {"digest": "sha256:not-a-digest"}
    record.write_text(json.dumps({"images": {image.reference: entry}}))
    result = run_factory(scratch, "generate")
    assert result.returncode != 0
    assert "published.json" in result.stderr
    assert f"images.{image.reference}.digest" in result.stderr and "sha256:not-a-digest" in result.stderr


@pytest.mark.e2e
@pytest.mark.docker
def test_factory_publish_records_the_push_and_generate_pins_the_manifests_to_it(
    scratch: Path,
    shared_registry: LocalRegistry,
    tiny_built: Any,
    docker_client: docker.DockerClient,
    untag: list[str],
) -> None:
    """The commands a user runs: `factory publish` (the image built here, pushed for real), then
    `factory generate`; the record names what the registry serves, and the manifests run it."""
    image, one_node = folder_of(scratch, TINY, "cpu", "single_node_tp")
    env = {
        "FACTORY_REGISTRY_USER": shared_registry.user,
        "FACTORY_REGISTRY_PASSWORD": shared_registry.password,
    }
    untag += [
        f"{shared_registry.address}/{image.reference}",
        f"{shared_registry.address}/{image.immutable_reference}",
    ]
    published = run_factory(
        scratch,
        "publish",
        TINY,
        "--hardware",
        "cpu",
        "--registry",
        shared_registry.address,
        "--force-unvalidated",  # validation is tested elsewhere; here, what publish records
        "--unsigned",  # and signing too (tests/test_signing.py)
        "--reports",
        str(scratch / "reports"),
        env=env,
    )
    assert published.returncode == 0, published.stderr[-2000:]
    record = record_file(load_project(scratch).lock_path)
    assert f"recorded in {record}" in published.stdout
    entry = json.loads(record.read_text())["images"][image.reference]
    # The digest this run pushed, as publish printed it: the session's registry may have held the image
    # before (another test pushed it), so what it serves is compared with this push, not taken alone.
    printed = dict(
        line.split()[1:3] for line in published.stdout.splitlines() if line.startswith("published ")
    )
    served = manifest_digest(
        shared_registry.address,
        image.repository,
        image.tag,
        Credentials(shared_registry.user, shared_registry.password),
    )
    assert entry == {
        "repository": f"{shared_registry.address}/{image.repository}",
        "digest": served,
        "immutable_tag": image.immutable_tag,
    }
    assert printed[f"{shared_registry.address}/{image.reference}"] == served
    assert run_factory(scratch, "generate").returncode == 0
    assert images_rendered(one_node) == [f"{shared_registry.address}/{image.repository}@{served}"]


def test_a_record_key_that_is_not_an_image_reference_is_refused(scratch: Path) -> None:
    """The key is printed into the generated component: a newline there would be YAML of the record's."""
    image = blueprint_of(load_project(scratch), TINY, "cpu").image
    record = record_file(load_project(scratch).lock_path)
    hostile = f"{image.reference}\nimages: []\n#"
    for key in (hostile, f"{image.reference}\n", image.repository):
        record.write_text(json.dumps({"images": {key: _entry(image).model_dump()}}))
        result = run_factory(scratch, "generate")
        assert result.returncode != 0 and "not an image reference with a tag" in result.stderr, key
        assert "published.json" in result.stderr
