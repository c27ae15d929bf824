"""The CPU image's manifests run for real: each pod template started as a container on the engine with what
Kubernetes and LWS give a pod (its IP, the leader's DNS name, the index, the group size, the ConfigMap),
then a chat completion sent from another container to the Service's name, as a Service's traffic arrives.
"""

from __future__ import annotations

import contextlib
import json
import random
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from factory.engine.connect import OWNER_LABEL
from factory.project import Project
from factory.render import kubernetes
from factory.validate.probes import CHAT_MESSAGE, parse_chat
from tests import kubernetes_checks as checks
from tests.conftest import TINY, blueprint_of, kv_blueprint
from tests.pod_runner import Pod, UnmappedField, container_options, init_options

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


def _curl(client: docker.DockerClient, image: str, network: str, url: str, payload: str | None = None) -> str:
    """What the URL answers, asked by curl from another container on the network (a POST of the JSON
    `payload` when given); an HTTP error fails with the answer's body."""
    data = ["-H", "Content-Type: application/json", "-d", payload] if payload else []
    asking = client.containers.create(
        image,
        entrypoint=["curl", "-sS", "--fail-with-body", "--max-time", "300", *data, url],
        network=network,
        labels={OWNER_LABEL: LABEL},
    )
    try:
        asking.start()
        status = asking.wait(timeout=330)["StatusCode"]
        output = asking.logs(stdout=True, stderr=False).decode()
        errors = asking.logs(stdout=False, stderr=True).decode()
    finally:
        asking.remove(force=True)
    assert status == 0, f"curl {url}: exit {status}, {errors} {output}"
    return output


def _chat_through_service(
    client: docker.DockerClient, image: str, network: str, service: str, port: int
) -> Any:
    """A chat completion from another container on the network, addressed to the Service's name."""
    payload = json.dumps(
        {"model": TINY, "messages": [{"role": "user", "content": CHAT_MESSAGE}], "max_tokens": 8}
    )
    url = f"http://{service}:{port}/v1/chat/completions"
    return parse_chat(json.loads(_curl(client, image, network, url, payload)))


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


# --- a KV store: its pods started as a kubelet starts them, init containers first ---------------------------


def _create(client: docker.DockerClient, options: dict[str, Any], name: str) -> Any:
    created = client.api.create_container(**options, name=name)
    client.api.start(created["Id"])
    return client.containers.get(created["Id"])


def _metric(client: docker.DockerClient, image: str, network: str, service: str, name: str) -> float:
    """A counter of a vLLM instance's /metrics, asked through its Service from another container."""
    text = _curl(client, image, network, f"http://{service}:8000/metrics")
    lines = [line for line in text.splitlines() if line.startswith(name) and not line.startswith("#")]
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines)


# A prompt of 100 words (about 350 of the tiny model's tokens; it takes 512): several KV blocks.
WORDS = "amber banks bright brown fox hex jolly jumps lazy near over quick quietly river seven skies under"
PROMPT = "Summarize the following notes. " + " ".join(WORDS.split()[i * 7 % 17] for i in range(100))


@pytest.mark.docker
@pytest.mark.e2e
def test_the_kv_store_starts_in_its_order_and_shares_its_cache_through_its_services(
    project: Project,
    kv_built: Any,
    router_built: Any,
    docker_client: docker.DockerClient,
    none_left: None,
    network: tuple[Any, str],
    tmp_path: Path,
) -> None:
    """The centralized KV store of the tiny model, every pod as the manifest says: each pod's init container
    runs first and holds it until the Services of the processes it starts after answer (the master's pod,
    which waits for nothing, started last, after 30 s in which nothing else may start); the store registers
    with the master by its Service's name and advertises its pod's address; a prompt asked of one instance
    is found in the store by the other; the router answers at the deployment's Service."""
    deployment = kv_blueprint(project).deployment("kv_store_centralized_mooncake")
    documents = kubernetes.objects(deployment)
    sources = {d["metadata"]["name"]: d["data"] for d in documents if d["kind"] == "ConfigMap"}
    units, services = kubernetes.unit_names(deployment), kubernetes.unit_services(deployment)
    workloads = {d["metadata"]["name"]: d for d in documents if d["kind"] == "Deployment"}
    net, subnet = network
    pods = {
        unit: Pod(
            name=f"{workload}-abc12",
            template=dict(checks.pod_templates(workloads[workload]))["node"],
            ip=f"{subnet}.{10 + n}",
            aliases=[services[unit]],
        )
        for n, (unit, workload) in enumerate(units.items())
    }
    assert kv_built.image in {p.template["spec"]["containers"][0]["image"] for p in pods.values()}
    files = tmp_path / "configmaps"
    inits: dict[str, Any] = {}
    mains: dict[str, Any] = {}
    try:
        for unit, pod in pods.items():  # the kubelet's part: init containers first, in every pod at once
            for n, options in enumerate(init_options(pod, net.name, docker_client.api, LABEL)):
                inits[unit] = _create(docker_client, options, f"{net.name}-{pod.name}-init-{n}")
        assert set(inits) == set(pods) - {"master"}, "every pod but the master's waits for another"
        time.sleep(30)
        for unit, init in inits.items():
            init.reload()
            assert init.status == "running", f"{unit} started before the master answered"
        master = pods["master"]
        mains["master"] = _create(
            docker_client,
            container_options(master, net.name, sources, docker_client.api, LABEL, files),
            f"{net.name}-{master.name}",
        )
        deadline = time.monotonic() + 900
        while len(mains) < len(pods) and time.monotonic() < deadline:
            for unit, init in inits.items():
                if unit in mains:
                    continue
                init.reload()
                if init.status == "running":
                    continue
                logs = init.logs().decode(errors="replace")
                assert init.attrs["State"]["ExitCode"] == 0, f"{unit}'s init container: {logs}"
                init.remove()
                options = container_options(pods[unit], net.name, sources, docker_client.api, LABEL, files)
                mains[unit] = _create(docker_client, options, f"{net.name}-{pods[unit].name}")
            time.sleep(3)
        assert set(mains) == set(pods), f"never started: {set(pods) - set(mains)}"
        _wait_healthy(list(mains.values()), mains["router"])
        # the store advertises its pod's address, and reached the master by its Service's name
        filled = mains["store"].exec_run(["cat", "/run/mooncake/store.json"]).output.decode()
        config = json.loads(filled)
        assert config["local_hostname"] == pods["store"].ip
        assert config["master_server_address"] == f"{services['master']}:50051"
        # one instance computes a prompt's KV blocks into the store; the other finds them there
        image = kv_built.image
        payload = json.dumps({"model": TINY, "prompt": PROMPT, "max_tokens": 4})
        first, second = services["instance-1"], services["instance-2"]
        asked = _curl(docker_client, image, net.name, f"http://{first}:8000/v1/completions", payload)
        tokens = json.loads(asked)["usage"]["prompt_tokens"]
        _curl(docker_client, image, net.name, f"http://{second}:8000/v1/completions", payload)
        hits = _metric(docker_client, image, net.name, second, "vllm:external_prefix_cache_hits_total")
        assert hits > 0, "the second instance found none of the first one's blocks in the store"
        # the deployment's entry point: the router, which names each instance by its Service
        entry = kubernetes.object_name(deployment)
        answer = _chat_through_service(docker_client, image, net.name, entry, 8000)
        assert answer.completion_tokens > 0
        print(f"KV store on the engine: {hits:.0f} of {tokens} prompt tokens found in the store by the other")
    finally:
        for container in [*inits.values(), *mains.values()]:
            with contextlib.suppress(docker.errors.NotFound):  # an init container removed once it ended
                container.remove(force=True, v=True)
