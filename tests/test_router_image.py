"""The PD router's image: vllm-router hash-locked in a small image of its own, tagged and labelled like the
factory's images, named by every pd_cluster deployment's router, and validated for real: it starts, its
health check passes, and it routes completions to two CPU servers of the tiny model. Then prefill/decode
for real on CPU: a prefill and a decode server of the tiny model joined by vLLM's ExampleConnector (KV
through shared storage, no GPU), behind the router in P/D mode, answering a chat with KV the decode
server loaded and did not compute. The two live tests share one pair of servers, each with its own router."""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import docker
import pytest
import requests
import yaml

from factory.base.errors import InputError
from factory.blueprint import plan_recipe
from factory.builder.builder import BuildResult
from factory.engine.connect import OWNER_LABEL
from factory.lock.router import lock_path, read_router_lock
from factory.plan.deployment import Deployment
from factory.plan.router import router_files, router_health, router_image
from factory.plan.runspec import RunSpec
from factory.project import Project
from factory.recipes.loader import load_tree
from factory.render import compose
from tests.conftest import FIXTURES, TINY, kv_blueprint

ROUTER_LABEL = {OWNER_LABEL: "test-router"}


def pd_deployment(project: Project) -> Deployment:
    """The pd_cluster deployment of the upstream-schema fixture (a prefill and a decode pool and a router)."""
    fixture = replace(project, tree=load_tree(FIXTURES / "upstream-schema"), lock=None)
    for loaded in fixture.tree.recipes.values():
        for blueprint in plan_recipe(fixture, loaded).images:
            for deployment in blueprint.deployments:
                if deployment.deploy_type == "pd_cluster":
                    return deployment
    raise AssertionError("the fixture has no pd_cluster deployment")


def router_service(deployment: Deployment) -> dict[str, Any]:
    role = next(role for role in deployment.roles if role.program == "vllm-router")
    services: dict[str, Any] = yaml.safe_load(compose.render(deployment, role))["services"]
    return services["router"]


def test_the_pd_router_compose_file_runs_the_factory_router_image(project: Project) -> None:
    """No image to name by hand: the router's file runs the locked router image (a setting may replace it)."""
    image = router_image(project)
    assert image is not None, "the project locks the router"
    service = router_service(pd_deployment(project))
    assert service["image"] == f"${{VLLM_ROUTER_IMAGE:-{image.reference}}}"
    assert image.reference == f"vllm-factory/vllm-router:{read_router_lock(project).version}"  # type: ignore[union-attr]


def test_the_pd_router_has_a_health_check_on_its_own_health_endpoint(project: Project) -> None:
    """compose's --wait waits for the router: it asks the router's /health where the router listens."""
    deployment = pd_deployment(project)
    service = router_service(deployment)
    test = service["healthcheck"]["test"]
    assert test[:2] == ["CMD", "curl"]
    assert test[-1] == "http://${ROUTER_HOST:-127.0.0.1}:${ROUTER_PORT:-8000}/health"
    # The address and port it asks are the ones the router's own command listens on.
    command = service["command"]
    assert command[command.index("--host") + 1] in test[-1]
    assert command[command.index("--port") + 1] in test[-1]
    role = next(role for role in deployment.roles if role.program == "vllm-router")
    start = compose.render(deployment, role).splitlines()[2]
    assert start == "# Start: docker compose -f router.compose.yaml up -d --wait"


def test_the_router_image_installs_exactly_the_locked_set(project: Project) -> None:
    lock = read_router_lock(project)
    assert lock is not None
    files = {file.path.name: file.content.decode() for file in router_files(project)}
    locked = files["requirements.txt"]
    assert f"vllm-router=={lock.version} \\" in locked
    pins = re.findall(r"^([a-z0-9._-]+)==", locked, re.MULTILINE)
    assert {"aiohttp", "fastapi", "uvicorn", "orjson", "setproctitle", "requests"} <= set(pins)
    assert locked.count("--hash=sha256:") >= len(pins), "every pin carries its hashes"
    dockerfile = files["Dockerfile"]
    assert (
        "--require-hashes --no-deps" in dockerfile and "-r /tmp/requirements/requirements.txt" in dockerfile
    )
    assert "ARG BASE_IMAGE=" in dockerfile and "FROM ${BASE_IMAGE}" in dockerfile
    assert 'ENTRYPOINT ["vllm-router"]' in dockerfile


def test_a_hand_edited_router_set_is_refused(project: Project, tmp_path: Path) -> None:
    folder = tmp_path / "lock"
    (folder / "router").mkdir(parents=True)
    for source in lock_path(project).parent.iterdir():
        (folder / "router" / source.name).write_bytes(source.read_bytes())
    lock = read_router_lock(project)
    assert lock is not None
    edited = folder / "router" / lock.requirements
    edited.write_text(edited.read_text().replace("aiohttp==", "aiohttp>="))
    copy = replace(project, lock_path=folder / "vllm.lock.json")
    with pytest.raises(InputError, match="not the file `factory lock` wrote"):
        router_files(copy)


@pytest.mark.docker
def test_the_router_image_is_tagged_and_labelled_like_the_factory_images(
    project: Project, router_built: BuildResult, docker_client: docker.DockerClient
) -> None:
    image = router_image(project)
    assert image is not None
    assert router_built.tags == [image.reference, image.immutable_reference]
    labels = docker_client.images.get(image.reference).labels
    assert labels["ai.vllm.factory.inputs-hash"] == image.inputs_hash == router_built.inputs_hash
    assert labels["ai.vllm.factory.router-version"] == image.lock.version
    assert labels["org.opencontainers.image.vendor"] == "vllm-image-factory"
    assert docker_client.images.get(image.immutable_reference).id == router_built.image_id


class Cluster:
    """Containers on one labelled network, each removed (with the network, unless it joined another
    cluster's) when the test or module that made the cluster ends."""

    def __init__(self, client: docker.DockerClient, network: Any = None) -> None:
        self.client = client
        self.joined = network is not None
        self.network = network or client.networks.create(
            f"factory-router-{uuid.uuid4().hex[:8]}", labels=ROUTER_LABEL
        )
        self.containers: list[Any] = []
        self.volumes: list[Any] = []

    def run(self, name: str, image: str, command: list[str], **options: Any) -> Any:
        container = self.client.containers.run(
            image,
            command,
            detach=True,
            name=f"{self.network.name}-{name}",
            labels=ROUTER_LABEL,
            network=self.network.name,
            **options,
        )
        self.containers.append(container)
        return container

    def url(self, name: str, port: int = 8000) -> str:
        """How the others reach a container on the network: by its name."""
        return f"http://{self.network.name}-{name}:{port}"

    def volume(self) -> str:
        created = self.client.volumes.create(labels=ROUTER_LABEL)
        self.volumes.append(created)
        return str(created.name)

    def remove(self) -> None:
        for container in self.containers:
            container.remove(force=True, v=True)
        for volume in self.volumes:
            volume.remove(force=True)
        if not self.joined:
            self.network.remove()


def tiny_server(cluster: Cluster, name: str, image: str, extra: list[str], **options: Any) -> Any:
    """A CPU server of the tiny model, as the image's own default command serves it, plus `extra`."""
    config = cluster.client.images.get(image).attrs["Config"]
    return cluster.run(name, image, [*config["Cmd"], "--port", "8000", *extra], shm_size="2g", **options)


def wait_for_health(container: Any, timeout_s: float = 900) -> None:
    """Until Docker's own health check (the image's HEALTHCHECK) says healthy; fails at once if it exits."""
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        container.reload()
        state = container.attrs["State"]
        if state["Status"] == "exited":
            raise AssertionError(
                f"{container.name} exited:\n{container.logs(tail=60).decode(errors='replace')}"
            )
        if state.get("Health", {}).get("Status") == "healthy":
            return
        time.sleep(2)
    raise AssertionError(f"{container.name} not healthy:\n{container.logs(tail=60).decode(errors='replace')}")


def published(container: Any, port: int = 8000) -> str:
    container.reload()
    return f"http://127.0.0.1:{container.ports[f'{port}/tcp'][0]['HostPort']}"


def completions_served(container: Any) -> int:
    """How many completions the server's access log shows it answered."""
    return container.logs().decode(errors="replace").count('"POST /v1/completions HTTP/1.1" 200')


def completions_since(servers: list[Any], before: list[int], answered: int) -> list[int]:
    """How many completions each server answered since `before`, once their logs show all `answered` (or
    after 30 s): a server's access log line reaches the engine's log a moment after its answer reaches the
    client, and read at once it missed the last answer here ([1, 2] for four, on a loaded machine)."""
    import time

    deadline = time.monotonic() + 30
    while True:
        now = [completions_served(server) - earlier for server, earlier in zip(servers, before, strict=True)]
        if sum(now) >= answered or time.monotonic() > deadline:
            return now
        time.sleep(0.5)


# vLLM's connector that passes KV through a shared folder (named SharedStorageConnector before 0.11): the one
# connector vLLM ships that needs no GPU and no RDMA. Each server saves the KV of the prompts it computes and
# loads what the folder holds for a prompt it is given.
KV_FOLDER = "/kv"
KV_TRANSFER = {
    "kv_connector": "ExampleConnector",
    "kv_role": "kv_both",
    "kv_connector_extra_config": {"shared_storage_path": KV_FOLDER},
}


@pytest.fixture(scope="module")
def servers(docker_client: docker.DockerClient, tiny_built: BuildResult) -> Iterator[Cluster]:
    """Two CPU servers of the tiny model (`server-1`, `server-2`) for both live tests, started once: each
    start takes 45 to 70 s here, and the two tests started two each. Both join KV through one shared folder
    (KV_TRANSFER), which prefill/decode needs; round robin is indifferent to it, as the KV-store routers'
    workers carry a KV connector too. Each test runs its own router on the servers' network, and reads
    what the servers did as the difference from before it, so neither depends on the other or its order."""
    cluster = Cluster(docker_client)
    try:
        folder = cluster.volume()
        # A new volume is root's; the servers run as the image's non-root user (issue 48), as a pod's
        # volume would be given to it (fsGroup): the folder is handed to that user first.
        user = docker_client.images.get(tiny_built.image).attrs["Config"]["User"]
        docker_client.containers.run(
            tiny_built.image, [user, KV_FOLDER], entrypoint=["chown"], user="0", remove=True,
            volumes={folder: {"bind": KV_FOLDER, "mode": "rw"}}, labels=ROUTER_LABEL,
        )  # fmt: skip
        kv = ["--kv-transfer-config", json.dumps(KV_TRANSFER)]
        started = [
            tiny_server(
                cluster, name, tiny_built.image, kv, volumes={folder: {"bind": KV_FOLDER, "mode": "rw"}}
            )
            for name in ("server-1", "server-2")
        ]
        for server in started:
            wait_for_health(server)
        yield cluster
    finally:
        cluster.remove()


@pytest.fixture
def cluster(docker_client: docker.DockerClient, servers: Cluster) -> Iterator[Cluster]:
    """The test's own containers (its router) on the servers' network, removed when the test ends."""
    found = Cluster(docker_client, servers.network)
    try:
        yield found
    finally:
        found.remove()


@pytest.mark.docker
@pytest.mark.e2e
def test_the_router_starts_answers_health_and_routes_completions_to_two_cpu_servers(
    no_leftovers: None, project: Project, router_built: BuildResult, servers: Cluster, cluster: Cluster
) -> None:
    health = router_health(project)
    assert health.port == 30000, "vllm-router 0.1.17 listens on 30000 when no --port is given"
    before = [completions_served(server) for server in servers.containers]
    # The router binds only once its workers are healthy and gives up after 600 s: it starts after them
    # (the servers fixture waits for their health).
    router = cluster.run(
        "router",
        router_built.image,
        [
            "--worker-urls",
            servers.url("server-1"),
            servers.url("server-2"),
            "--policy",
            "round_robin",
            "--host",
            "0.0.0.0",
            "--worker-startup-check-interval",
            "2",
        ],  # no --port: vllm-router's own default, where the image's HEALTHCHECK and EXPOSE point
        ports={f"{health.port}/tcp": ("127.0.0.1", None)},
    )
    wait_for_health(router, 180)  # the image's own HEALTHCHECK: curl on the router's /health
    url = published(router, health.port)
    assert requests.get(f"{url}{health.path}", timeout=10).status_code == 200
    for _ in range(4):
        response = requests.post(
            f"{url}/v1/completions",
            json={"model": TINY, "prompt": "The router sends this to", "max_tokens": 4, "temperature": 0},
            timeout=300,
        )
        assert response.status_code == 200, response.text
        assert response.json()["choices"][0]["text"]
    served = completions_since(servers.containers, before, 4)
    assert served == [2, 2], f"round robin over both servers: {served}"


def metric(container: Any, name: str, *, unset: float | None = None, **labels: str) -> float:
    """One sample of the server's Prometheus metrics, read inside its container. `unset`: the value of a
    counter the server has not exported yet (none of its requests counted in it), where that is allowed."""
    result = container.exec_run(["curl", "-fsS", "http://127.0.0.1:8000/metrics"])
    assert result.exit_code == 0, result.output
    wanted = [f'{key}="{value}"' for key, value in labels.items()]
    for line in result.output.decode().splitlines():
        if line.startswith(name + "{") and all(label in line for label in wanted):
            return float(line.rsplit(" ", 1)[1])
    if unset is not None:
        return unset
    raise AssertionError(f"no {name} {labels} in the metrics of {container.name}")


# What the prefill/decode test reads of each server, as (server, metric, labels): counters, read before and
# after its one request, the difference being what that request did.
PD_COUNTERS = {
    "prefill generated": ("prefill", "vllm:generation_tokens_total", {}),
    "prefill computed": ("prefill", "vllm:prompt_tokens_by_source_total", {"source": "local_compute"}),
    "decode loaded": ("decode", "vllm:prompt_tokens_by_source_total", {"source": "external_kv_transfer"}),
    "decode computed": ("decode", "vllm:prompt_tokens_by_source_total", {"source": "local_compute"}),
    "decode generated": ("decode", "vllm:generation_tokens_total", {}),
}


@pytest.mark.docker
@pytest.mark.e2e
def test_prefill_and_decode_on_cpu_behind_the_router_decode_loads_kv_it_did_not_compute(
    no_leftovers: None,
    project: Project,
    router_built: BuildResult,
    servers: Cluster,
    cluster: Cluster,
) -> None:
    port = router_health(project).port
    # The shared servers (both configured for KV transfer): one is the prefill server, the other decode.
    roles = dict(zip(("prefill", "decode"), servers.containers, strict=True))
    decode = roles["decode"]

    def counters(unset: float | None = None) -> dict[str, float]:
        return {
            what: metric(roles[role], name, unset=unset, **labels)
            for what, (role, name, labels) in PD_COUNTERS.items()
        }

    # Before: a counter not exported yet has counted nothing; after, every one must be there.
    before, decode_log_before = counters(unset=0.0), len(decode.logs())
    # The router's P/D command as the pd_cluster files write it, over these two servers.
    router = cluster.run(
        "router",
        router_built.image,
        [
            "--policy",
            "round_robin",
            "--vllm-pd-disaggregation",
            "--prefill",
            servers.url("server-1"),
            "--decode",
            servers.url("server-2"),
            "--host",
            "0.0.0.0",
            "--worker-startup-check-interval",
            "2",
        ],  # no --port: the router's own default, where the image's HEALTHCHECK asks
        ports={f"{port}/tcp": ("127.0.0.1", None)},
    )
    wait_for_health(router, 180)
    # A prompt longer than one KV block (the connector moves whole blocks), well inside --max-model-len 512.
    prompt = " ".join(f"word{index}" for index in range(40))
    response = requests.post(
        f"{published(router, port)}/v1/chat/completions",
        json={
            "model": TINY,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": 8,
            "temperature": 0,
        },
        timeout=300,
    )
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["usage"]["completion_tokens"] == 8 and answer["choices"][0]["message"]["content"]
    prompt_tokens = answer["usage"]["prompt_tokens"]
    # What this one request did on each server (the servers may have served the other test before).
    did = {what: value - before[what] for what, value in counters().items()}
    # The prefill server computed the prompt and one token (the router asks it for max_tokens=1) ...
    assert did["prefill generated"] == 1
    assert did["prefill computed"] == prompt_tokens
    # ... and the decode server took the prompt's KV from it instead of computing it: whole blocks loaded
    # from the shared folder, only the remainder computed, and the eight tokens generated there.
    loaded, computed = did["decode loaded"], did["decode computed"]
    assert loaded > 0 and loaded + computed == prompt_tokens, (loaded, computed, prompt_tokens)
    assert did["decode generated"] == 8
    logs = decode.logs()[decode_log_before:].decode(errors="replace")  # what it logged for this request
    assert "External Cache Hit!" in logs and f"Inject KV cache of {int(loaded)} tokens" in logs, logs[-3000:]


def test_without_a_locked_router_the_router_file_still_parses_and_asks_for_an_image(
    project: Project, tmp_path: Path
) -> None:
    """Before `factory lock` locked the router, the file names the setting, with why, and Compose reads it."""
    import subprocess

    from factory.base.tools import compose_binary

    unlocked = replace(project, lock_path=tmp_path / "lock" / "vllm.lock.json")
    assert router_image(unlocked) is None
    deployment = pd_deployment(unlocked)
    role = next(role for role in deployment.roles if role.program == "vllm-router")
    path = tmp_path / "router.compose.yaml"
    path.write_text(compose.render(deployment, role))
    env = {"PATH": "/usr/bin:/bin", "PREFILL_NODE_1": "10.0.0.1", "DECODE_NODE_1": "10.0.0.2"}
    command = [str(compose_binary()), "-f", str(path), "config", "--format", "json"]
    missing = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
    assert missing.returncode != 0 and "set VLLM_ROUTER_IMAGE: the PD router's image" in missing.stderr
    named = subprocess.run(
        command,
        capture_output=True,
        text=True,
        check=False,
        env={**env, "VLLM_ROUTER_IMAGE": "mirror/router:1"},
    )
    assert named.returncode == 0, named.stderr
    assert '"image": "mirror/router:1"' in named.stdout


# vllm-router's own parser, run inside the locked router image: one line per command, "ok" or its error.
PARSE = """
import contextlib, io, json, sys
from vllm_router.launch_router import parse_router_args
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            parse_router_args(argv[1:])
        print("ok")
    except SystemExit:
        print(err.getvalue().strip().splitlines()[-1])
"""


def _runnable(argv: list[str]) -> list[str]:
    """Placeholders as a user fills them: hosts in URLs, the router's own address and port."""
    values = {"$ROUTER_HOST": "0.0.0.0", "$ROUTER_PORT": "30080"}
    return [
        values.get(t, re.sub(r"\$\{?([A-Z0-9_]+)\}?", lambda m: m[1].lower().replace("_", "-"), t))
        for t in argv
    ]


def _parsed(image: str, docker_client: docker.DockerClient, argvs: list[list[str]]) -> list[str]:
    printed = docker_client.containers.run(
        image,
        entrypoint=["python", "-c", PARSE, json.dumps([_runnable(argv) for argv in argvs])],
        remove=True,
        labels={OWNER_LABEL: "test-router-args"},
        network_disabled=True,
    )
    return printed.decode().splitlines()


def test_vllm_router_parses_every_router_command_the_factory_renders(
    project: Project,
    router_built: BuildResult,
    docker_client: docker.DockerClient,
    request: pytest.FixtureRequest,
) -> None:
    """Every distinct router command the factory renders (prefill/decode and KV-store routers: the project's,
    the fixture's, and the shared corpus's where it is here) is accepted by the locked vllm-router's own
    argument parser. The site's KV-store router command is not: vllm-router 0.1.17 has no `--backend-url`
    (its backends are `--worker-urls URL ...`), which is why the factory rewrites it by a recorded rule."""
    from factory.synthesis.kv_store import router_argv

    commands = {tuple(role.argv) for role in pd_deployment(project).roles if role.program == "vllm-router"}
    kv = kv_blueprint(project).deployment("kv_store_centralized_mooncake")
    commands |= {tuple(role.argv) for role in kv.roles if role.program == "vllm-router"}
    if os.environ.get("FACTORY_UPSTREAM_RECIPES"):
        for line in request.getfixturevalue("upstream_renderings"):
            data = json.loads(line)
            if data.get("deploy_type") == "pd_cluster":
                commands.add(tuple(data["roles"]["router"]["argv"]))
            elif data.get("deploy_type") == "kv_store_lb" and data.get("router_argv"):
                commands.add(tuple(data["router_argv"]))
    argvs = sorted(list(c) for c in commands)
    verdicts = _parsed(router_built.image, docker_client, argvs)
    refused = [(argv, verdict) for argv, verdict in zip(argvs, verdicts, strict=True) if verdict != "ok"]
    assert not refused, refused[:3]
    assert any("--worker-urls" in argv for argv in argvs), "the KV-store routers are among them"
    print(f"vllm-router parsed {len(argvs)} distinct router commands")
    site = list(router_argv(project.tree.kv_stores["kv_store_centralized_mooncake"], 2))  # the site's own
    (site_said,) = _parsed(router_built.image, docker_client, [site])
    assert "unrecognized arguments: --backend-url" in site_said, site_said


@pytest.mark.parametrize("field", sorted(RunSpec.model_fields))
def test_the_routers_compose_file_prints_or_lists_every_spec_field(project: Project, field: str) -> None:
    """The router's file is printed by the same template as every vLLM process's: a change to any field of
    its spec changes the file, unless compose lists the field as one it cannot express (with why). (Its own
    template printed image, command, labels, network, health check and restart only: environment, volumes,
    capabilities and /dev/shm given to the router were dropped without a word.)"""
    from tests.test_run_spec import MUTATIONS

    deployment = pd_deployment(project)
    index = next(i for i, group in enumerate(deployment.run) if group.spec.program == "vllm-router")
    group = deployment.run[index]
    change = "vllm" if field == "program" else MUTATIONS[field](group.spec)  # the router's is vllm-router
    changed = group.spec.model_copy(update={field: change})
    assert changed != group.spec
    assert group.spec.network == "host"
    run = (*deployment.run[:index], group.model_copy(update={"spec": changed}), *deployment.run[index + 1 :])
    role = next(role for role in deployment.roles if role.program == "vllm-router")
    before = compose.render(deployment, role)
    after = compose.render(deployment.model_copy(update={"run": run}), role)
    cannot = {**compose.CANNOT_EXPRESS, **compose.CANNOT_EXPRESS_ON_HOST_NETWORK}
    if field in cannot:
        assert before == after, f"compose lists {field} as not expressible, but prints it"
    else:
        assert before != after, f"the router's compose file does not print its spec's {field}"


def test_the_router_waits_as_long_as_its_pools_start_and_its_start_budget_is_its_own(
    project: Project,
) -> None:
    """vllm-router exits when its workers are not healthy within --worker-startup-timeout-secs (600 s unless
    set): the factory sets it to the pools' start budget, a recorded deviation; the router's health check
    allows that wait plus the router's own start (the catalog's), not the model's budget alone."""
    deployment = pd_deployment(project)
    router = next(role for role in deployment.roles if role.program == "vllm-router")
    pools = deployment.spec(deployment.roles[0])
    assert pools.probe is not None
    words = router.words
    wait = int(words[words.index("--worker-startup-timeout-secs") + 1])
    assert wait == pools.probe.start_period_s
    spec = deployment.spec(router)
    assert spec.probe is not None
    assert spec.probe.start_period_s == wait + project.catalog.router.start_period_s
    recorded = next(d for d in deployment.deviations if d.flag == "--worker-startup-timeout-secs")
    assert [edit.process for edit in recorded.edits] == ["roles.router.argv"]
    service = router_service(deployment)
    assert service["healthcheck"]["start_period"] == f"{spec.probe.start_period_s}s"
