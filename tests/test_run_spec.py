"""One run spec: every format prints the same spec and decides no run option of its own.

The compose files, `factory show`'s `docker run` and the container validation starts are each a rendering of
a deployment's run spec. A change to any field reaches every format that can express it (and each format
lists, with the reason, the fields it cannot); validation starts the container the compose file ships."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker
import pytest
import yaml

from factory.base.errors import InputError
from factory.base.tools import compose_binary
from factory.blueprint import plan_recipe
from factory.blueprint.select import select
from factory.catalog.schema import GpuRequest, Liveness, PodRequests, Secret, Volume, Writable
from factory.plan.deployment import Deployment
from factory.plan.runspec import ConfigMount, FromIndex, RunSpec
from factory.project import Project, load_project
from factory.render import compose, docker_run, kubernetes
from factory.report.show import docker_run as show_docker_run
from factory.validate import container
from tests.conftest import ROOT, TINY, blueprint_of, kv_blueprint, recipes_tree, small_recipe

# One change per field of the run spec: a new capability, one more environment variable, ...
MUTATIONS: dict[str, Callable[[RunSpec], Any]] = {
    "image": lambda spec: "registry.example/other:tag",
    "program": lambda spec: "vllm-router",
    "args": lambda spec: (*spec.args, "--seed", "7"),
    "env": lambda spec: (*spec.env, ("EXTRA_SETTING", "1")),
    "secrets": lambda spec: (*spec.secrets, Secret(env="OTHER_TOKEN", what="another token")),
    "gpu_request": lambda spec: GpuRequest(driver="nvidia", capabilities=["gpu"]),
    "gpus": lambda spec: spec.gpus + 3,
    "platform": lambda spec: "linux/arm64" if spec.platform == "linux/amd64" else "linux/amd64",
    "devices": lambda spec: (*spec.devices, "/dev/infiniband"),
    "groups": lambda spec: (*spec.groups, "render"),
    "security_opt": lambda spec: (*spec.security_opt, "apparmor=unconfined"),
    "capabilities": lambda spec: (*spec.capabilities, "SYS_NICE"),
    "shm_size": lambda spec: "3g",
    "ulimits": lambda spec: (*spec.ulimits, ("nofile", 65536)),
    "port": lambda spec: spec.port + 1,
    "network": lambda spec: "host" if spec.network == "published" else "published",
    "probe": lambda spec: spec.probe.model_copy(update={"path": "/ping"}) if spec.probe else None,
    "volumes": lambda spec: (
        *spec.volumes,
        Volume(name="x", target="/x", setting="X_DIR", default="/x", what="x"),
    ),
    "labels": lambda spec: (*spec.labels, ("team", "serving")),
    "served_names": lambda spec: ("another-name",),
    "requests": lambda spec: PodRequests(cpu=7, memory_gib=9),
    "cache_gb": lambda spec: 42.0,
    "gpu_resource": lambda spec: "example.com/gpu",
    "restart": lambda spec: "on-failure",
    "publish_address": lambda spec: "0.0.0.0",
    "entrypoint": lambda spec: (*spec.entrypoint, "factory-fill-config", "/etc/x.json", "/run/x.json"),
    "configs": lambda spec: (
        *spec.configs,
        ConfigMount(file="x.json", template="/etc/x.json", filled="/run/x.json", content="{}"),
    ),
    "after": lambda spec: (*spec.after, "store"),
    "rpc_port": lambda spec: (spec.rpc_port or 50051) + 1,
    "cache_basis": lambda spec: "another basis",
    "user": lambda spec: spec.user.model_copy(update={"uid": spec.user.uid + 1}),
    "read_only_root": lambda spec: not spec.read_only_root,
    "writable": lambda spec: (*spec.writable, Writable(name="x", target="/x", what="x", size_gib=2)),
    "liveness": lambda spec: Liveness(interval_s=7, timeout_s=3, failures=2),
    "disk_gib": lambda spec: spec.disk_gib + 5,
}


def _with_spec(deployment: Deployment, spec: RunSpec) -> Deployment:
    group = deployment.run[0].model_copy(update={"spec": spec})
    return deployment.model_copy(update={"run": (group, *deployment.run[1:])})


def _compose(deployment: Deployment) -> str:
    return compose.render(deployment, deployment.roles[0])


def _docker_run(deployment: Deployment) -> str:
    return show_docker_run(deployment, deployment.roles[0])


def _validation(deployment: Deployment) -> str:
    spec = deployment.spec(deployment.roles[0])
    return repr(container.run_options(spec, {}, Path("/cache"), {"run": "1"}))


def _kubernetes(deployment: Deployment) -> str:
    return kubernetes.render(deployment)


FORMATS: dict[str, tuple[Callable[[Deployment], str], dict[str, str]]] = {
    "compose": (_compose, compose.CANNOT_EXPRESS),
    "docker run": (_docker_run, docker_run.CANNOT_EXPRESS),
    "validation": (_validation, container.CANNOT_EXPRESS),
    "kubernetes": (_kubernetes, kubernetes.CANNOT_EXPRESS),
}


def tiny_single(project: Project) -> Deployment:
    return blueprint_of(project, TINY, "cpu").deployment("single_node_tp")


def kv_store(project: Project) -> Deployment:
    return kv_blueprint(project).deployment("kv_store_centralized_mooncake")


def test_every_field_of_the_run_spec_has_a_mutation() -> None:
    assert set(MUTATIONS) == set(RunSpec.model_fields)


@pytest.mark.parametrize("field", sorted(MUTATIONS))
@pytest.mark.parametrize("format_name", sorted(FORMATS))
def test_a_change_to_the_spec_reaches_every_format_that_can_express_it(
    project: Project, field: str, format_name: str
) -> None:
    """Adding a capability, an environment variable, ... changes every format at once; a field a format
    does not print is in that format's list of what it cannot express (and so the list stays complete)."""
    render, cannot = FORMATS[format_name]
    # A start order names other processes of the deployment: the tiny model's KV store (its master, made
    # to wait for its store: the formats print the order, they do not judge it).
    deployment = kv_store(project) if field == "after" else tiny_single(project)
    spec = deployment.run[0].spec
    changed = spec.model_copy(update={field: MUTATIONS[field](spec)})
    assert changed != spec
    before, after = render(deployment), render(_with_spec(deployment, changed))
    if field in cannot:
        assert before == after, f"{format_name} lists {field} as not expressible, but prints it"
        assert cannot[field], "each field a format cannot express says why"
    else:
        assert before != after, f"{format_name} does not print the run spec's {field}"


def test_formats_decide_no_run_option_of_their_own(project: Project) -> None:
    """The compose file holds exactly what the spec says: shared memory, capabilities, the user, a read-only
    root, ulimits, the probe."""
    deployment = tiny_single(project)
    spec = deployment.spec(deployment.roles[0])
    service = yaml.safe_load(_compose(deployment))["services"]["vllm"]
    assert service["shm_size"] == spec.shm_size == "2g"
    assert "ipc" not in service, "a /dev/shm size, not the host's IPC namespace: every format can say it"
    # No capability: the process runs as the image's non-root user, for whom one added is not effective.
    assert "cap_add" not in service and spec.capabilities == ()
    assert service["user"] == spec.user.ids == "10001:10001" and service["read_only"] is True
    assert service["ulimits"] == dict(spec.ulimits) and "memlock" not in service["ulimits"]
    assert spec.probe is not None
    assert service["healthcheck"]["test"] == ["CMD", *spec.probe.command("127.0.0.1")]
    assert service["healthcheck"]["start_period"] == f"{spec.probe.start_period_s}s"


def test_one_worker_spec_serves_every_rank(project: Project) -> None:
    """A multi-node deployment's workers share one spec whose rank values are functions of the node index:
    evaluated at each index, it gives that node's command exactly."""
    blueprint = select(project, "moonshotai/Kimi-Linear-48B-A3B-Instruct", "h200")[0]
    with_nodes = {d.strategy: d for d in blueprint.deployments}
    dep = with_nodes["multi_node_dep"]
    workers = next(group for group in dep.run if "worker-1" in group.names)
    template = workers.spec
    assert template.is_template
    rank_values = [arg for arg in template.args if isinstance(arg, FromIndex)]
    assert rank_values == [FromIndex(times=8)], "--data-parallel-start-rank = index x the local DP size"
    for role in dep.roles[1:]:
        assert dep.spec(role).argv == role.words
    # On 4 nodes, one spec serves the three workers: ranks 8, 16 and 24.
    loaded = project.tree.recipe("moonshotai/Kimi-Linear-48B-A3B-Instruct")
    four = next(
        d
        for bp in plan_recipe(project, loaded, nodes=4).images
        if bp.image.hardware == "h200"
        for d in bp.deployments
        if d.strategy == "multi_node_dep"
    )
    groups = [group for group in four.run if group.names == ("worker-1", "worker-2", "worker-3")]
    assert len(groups) == 1 and groups[0].indices == (1, 2, 3)
    starts = [four.spec(role).argv for role in four.roles[1:]]
    assert [args[args.index("--data-parallel-start-rank") + 1] for args in starts] == ["8", "16", "24"]


def test_the_dp_start_rank_is_the_local_dp_size_times_the_index_not_the_gpus_per_node(tmp_path: Path) -> None:
    """TP 2 x local DP 4 on 8-GPU nodes: node i starts at rank 4i. A multiplier taken from the GPUs a pod
    has (8) would give 8 and 16, ranks another node holds; the project's recipes cannot show it (their
    DP deployments run TP 1, where both are 8), so a recipe here overrides the sizes. Synthesis writes the
    rank typed: the spec's rule is the one it decided, not one worked out again from the numbers."""
    override = {"vllm_args": ["--tensor-parallel-size", "2", "--data-parallel-size-local", "4"]}
    recipe = small_recipe(
        compatible_strategies=["single_node_tp", "multi_node_dep"],
        strategy_overrides={"multi_node_dep": override},
    )
    tree = recipes_tree(tmp_path / "recipes", {"acme/Small-8B": recipe})
    project = load_project(ROOT, tree, tmp_path / "out")
    four = next(
        d
        for bp in plan_recipe(project, project.tree.recipe("acme/Small-8B"), nodes=4).images
        if bp.image.hardware == "h200"
        for d in bp.deployments
        if d.strategy == "multi_node_dep"
    )
    workers = next(group for group in four.run if "worker-1" in group.names)
    assert workers.names == ("worker-1", "worker-2", "worker-3")
    start = workers.spec.args[workers.spec.args.index("--data-parallel-start-rank") + 1]
    assert start == FromIndex(times=4)
    assert [four.spec(role).argv[four.spec(role).argv.index("--data-parallel-start-rank") + 1]
            for role in four.roles[1:]] == ["4", "8", "12"]  # fmt: skip
    assert workers.spec.gpus == 8, "TP 2 x 4 local DP ranks"


def test_the_plan_holds_no_compose_names_or_syntax() -> None:
    """A format's file layout and spelling live with the format: nothing under plan/ knows compose."""
    for path in sorted((ROOT / "factory" / "plan").glob("*.py")):
        text = path.read_text()
        for word in ("compose.yaml", "project_name", ".env.example", "network_mode", "docker compose"):
            assert word not in text, f"{path.name} holds {word!r}"
        # compose's spelling of a setting (${NAME:-default}, ${NAME:?why}) is compose's
        assert not re.search(r"\$\{[A-Z_]+:[-?]", text), f"{path.name} writes a compose variable"


def test_an_omni_port_is_published_and_health_checked_there(tmp_path: Path) -> None:
    recipe = small_recipe(
        meta={"title": "Pics", "slug": "pics", "hardware": {}, "tasks": ["omni"]},
        omni={"tasks": ["t2i"], "port": 9000},
    )
    tree = recipes_tree(tmp_path / "recipes", {"acme/Pics": recipe})
    project = load_project(ROOT, tree, tmp_path / "out")
    blueprint = select(project, "acme/Pics", "h200")[0]
    deployment = blueprint.deployments[0]
    spec = deployment.spec(deployment.roles[0])
    assert spec.port == 9000
    service = yaml.safe_load(_compose(deployment))["services"]["vllm"]
    assert service["ports"] == ["${BIND_ADDRESS:-127.0.0.1}:${API_PORT:-9000}:9000"]
    assert service["healthcheck"]["test"][-1] == "http://127.0.0.1:9000/health"
    assert '-p "${BIND_ADDRESS:-127.0.0.1}:${API_PORT:-9000}:9000"' in _docker_run(deployment)
    options = container.run_options(spec, {}, tmp_path, {})
    assert options["ports"] == {"9000/tcp": ("127.0.0.1", None)}
    assert options["healthcheck"]["test"][-1] == "http://127.0.0.1:9000/health"


@pytest.mark.parametrize(
    ("flags", "port"),
    [
        (["--port", "9000"], 9000),
        (["--port=9000"], 9000),  # argparse reads both spellings
        (["--port", "+8080"], 8080),  # int("+8080"): vLLM listens on 8080
        (["--port", "9000", "--port=9001"], 9001),  # a flag given twice: the last wins, as in argparse
    ],
)
def test_the_port_vllm_listens_on_is_the_port_every_format_publishes_and_probes(
    tmp_path: Path, flags: list[str], port: int
) -> None:
    base = {**small_recipe()["model"], "base_args": ["--trust-remote-code", *flags]}
    tree = recipes_tree(tmp_path / "recipes", {"acme/Small-8B": small_recipe(model=base)})
    project = load_project(ROOT, tree, tmp_path / "out")
    blueprint = select(project, "acme/Small-8B", "h200")[0]
    deployment = next(d for d in blueprint.deployments if d.deploy_type == "single_node")
    spec = deployment.spec(deployment.roles[0])
    assert spec.port == port
    service = yaml.safe_load(_compose(deployment))["services"]["vllm"]
    assert service["ports"] == [f"${{BIND_ADDRESS:-127.0.0.1}}:${{API_PORT:-{port}}}:{port}"]
    assert service["healthcheck"]["test"][-1] == f"http://127.0.0.1:{port}/health"
    options = container.run_options(spec, {}, tmp_path, {})
    assert options["ports"] == {f"{port}/tcp": ("127.0.0.1", None)}
    pod = next(d for d in kubernetes.objects(deployment) if d["kind"] == "Deployment")
    vllm = pod["spec"]["template"]["spec"]["containers"][0]
    assert vllm["ports"] == [{"name": "http", "containerPort": port}]
    # `docker run IMAGE` serves this command: the image's own EXPOSE and HEALTHCHECK follow its port.
    health = blueprint.image.health
    assert health is not None and health.port == port
    assert health.check[-1] == f"http://127.0.0.1:{port}/health"


@pytest.mark.parametrize(
    ("flags", "names"),
    [
        ([], ("acme/Small-8B",)),  # vLLM's default: the model argument
        (["--served-model-name", "small", "small-v2"], ("small", "small-v2")),  # nargs="+"
        (["--served-model-name=small"], ("small",)),
        (["--served-model-name", "a", "--served-model-name", "b"], ("b",)),  # the last wins
    ],
)
def test_the_name_validation_asks_for_is_the_one_the_server_answers_to(
    tmp_path: Path, flags: list[str], names: tuple[str, ...]
) -> None:
    """A recipe that sets --served-model-name (dots-studio/dots3-note-prev upstream) is asked by that name:
    asked by its model id, its own /v1/models and chat probes would fail."""
    base = {**small_recipe()["model"], "base_args": ["--trust-remote-code", *flags]}
    tree = recipes_tree(tmp_path / "recipes", {"acme/Small-8B": small_recipe(model=base)})
    project = load_project(ROOT, tree, tmp_path / "out")
    blueprint = select(project, "acme/Small-8B", "h200")[0]
    deployment = next(d for d in blueprint.deployments if d.deploy_type == "single_node")
    assert deployment.spec(deployment.roles[0]).served_names == names


def test_a_digit_int_refuses_is_no_crash(tmp_path: Path) -> None:
    """`²` passes str.isdigit() and int() refuses it, and so does vLLM: the recipe is refused by field and
    value as vLLM would refuse the command (issue 43: counts read as vLLM reads them), not a crash."""
    base = {**small_recipe()["model"], "base_args": ["--pipeline-parallel-size", "\u00b2"]}
    tree = recipes_tree(tmp_path / "recipes", {"acme/Small-8B": small_recipe(model=base)})
    project = load_project(ROOT, tree, tmp_path / "out")
    with pytest.raises(InputError) as refused:
        select(project, "acme/Small-8B", "h200")
    said = str(refused.value)
    assert "model.base_args[0]" in said and "not a count for --pipeline-parallel-size" in said, said


def test_validation_lists_what_it_changes_with_why() -> None:
    fields = {difference.field for difference in container.DIFFERENCES}
    assert fields == {"port", "volumes", "labels", "network"}
    assert all(difference.why and difference.what for difference in container.DIFFERENCES)
    assert fields <= set(RunSpec.model_fields)


# --- the real thing: both containers started on the engine and inspected --------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _inspected(attrs: dict[str, Any]) -> dict[str, Any]:
    """What a user compares between two containers of one deployment, as the engine reports it."""
    config, host = attrs["Config"], attrs["HostConfig"]
    return {
        "command": config["Cmd"],
        "entrypoint": config["Entrypoint"],
        "image": config["Image"],
        "environment": sorted(config["Env"]),
        "ipc": host["IpcMode"],
        "shm": host["ShmSize"],
        "ulimits": host["Ulimits"],
        "devices": host["Devices"],
        "device requests": host["DeviceRequests"],
        "groups": host["GroupAdd"],
        # compose spells a capability as the kernel does (CAP_IPC_LOCK), the SDK as given: one capability
        "capabilities": [name.removeprefix("CAP_") for name in host["CapAdd"] or []],
        "security options": host["SecurityOpt"],
        "user": config["User"],
        "read-only root": host["ReadonlyRootfs"],
        "tmpfs": host["Tmpfs"],
        "mount targets": sorted(mount["Destination"] for mount in attrs["Mounts"]),
        "health check": config["Healthcheck"],
        "exposed port": sorted(config.get("ExposedPorts") or {}),
        "published to": sorted(
            binding["HostIp"] for bindings in (host["PortBindings"] or {}).values() for binding in bindings
        ),
    }


@pytest.mark.docker
def test_validation_starts_the_container_the_compose_file_ships(
    project: Project, tiny_built: Any, docker_client: docker.DockerClient, tmp_path: Path, no_leftovers: None
) -> None:
    deployment = tiny_single(project)
    spec = deployment.spec(deployment.roles[0])
    compose_file = ROOT / compose.path(deployment, deployment.roles[0])
    project_name = f"factory-test-spec-{uuid.uuid4().hex[:8]}"
    # Settings as a user's shell gives them to compose, and as validation reads them: the same environment.
    env = {**os.environ, "HF_CACHE": str(tmp_path / "hf"), "API_PORT": str(_free_port())}
    run = [str(compose_binary()), "-f", str(compose_file), "-p", project_name]
    try:
        result = subprocess.run([*run, "up", "-d"], capture_output=True, text=True, env=env, timeout=300)
        assert result.returncode == 0, result.stderr
        shipped = docker_client.containers.list(
            filters={"label": f"com.docker.compose.project={project_name}"}
        )
        assert len(shipped) == 1
        with container.running(spec, uuid.uuid4().hex[:12], tmp_path / "cache") as started:
            validated = started.container.get_wrapped_container()
            validated.reload()
            ours, theirs = _inspected(validated.attrs), _inspected(shipped[0].attrs)
    finally:
        subprocess.run([*run, "down", "--timeout", "5"], capture_output=True, env=env, timeout=300)
    assert ours == theirs, {key: (ours[key], theirs[key]) for key in ours if ours[key] != theirs[key]}
    assert ours["shm"] == 2 * 1024**3 and ours["capabilities"] == []
    assert ours["user"] == "10001:10001" and ours["read-only root"] is True
    assert sorted(ours["tmpfs"]) == ["/home/vllm", "/tmp"]
    assert ours["published to"] == ["127.0.0.1"]
    # The listed differences are the only ones: the cache's source, the host port, the labels.
    assert {d.field for d in container.DIFFERENCES} >= {"volumes", "port", "labels"}


@pytest.mark.docker
@pytest.mark.e2e
def test_a_model_served_under_a_name_of_its_own_is_asked_for_by_that_name(
    project: Project, tiny_built: Any, no_leftovers: None, tmp_path: Path
) -> None:
    """The tiny model with a `--served-model-name` of the recipe's own (as dots-studio/dots3-note-prev sets
    one upstream), served for real on the CPU: the plan says the server answers to that name, and validation
    asks /v1/models and a chat completion for it, and both pass. (Asked by the model's id, they would fail:
    the server answers only to the names it is given.)"""
    from factory.validate.runner import validate_image

    tree = tmp_path / "recipes"
    shutil.copytree(ROOT / "recipes", tree)  # the tiny recipe, its bundled model, the project's lock
    path = tree / "models" / "factory" / "tiny-random-llama.yaml"
    data = yaml.safe_load(path.read_text())
    data["model"]["base_args"] = [*data["model"].get("base_args", []), "--served-model-name", "tiny-chat"]
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    named = load_project(ROOT, tree, tmp_path / "out", lock=project.lock_path)
    blueprint = blueprint_of(named, TINY, "cpu")
    deployment = blueprint.deployment("single_node_tp")
    assert deployment.spec(deployment.roles[0]).served_names == ("tiny-chat",)
    # Only the command differs from the image built for the project: that image serves it.
    assert blueprint.image.reference == blueprint_of(project, TINY, "cpu").image.reference
    report = validate_image(blueprint, tmp_path / "reports")
    cases = {case.name: case for case in report.cases}
    assert cases["live:models"].status == "passed", cases["live:models"].detail
    assert "tiny-chat" in cases["live:models"].detail
    assert TINY not in cases["live:models"].detail, "the server answers to the recipe's name only"
    assert cases["live:chat"].status == "passed", cases["live:chat"].detail


def test_dots3_note_prev_upstream_is_asked_for_by_the_name_it_serves(tmp_path: Path) -> None:
    """The shared corpus's recipe that sets --served-model-name: every process of every deployment of it,
    on every hardware, is asked by that name (validation's probes, the served-names label), never its id."""
    from tests.conftest import needs_path

    corpus = needs_path("FACTORY_UPSTREAM_RECIPES")
    project = load_project(ROOT, corpus, tmp_path / "out")
    loaded = project.tree.recipe("dots-studio/dots3-note-prev")
    deployments = [d for bp in plan_recipe(project, loaded).images for d in bp.deployments]
    serving = [
        d.spec(role) for d in deployments for role in d.roles if role.program == "vllm" and role.serves_http
    ]
    assert len(serving) > 10
    assert {spec.served_names for spec in serving} == {("dots3-note-prev",)}
