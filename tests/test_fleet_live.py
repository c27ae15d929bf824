"""The non-root CPU image, live: the README's main job validates the built-in default with the container the
compose file ships (factory/validate/container.py): inside the running container the server runs as the
images' user, the root filesystem refuses writes where the run spec says so, the server answers health,
models and chat, and /metrics serves the series the autoscaler and the endpoint picker read, under the names
the catalog gives (read from the server). And a model cache an older root image filled becomes the user's
with the docs page's one-time step."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import docker
import pytest
from docker.errors import ContainerError

from factory.engine.leftovers import labels
from factory.project import Project
from tests import fleet_checks


def test_the_cpu_image_serves_as_its_non_root_user_on_a_read_only_root_with_the_fleets_metrics(
    tiny_validation: Any,
) -> None:
    report, _ = tiny_validation
    cases = {case.name: case for case in report.cases}
    for name in (
        "live:health",
        "live:models",
        "live:chat",
        "live:non-root",
        "live:read-only-root",
        "live:metrics",
    ):
        assert cases[name].status == "passed", (name, cases[name].detail)
        print(f"{name}: {cases[name].detail}")
    assert "runs as 10001:10001" in cases["live:non-root"].detail
    assert "vllm:num_requests_waiting" in cases["live:metrics"].detail


def _write_as_the_images_user(client: docker.DockerClient, image: str, cache: Path) -> str:
    """A container of the image, as its own user (the image's USER), on a read-only root, writing a new file
    into the mounted cache and into a file a root image left there."""
    script = (
        "touch /var/cache/huggingface/hub/new && echo more >> /var/cache/huggingface/hub/old && echo wrote"
    )
    output = client.containers.run(
        image,
        entrypoint=["sh", "-c", script],
        command=[],
        volumes={str(cache): {"bind": "/var/cache/huggingface", "mode": "rw"}},
        read_only=True,
        labels=labels("fleet-test", **{"ai.vllm.factory.run": uuid.uuid4().hex[:12]}),
        remove=True,
        stderr=True,
    )
    return bytes(output).decode()


@pytest.mark.docker
def test_a_model_cache_a_root_image_filled_is_the_users_after_the_one_time_step(
    project: Project, tiny_built: Any, docker_client: docker.DockerClient, tmp_path: Path, no_leftovers: None
) -> None:
    """A host cache folder as an older image running as root left it (root's files and folders): the image's
    user cannot write there; after the docs page's one-time chown (run as written, `~` the test's home) it
    writes new files and the old ones."""
    home = tmp_path / "home"
    cache = home / ".cache" / "huggingface"
    (cache / "hub").mkdir(parents=True)
    (cache / "hub" / "old").write_text("a root image wrote this\n")
    assert os.geteuid() == 0 and (cache / "hub").stat().st_uid == 0, "made by root, as a root image does"
    with pytest.raises(ContainerError, match="Permission denied"):
        _write_as_the_images_user(docker_client, tiny_built.image_id, cache)
    commands = [c for c in fleet_checks.docs_commands() if c.startswith("chown")]
    fleet_checks.run_docs_commands(commands, tmp_path, {**os.environ, "HOME": str(home)})
    assert _write_as_the_images_user(docker_client, tiny_built.image_id, cache).strip() == "wrote"
    user = project.catalog.server.user
    assert (cache / "hub" / "new").stat().st_uid == user.uid
