"""Compose refuses what does not verify (issue 45): the published tiny image's deployment, as generated
(compose.yaml and its compose.override.yaml), started with the real Compose binary; and each tampering the
issue lists, refused in one line by `factory verify` and by the gate, with the running deployment untouched.

The verifier runs on the host's network here, to reach the registry on this machine's loopback: a test
setting in a file of the test's own, never in the generated files (which allow no plain HTTP: cosign speaks
it to a loopback registry by itself)."""

from __future__ import annotations

import os
import socket
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest
import requests
import yaml

from factory.base.tools import compose_binary
from factory.publish.pusher import push
from tests.conftest import run_factory
from tests.trust_helpers import OFFLINE, REPOSITORY, Published, moved, run_cosign
from tests.trust_images import small_image
from tests.trust_tamper import CASES, Stranger

pytestmark = [pytest.mark.docker, pytest.mark.e2e]
SINGLE = Path("compose/tiny-random-llama/cpu-default/single_node_tp")


@dataclass(frozen=True)
class Serving:
    command: list[str]  # docker compose -p ... -f compose.yaml -f compose.override.yaml -f <test setting>
    env: dict[str, str]
    vllm: str  # the serving container's ID
    port: int

    def up(self) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.command, "up", "-d", "--wait"],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=1500,
            check=False,
        )

    def verify_said(self, client: docker.DockerClient) -> str:
        """The verify service's last log line (it runs again on every `up`)."""
        labels = [f"com.docker.compose.project={self.command[2]}", "com.docker.compose.service=verify"]
        verifier = client.containers.list(all=True, filters={"label": labels})
        return str(verifier[0].logs().decode().strip().splitlines()[-1])


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def serving(trust_published: Published, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serving]:
    """`factory build-verifier`, then `docker compose up -d --wait` in the deployment's folder: vLLM
    serves the published image once the gate let it."""
    published = trust_published
    # The real cosign goes into the image (the one published.env names logs its command lines first).
    built = run_factory(
        published.root, "build-verifier", env={**published.env, "FACTORY_COSIGN": str(published.cosign)}
    )
    assert built.returncode == 0, built.stderr[-2000:]
    base = tmp_path_factory.mktemp("gate")
    setting = base / "loopback-registry.yaml"
    setting.write_text("services:\n  verify:\n    network_mode: host\n")
    folder = published.root / SINGLE
    project = f"factory-trust-{uuid.uuid4().hex[:8]}"
    command = [
        str(compose_binary()),
        "-p",
        project,
        "--project-directory",
        str(folder),
        "-f",
        str(folder / "compose.yaml"),
        "-f",
        str(folder / "compose.override.yaml"),
        "-f",
        str(setting),
    ]
    port = _free_port()
    env = {**os.environ, **published.env, "API_PORT": str(port), "HF_CACHE": str(base / "hf")}
    try:
        started = subprocess.run(
            [*command, "up", "-d", "--wait"],
            capture_output=True,
            text=True,
            env=env,
            timeout=1500,
            check=False,
        )
        assert started.returncode == 0, started.stderr[-3000:]
        ids = subprocess.run(
            [*command, "ps", "-q", "vllm"], capture_output=True, text=True, env=env, check=True
        )
        yield Serving(command, env, ids.stdout.strip(), port)
    finally:
        subprocess.run(
            [*command, "down", "--timeout", "5"], capture_output=True, env=env, timeout=300, check=False
        )


@pytest.fixture(scope="module")
def stranger(trust_published: Published, docker_client: docker.DockerClient) -> Stranger:
    published = trust_published
    repository = f"{published.namespace.name}/{REPOSITORY}"
    found = {}
    for tag in ("stranger-signed", "stranger-unsigned"):
        small_image(docker_client, repository, tag, f"not the published image ({tag})")
        try:
            found[tag] = f"{repository}@{push(docker_client, repository, tag, None).digest}"
        finally:
            docker_client.images.remove(f"{repository}:{tag}", noprune=False)
    run_cosign(
        published.cosign,
        "sign",
        "--key",
        str(published.keys / "cosign.key"),
        *OFFLINE,
        found["stranger-signed"],
    )
    return Stranger(found["stranger-signed"], found["stranger-unsigned"])


def test_the_generated_gate_runs_the_image_by_digest_after_a_one_shot_verify(
    trust_published: Published,
) -> None:
    override = yaml.safe_load((trust_published.root / SINGLE / "compose.override.yaml").read_text())
    services = override["services"]
    assert services["vllm"]["image"] == trust_published.reference
    assert services["vllm"]["depends_on"] == {"verify": {"condition": "service_completed_successfully"}}
    assert (
        services["verify"]["command"] == [trust_published.reference] and services["verify"]["restart"] == "no"
    )
    assert (
        override["configs"]["factory-verify-key"]["content"] == trust_published.entry["signed"]["public_key"]
    )
    for path in (trust_published.root / "compose").rglob("*.override.yaml"):  # every gate generated
        text = path.read_text()
        assert "network_mode" not in text and "allow-http" not in text and "allow-insecure" not in text, path


def test_compose_serves_the_verified_image(serving: Serving, docker_client: docker.DockerClient) -> None:
    assert serving.verify_said(docker_client).startswith("verified ")
    answer = requests.post(
        f"http://127.0.0.1:{serving.port}/v1/chat/completions",
        json={
            "model": "factory/tiny-random-llama",
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 4,
        },
        timeout=120,
    )
    assert answer.status_code == 200 and answer.json()["usage"]["completion_tokens"] > 0, answer.text


@pytest.mark.parametrize("case", list(CASES))
def test_each_tampering_is_refused_in_one_line_by_verify_and_by_the_compose_gate(
    case: str,
    trust_published: Published,
    serving: Serving,
    stranger: Stranger,
    docker_client: docker.DockerClient,
) -> None:
    tamper, said = CASES[case]
    published = trust_published
    with tamper(published, stranger):
        verdict = run_factory(
            published.root,
            "verify",
            published.reference,
            "--key",
            str(published.keys / "cosign.pub"),
            env=published.env,
        )
        gated = serving.up()
    lines = verdict.stderr.strip().splitlines()
    assert verdict.returncode == 1 and len(lines) == 1, verdict.stdout + verdict.stderr
    assert lines[0].startswith(f"refused {published.reference}: {said}"), lines[0]
    assert gated.returncode != 0 and "didn't complete successfully" in gated.stderr, gated.stderr[-2000:]
    assert serving.verify_said(docker_client) == lines[0], "the gate says what factory verify says"
    running = docker_client.containers.get(serving.vllm)
    assert running.status == "running", "the deployment already running is untouched"
    assert requests.get(f"http://127.0.0.1:{serving.port}/health", timeout=10).status_code == 200


def test_a_tag_moved_to_an_unsigned_image_is_refused_by_tag_and_compose_keeps_the_signed_one(
    trust_published: Published, serving: Serving, stranger: Stranger, docker_client: docker.DockerClient
) -> None:
    published = trust_published
    tag = published.entry["immutable_tag"]
    unsigned = published.namespace.manifest(REPOSITORY, stranger.unsigned.rpartition("@")[2])
    assert unsigned is not None
    with moved(published.namespace, REPOSITORY, tag, unsigned):
        by_tag = run_factory(
            published.root,
            "verify",
            f"{published.entry['repository']}:{tag}",
            "--key",
            str(published.keys / "cosign.pub"),
            env=published.env,
        )
        pinned = serving.up()
    assert by_tag.returncode == 1, by_tag.stdout + by_tag.stderr
    assert f"refused {stranger.unsigned}: signature: no signature" in by_tag.stderr
    assert pinned.returncode == 0, pinned.stderr[-2000:]
    assert serving.verify_said(docker_client).startswith(f"verified {published.reference}")
    assert docker_client.containers.get(serving.vllm).status == "running"
