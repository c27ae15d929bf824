"""`factory validate`: a real vLLM server started with testcontainers and probed; faults fail fast."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path
from typing import Any

import docker
import pytest

from factory.blueprint import Blueprint
from factory.builder.builder import BuildResult
from factory.engine.connect import OWNER_LABEL
from factory.plan.runspec import RunSpec
from factory.project import Project
from factory.validate import checklist
from factory.validate.checklist import Target
from factory.validate.container import running
from factory.validate.offer import Offer
from factory.validate.probes import ProbeFailure, parse_chat, wait_healthy
from factory.validate.report import ValidationReport
from factory.validate.runner import run_probes
from tests.conftest import ROOT, TINY, blueprint_of, run_factory
from tests.test_probes import CPU_ENGINE

pytestmark = pytest.mark.docker


def tiny_plan(project: Project) -> Blueprint:
    return blueprint_of(project, TINY, "cpu")


def shipped_spec(project: Project, **changes: object) -> RunSpec:
    """The run spec of the tiny model's one-node deployment (what validation starts), with changes."""
    deployment = tiny_plan(project).deployment("single_node_tp")
    return deployment.spec(deployment.roles[0]).model_copy(update=changes)


@pytest.mark.e2e
def test_the_cpu_image_serves_a_real_chat_completion(
    project: Project, tiny_built: BuildResult, tiny_validation: Any
) -> None:
    report, reports = tiny_validation
    statuses = {case.name: case.status for case in report.cases}
    assert report.fully_validated, report.cases
    live = [probe.name for probe in checklist.chosen(tiny_plan(project).image.tasks)]
    assert live == [
        "live:health",
        "live:models",
        "live:chat",
        "live:deterministic",
        "live:non-root",
        "live:read-only-root",
        "live:metrics",
    ]
    for name in ("static:vllm-version", "static:pinned-env", *live):
        assert statuses[name] == "passed", name
    # cases are named by deployment and process, not by a format's file
    assert report.started.startswith("tiny-random-llama.cpu-default.single_node_tp/node (the container ")
    assert "static:serve-args:tiny-random-llama.cpu-default.single_node_tp/node" in statuses
    assert not any("compose/" in name for name in statuses)
    stem = "validate-tiny-random-llama-vllm0.32.0-cpu-default"
    assert (reports / f"{stem}.json").is_file() and (reports / f"{stem}.xml").is_file()
    assert (reports / "validated" / f"{tiny_built.image_id.replace(':', '-')}.json").is_file()


EMBEDDING = "factory/tiny-random-embedding"


@pytest.mark.e2e
def test_the_embedding_image_shares_the_chat_images_layers_and_serves_vectors_of_its_width(
    project: Project,
    tiny_built: BuildResult,
    docker_client: docker.DockerClient,
    no_leftovers: None,
    tmp_path: Path,
) -> None:
    """`factory build` then `factory validate`, as a user runs them: the embeddings probe runs on the CPU,
    against the tiny embedding model served by vLLM's pooling runner; the chat probes are not chosen.
    Built after the tiny chat image (tiny_built), it costs one layer: its model files."""
    built = run_factory(ROOT, "build", EMBEDDING, "--hardware", "cpu", "--report", str(tmp_path / "b.json"))
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    image = blueprint_of(project, EMBEDDING, "cpu").image
    layers = docker_client.images.get(image.reference).attrs["RootFS"]["Layers"]
    chat_layers = docker_client.images.get(tiny_built.image_id).attrs["RootFS"]["Layers"]
    # Its own layers: the model's, and the non-root user's RUN above it (issue 48), made again over another
    # parent (the files it writes carry that build's times); every layer below the model's is shared.
    differ = [i for i, (mine, chat) in enumerate(zip(layers, chat_layers, strict=True)) if mine != chat]
    assert differ == [len(layers) - 3, len(layers) - 2], differ

    validated = run_factory(ROOT, "validate", EMBEDDING, "--hardware", "cpu", "--reports", str(tmp_path))
    assert validated.returncode == 0, validated.stdout[-3000:] + validated.stderr[-2000:]
    report = json.loads((tmp_path / f"validate-{image.slug}-{image.tag}.json").read_text())
    cases = {case["name"]: case for case in report["cases"]}
    assert [name for name in cases if name.startswith("live:")] == [
        "live:health",
        "live:models",
        "live:non-root",
        "live:read-only-root",
        "live:metrics",
        "live:embeddings",
    ]
    assert all(cases[name]["status"] == "passed" for name in cases), report["cases"]
    width = json.loads((ROOT / image.bundled_model_src / "config.json").read_text())["hidden_size"]
    assert cases["live:embeddings"]["detail"] == f"2 inputs, 2 vectors of {width} numbers"
    assert report["fully_validated"]


def test_when_health_fails_the_probes_after_it_are_skipped_not_run(
    project: Project, silent_image: object, no_leftovers: None, tmp_path: Path
) -> None:
    """A real container that never answers: health fails at its deadline, and no other probe is sent."""
    spec = shipped_spec(project, image="factory-test/silent:latest", args=())
    report = ValidationReport("factory-test/silent:latest", "sha256:0", "cpu", "0.32.0", "0" * 64)
    runnable = checklist.decide(Offer.of(tiny_plan(project), CPU_ENGINE, True))
    with running(spec, "gate", tmp_path) as started:
        run_probes(runnable, Target(started, "factory/tiny-random-llama", 3), report)
    statuses = [(case.name, case.status) for case in report.cases]
    assert statuses == [
        ("live:health", "failed"),
        ("live:models", "skipped"),
        ("live:chat", "skipped"),
        ("live:deterministic", "skipped"),
        ("live:non-root", "skipped"),
        ("live:read-only-root", "skipped"),
        ("live:metrics", "skipped"),
    ]
    assert "timed out after 3 s" in report.cases[0].detail
    assert {case.detail for case in report.cases[1:]} == {"not run: live:health failed"}


def test_validation_leaves_no_container(tiny_validation: Any, docker_client: docker.DockerClient) -> None:
    validating = {"label": "ai.vllm.factory.owner=validate"}
    assert not docker_client.containers.list(all=True, filters=validating, ignore_removed=True)


@pytest.mark.e2e
def test_a_server_that_exits_at_start_fails_fast_with_its_logs(
    project: Project, tiny_built: BuildResult, no_leftovers: None, tmp_path: Path
) -> None:
    started_at = time.monotonic()
    spec = shipped_spec(project)
    with (
        running(
            spec.model_copy(update={"args": (*spec.args, "--no-such-flag")}), "exits", tmp_path
        ) as started,
        pytest.raises(ProbeFailure) as failure,
    ):
        wait_healthy(started.health_url, started.name, 600, started.state)
    assert time.monotonic() - started_at < 120, "waited for a timeout instead of seeing the exit"
    message = str(failure.value)
    assert f"container {started.name} exited" in message
    assert "--no-such-flag" in message


@pytest.fixture(scope="module")
def silent_image(docker_client: docker.DockerClient):
    """An image that starts and never serves HTTP: built with the SDK (no BuildKit features needed)."""
    dockerfile = b'FROM factory-local/debian:bookworm\nENTRYPOINT ["sleep", "infinity"]\n'
    image, _ = docker_client.images.build(
        fileobj=io.BytesIO(dockerfile),
        tag="factory-test/silent:latest",
        labels={OWNER_LABEL: "test"},
        rm=True,
    )
    yield image
    docker_client.images.remove("factory-test/silent:latest", force=True)


def test_health_that_never_answers_times_out_naming_container_and_url(
    project: Project, silent_image: object, no_leftovers: None, tmp_path: Path
) -> None:
    spec = shipped_spec(project, image="factory-test/silent:latest", args=())
    with (
        running(spec, "silent", tmp_path) as started,
        pytest.raises(ProbeFailure) as failure,
    ):
        wait_healthy(started.health_url, started.name, 5, started.state)
    message = str(failure.value)
    assert "timed out after 5 s" in message
    assert f"{started.base_url}/health" in message and started.name in message
    assert started.base_url.startswith("http://127.0.0.1:")


def test_the_validation_container_publishes_its_api_on_loopback_only(
    project: Project,
    silent_image: object,
    no_leftovers: None,
    docker_client: docker.DockerClient,
    tmp_path: Path,
) -> None:
    """What the engine was asked for, read back from the engine: no port on any address but loopback."""
    spec = shipped_spec(project, image="factory-test/silent:latest", args=())
    with running(spec, "loopback", tmp_path) as started:
        attrs = docker_client.containers.get(started.name).attrs
    published = attrs["NetworkSettings"]["Ports"]
    bindings = [binding for port in published.values() for binding in port or []]
    assert bindings, published
    assert {binding["HostIp"] for binding in bindings} == {"127.0.0.1"}, bindings
    assert attrs["HostConfig"]["PortBindings"][f"{spec.port}/tcp"][0]["HostIp"] == "127.0.0.1"


GOOD = {
    "object": "chat.completion",
    "choices": [{"message": {"role": "assistant", "content": "Hi"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
}


@pytest.mark.parametrize(
    ("change", "complaint"),
    [
        ({"object": "text_completion"}, "'object' is 'text_completion'"),
        ({"choices": []}, "'choices' is []"),
        ({"choices": [{"message": {"content": ""}, "finish_reason": "stop"}]}, "content is ''"),
        ({"choices": [{"message": {"content": "x"}}]}, "finish_reason is None"),
        ({"usage": {"prompt_tokens": 5}}, "'usage' is {'prompt_tokens': 5}"),
        (
            {"usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 9}},
            "total_tokens 9 != prompt 5",
        ),
    ],
)
def test_malformed_chat_answers_say_what_is_wrong(change: dict, complaint: str) -> None:
    assert parse_chat(GOOD).text == "Hi"
    with pytest.raises(ProbeFailure) as failure:
        parse_chat({**GOOD, **change})
    assert complaint in str(failure.value)


def test_validate_without_an_engine_is_a_clear_error(tmp_path: Path) -> None:
    result = run_factory(
        ROOT,
        "validate",
        TINY,
        "--hardware",
        "cpu",
        "--reports",
        str(tmp_path),
        env={"DOCKER_HOST": f"unix://{tmp_path}/none.sock"},
    )
    assert result.returncode == 2 and "cannot reach the Docker Engine" in result.stderr
    assert not list(tmp_path.glob("*.json"))
