"""Runs share the engine: between listing containers or images and reading one, another run (or test) may
remove it. Each listing the factory takes goes on with the rest (CI saw a 404 from such a listing stop a
validation, stop 36)."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from typing import Any

import docker
import pytest
from docker.errors import NotFound

from factory.engine.leftovers import PID_LABEL, labels, sweep
from factory.report.matrix import engine_images
from factory.validate.check_args import VERSION_LABEL, built_image_of

pytestmark = [pytest.mark.docker]


def test_a_container_another_run_removes_during_the_sweep_does_not_stop_it(
    docker_client: docker.DockerClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A killed run's container that another run's sweep removes first: this sweep removes the other."""
    dead = subprocess.Popen(["true"])
    dead.wait()  # a PID whose process is gone: what a killed run leaves on its containers
    orphan = {**labels("validate"), PID_LABEL: str(dead.pid)}
    vanishing, left = (
        docker_client.containers.create("factory-local/debian:bookworm", ["true"], labels=orphan)
        for _ in range(2)
    )
    inspect = docker_client.api.inspect_container
    removed_by_another_run: list[str] = []

    def racing_inspect(resource_id: Any) -> Any:
        if not removed_by_another_run:
            vanishing.remove(force=True)
            removed_by_another_run.append(vanishing.id)
        return inspect(resource_id)

    monkeypatch.setattr(docker_client.api, "inspect_container", racing_inspect)
    try:
        assert left.name in sweep(docker_client)
    finally:
        monkeypatch.undo()
        for container in (vanishing, left):
            with contextlib.suppress(NotFound):
                container.remove(force=True)
    assert removed_by_another_run == [vanishing.id]


@pytest.fixture
def labelled_image(docker_client: docker.DockerClient) -> Iterator[str]:
    """A small image with a factory vLLM label and a tag, committed from the testbench's base (no build)."""
    base = "factory-local/debian:bookworm"
    container = docker_client.containers.create(base, ["true"], labels=labels("test"))
    repository, tag = "factory-test/engine-race", "latest"
    try:
        image = container.commit(repository, tag, conf={"Labels": {VERSION_LABEL: "0.0.0-race"}})
    finally:
        container.remove(force=True)
    try:
        yield f"{repository}:{tag}"
    finally:
        docker_client.images.remove(str(image.id), force=True)


def vanished(resource_id: Any) -> Any:
    raise NotFound(f"No such image: {resource_id} (removed by another run after the listing)")


def test_an_image_removed_while_the_engine_is_listed_hides_no_other(
    docker_client: docker.DockerClient, labelled_image: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`factory matrix` and `factory check-args` list the engine's images: one image that is gone by the
    time it is read must not make every built image look unbuilt."""
    monkeypatch.setattr(docker_client.api, "inspect_image", vanished)
    assert labelled_image in engine_images(docker_client)
    assert built_image_of(docker_client, "0.0.0-race") == labelled_image
