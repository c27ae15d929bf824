"""The CPU image's manifests run for real: each pod template started as a container on the engine with what
Kubernetes and LWS give a pod (its IP, the leader's DNS name, the index, the group size, the ConfigMap),
then a chat completion sent from another container to the Service's name, as a Service's traffic arrives.
"""

from __future__ import annotations

import json
import random
import time
import uuid
from collections.abc import Iterator
from typing import Any

import docker
import pytest

from factory.engine.connect import OWNER_LABEL
from factory.project import Project
from factory.render import kubernetes
from factory.validate.probes import CHAT_MESSAGE, parse_chat
from tests import kubernetes_checks as checks
from tests.conftest import TINY, blueprint_of
from tests.pod_runner import Pod, UnmappedField, container_options

LABEL = "test-kubernetes-run"


def test_a_field_the_translator_does_not_map_is_refused(project: Project) -> None:
    documents = kubernetes.objects(blueprint_of(project, TINY, "cpu").deployment("single_node_tp"))
    template = dict(checks.pod_templates(documents[-2]))["node"]
    client = docker.APIClient  # not called: refusal comes before any engine call
    for where, key in ((template["spec"], "hostNetwork"), (template["spec"]["containers"][0], "lifecycle")):
        where[key] = True
        with pytest.raises(UnmappedField, match=key):
            container_options(Pod("p", template, "10.0.0.2"), "n", {}, client, LABEL)  # type: ignore[arg-type]
        del where[key]


@pytest.fixture
def none_left(docker_client: docker.DockerClient) -> Iterator[None]:
    """Whatever the test does, none of its containers or networks is left (only its own label is looked at:
    other tests may run on the same engine at the same time)."""
    yield
    mine = {"label": f"{OWNER_LABEL}={LABEL}"}
    assert docker_client.containers.list(all=True, filters=mine) == []
    assert docker_client.networks.list(filters=mine) == []


@pytest.fixture
def network(docker_client: docker.DockerClient) -> Iterator[tuple[Any, str]]:
    """A labelled bridge network with a subnet of its own: pods get fixed IPs, known before they start."""
    for _ in range(20):
        subnet = f"172.{random.randint(20, 31)}.{random.randint(0, 255)}"
        pool = docker.types.IPAMPool(subnet=f"{subnet}.0/24")
        try:
            created = docker_client.networks.create(
                f"factory-k8s-{uuid.uuid4().hex[:8]}",
                ipam=docker.types.IPAMConfig(pool_configs=[pool]),
                labels={OWNER_LABEL: LABEL},
            )
            break
        except docker.errors.APIError:
            continue  # the subnet overlaps a network of someone else's
    else:
        pytest.fail("no free subnet for the test network")
    try:
        yield created, subnet
    finally:
        created.reload()
        for container in created.containers:
            created.disconnect(container, force=True)
        created.remove()


def _start(client: docker.DockerClient, pods: list[Pod], network: str, sources: dict[str, Any]) -> list[Any]:
    started = []
    for pod in pods:
        options = container_options(pod, network, sources, client.api, LABEL)
        created = client.api.create_container(**options, name=f"{network}-{pod.name}")
        started.append(client.containers.get(created["Id"]))
        client.api.start(created["Id"])
    return started


def _wait_healthy(containers: list[Any], leader: Any, seconds: int = 900) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for container in containers:
            container.reload()
            if container.status not in ("created", "running"):
                logs = container.logs(tail=60).decode(errors="replace")
                pytest.fail(f"{container.name} exited ({container.attrs['State']['ExitCode']}):\n{logs}")
        if leader.attrs["State"].get("Health", {}).get("Status") == "healthy":
            return
        time.sleep(5)
    pytest.fail(f"{leader.name} not healthy in {seconds} s:\n{leader.logs(tail=60).decode(errors='replace')}")


def _chat_through_service(
    client: docker.DockerClient, image: str, network: str, service: str, port: int
) -> Any:
    """A chat completion from another container on the network, addressed to the Service's name."""
    payload = json.dumps(
        {"model": TINY, "messages": [{"role": "user", "content": CHAT_MESSAGE}], "max_tokens": 8}
    )
    url = f"http://{service}:{port}/v1/chat/completions"
    client_container = client.containers.create(
        image,
        entrypoint=[
            "curl",
            "-sS",
            "--max-time",
            "300",
            "-H",
            "Content-Type: application/json",
            "-d",
            payload,
            url,
        ],
        network=network,
        labels={OWNER_LABEL: LABEL},
    )
    try:
        client_container.start()
        status = client_container.wait(timeout=330)["StatusCode"]
        output = client_container.logs(stdout=True, stderr=False).decode()
        errors = client_container.logs(stdout=False, stderr=True).decode()
    finally:
        client_container.remove(force=True)
    assert status == 0 and output, f"curl {url}: exit {status}, {errors or output or 'no answer'}"
    return parse_chat(json.loads(output))


def _cleanup(containers: list[Any]) -> None:
    for container in containers:
        container.remove(force=True, v=True)


@pytest.mark.docker
@pytest.mark.e2e
def test_the_leader_worker_set_serves_a_chat_through_its_service(
    project: Project,
    tiny_built: Any,
    docker_client: docker.DockerClient,
    none_left: None,
    network: tuple[Any, str],
) -> None:
    deployment = blueprint_of(project, TINY, "cpu").deployment("multi_node_tp_dp")
    documents = kubernetes.objects(deployment)
    config = {doc["metadata"]["name"]: doc["data"] for doc in documents if doc["kind"] == "ConfigMap"}
    lws, service = documents[-2], documents[-1]
    name, size = lws["metadata"]["name"], lws["spec"]["leaderWorkerTemplate"]["size"]
    templates = dict(checks.pod_templates(lws))
    net, subnet = network
    leader_address = f"{name}-0.{name}.default"  # LWS: <name>-<group>.<subdomain>.<namespace>
    pods = []
    for index in range(size):
        labels = {kubernetes.LWS_NAME_LABEL: name, kubernetes.LWS_INDEX_LABEL: str(index)}
        selected = all(labels.get(key) == value for key, value in service["spec"]["selector"].items())
        pods.append(
            Pod(
                name=f"{name}-0" if index == 0 else f"{name}-0-{index}",
                template=templates["leader" if index == 0 else "worker"],
                ip=f"{subnet}.{10 + index}",
                aliases=[leader_address] * (index == 0) + [service["metadata"]["name"]] * selected,
                injected={
                    "LWS_LEADER_ADDRESS": leader_address,
                    "LWS_GROUP_SIZE": str(size),
                    "LWS_WORKER_INDEX": str(index),
                },
            )
        )
    containers: list[Any] = []
    try:
        containers = _start(docker_client, pods, net.name, config)
        _wait_healthy(containers, containers[0])
        image = pods[0].template["spec"]["containers"][0]["image"]
        assert image == tiny_built.image, "the manifest names the image built here"
        answer = _chat_through_service(
            docker_client, image, net.name, service["metadata"]["name"], service["spec"]["ports"][0]["port"]
        )
        assert answer.completion_tokens > 0
        worker = containers[1]
        worker.reload()
        logs = worker.logs().decode(errors="replace")
        assert worker.status == "running", logs[-3000:]
        assert "DP rank 1" in logs or "DP1" in logs or "dp_rank=1" in logs, logs[-3000:]
    finally:
        _cleanup(containers)


@pytest.mark.docker
@pytest.mark.e2e
def test_the_one_node_deployment_serves_a_chat_through_its_service(
    project: Project,
    tiny_built: Any,
    docker_client: docker.DockerClient,
    none_left: None,
    network: tuple[Any, str],
) -> None:
    documents = kubernetes.objects(blueprint_of(project, TINY, "cpu").deployment("single_node_tp"))
    workload, service = documents[-2], documents[-1]
    template = dict(checks.pod_templates(workload))["node"]
    net, subnet = network
    name = workload["metadata"]["name"]
    pod = Pod(
        name=f"{name}-abc12", template=template, ip=f"{subnet}.10", aliases=[service["metadata"]["name"]]
    )
    containers: list[Any] = []
    try:
        containers = _start(docker_client, [pod], net.name, {})
        _wait_healthy(containers, containers[0])
        image = template["spec"]["containers"][0]["image"]
        answer = _chat_through_service(
            docker_client, image, net.name, service["metadata"]["name"], service["spec"]["ports"][0]["port"]
        )
        assert answer.completion_tokens > 0
    finally:
        _cleanup(containers)
