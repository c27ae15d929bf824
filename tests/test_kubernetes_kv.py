"""Kubernetes manifests of the Mooncake KV-store deployments (issue 32): each process a workload behind its
Service, the generated configs a ConfigMap, the start order printed as init containers that wait for the
Services of the processes a pod starts after, and each address as a pod reaches it (the master by its
Service, the store and each instance by their own pod's address). Checked offline by running what the
kubelet and the image would run (tests/kubernetes_kv_checks.py); the control plane's own test applies them."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

import pytest

from factory.blueprint import plan_recipe
from factory.plan.deployment import Deployment
from factory.project import Project, load_project
from factory.render import kubernetes
from tests import kubernetes_checks as checks
from tests import kubernetes_kv_checks as kv_checks
from tests.conftest import ROOT, recipes_tree, small_recipe
from tests.test_kubernetes import _deployments, parity_problems

MODEL = "acme/Big-1T"


def project_stores(project: Project) -> list[Deployment]:
    return [d for d in _deployments(project) if d.deploy_type == "kv_store_lb"]


@pytest.fixture(scope="module")
def multi_node(tmp_path_factory: pytest.TempPathFactory) -> list[Deployment]:
    """KV stores whose instances each take two nodes (a model too large for one: 1,500 GB), with the project's
    kv_store files and lock: the project's own recipes fit one node per instance."""
    tmp = tmp_path_factory.mktemp("multi-node-kv")
    recipe = small_recipe(
        model={**small_recipe()["model"], "min_vllm_version": "0.21.0"},  # the stores' vLLM floor
        dependencies=[],
        variants={"default": {"precision": "bf16", "vram_minimum_gb": 1500}},
        compatible_strategies=["single_node_tp", "multi_node_tp"],
    )
    tree = recipes_tree(tmp / "recipes", {MODEL: recipe})
    shutil.copytree(ROOT / "recipes" / "kv_store", tree / "kv_store")
    project = load_project(ROOT, tree, tmp / "out", lock=ROOT / "recipes" / "lock" / "vllm.lock.json")
    found = [
        d
        for bp in plan_recipe(project, project.tree.recipe(MODEL)).images
        for d in bp.deployments
        if d.deploy_type == "kv_store_lb" and d.image.hardware == "h200"
    ]
    assert {d.strategy for d in found} == {"kv_store_centralized_mooncake", "kv_store_distributed_mooncake"}
    return found


def start_order(deployment: Deployment) -> dict[str, list[str]]:
    """From the run spec: each workload, and the workloads its processes start after."""
    names = kubernetes.unit_names(deployment)
    unit_of = {name: kubernetes.unit(g) for g in deployment.run for name in g.names}
    order: dict[str, list[str]] = {}
    for group in deployment.run:
        mine = names[kubernetes.unit(group)]
        order.setdefault(mine, [])
        order[mine] += [names[unit_of[p]] for p in group.spec.after if names[unit_of[p]] not in order[mine]]
    return {name: awaited for name, awaited in order.items() if awaited}


def _named(documents: list[dict[str, Any]], name: str, kind: str = "Deployment") -> dict[str, Any]:
    return next(d for d in documents if d["metadata"]["name"] == name and d["kind"] == kind)


def _container(workload: dict[str, Any], role: str = "node") -> dict[str, Any]:
    return dict(checks.pod_templates(workload))[role]["spec"]["containers"][0]


# --- what is generated ----------------------------------------------------------------------------------


def test_every_kv_store_process_is_a_workload_behind_its_service_with_its_generated_configs(
    project: Project,
) -> None:
    stores = project_stores(project)
    # the tiny models' and Kimi-Linear's two topologies on every hardware they have (26), and the Grace
    # recipe's (MiniMax-M2.5: B200 and GB200, two variants: 8)
    assert len(stores) == 34, sorted({d.image.recipe_id for d in stores})
    for deployment in stores:
        documents = kubernetes.objects(deployment)
        name = kubernetes.object_name(deployment)
        units = kubernetes.unit_names(deployment)
        assert {"master", "router"} <= set(units) or deployment.strategy.endswith("distributed_mooncake")
        # one workload per unit, each behind the Service of its unit (the deployment's name: its entry point)
        workloads = {
            d["metadata"]["name"] for d in documents if d["kind"] in ("Deployment", "LeaderWorkerSet")
        }
        services = {d["metadata"]["name"] for d in documents if d["kind"] == "Service"}
        assert workloads == set(units.values())
        assert services == set(kubernetes.unit_services(deployment).values()) and name in services
        entry = _named(documents, name, "Service")["spec"]["selector"]
        expected_entry = units.get("router", units.get("instance-1"))
        assert entry == {kubernetes.NAME_LABEL: expected_entry}
        # each generated config a key of <name>-configs, byte for byte the file compose mounts
        configs = _named(documents, f"{name}-configs", "ConfigMap")["data"]
        folder = ROOT / "compose" / Path(*kubernetes.directory(deployment).parts[1:])
        assert configs == {p.name: p.read_text() for p in sorted(folder.glob("mooncake-*.json"))}
        # the master's Service forwards its health port and the RPC port its command names
        master = _named(documents, units["master"], "Service")
        ports = {p["name"]: p["port"] for p in master["spec"]["ports"]}
        args = _container(_named(documents, units["master"]))["args"]
        assert ports == {"http": 9003, "rpc": 50051} and "-rpc_port=50051" in args
        assert checks.address_problems(documents) == []


def test_the_store_asks_for_the_memory_its_segment_and_buffer_pin(project: Project) -> None:
    """The store service registers global_segment_size and local_buffer_size of DRAM (pinned for transfers:
    never reclaimed), so its pod asks for them beside the catalog's floor: 256 MB + 64 MB on the CPU target,
    rounded up to 1 GiB, on a 4 GiB floor."""
    deployment = next(
        d
        for d in project_stores(project)
        if d.image.hardware == "cpu" and d.strategy == "kv_store_centralized_mooncake"
    )
    floor = project.catalog.mooncake.store.requests
    assert floor is not None and floor.memory_gib == 4
    store = _named(kubernetes.objects(deployment), kubernetes.unit_names(deployment)["store"])
    resources = _container(store)["resources"]
    # (and its disk: /tmp and its filled config, 1 GiB each, and 1 GiB for its logs)
    assert resources["requests"] == {"cpu": "2", "memory": "5Gi", "ephemeral-storage": "3Gi"}
    assert resources["limits"] == resources["requests"], "limited as asked: the memory it pins, no more"


def _instance_memory(deployment: Deployment) -> str:
    instance = _named(kubernetes.objects(deployment), kubernetes.unit_names(deployment)["instance-1"])
    return str(_container(instance)["resources"]["requests"]["memory"])


def test_each_instance_asks_for_what_every_one_of_its_ranks_registers(project: Project) -> None:
    """vLLM's MooncakeStoreWorker sets up a store client in every worker rank, one per GPU (the kv_store
    file: "global_segment_size is per GPU (not per node)"), each registering its config's segment and buffer
    in host memory, pinned. Kimi-Linear on H200 runs TP 8: distributed, 8 x (100 GiB + 4 GiB) on the vendor's
    32 GiB floor (the pod asked for 32 GiB before: 832 GiB it would pin were not requested); centralized,
    whose instances give no segment, 8 x 4 GiB of buffers. On CPU, one rank: 256 MiB + 64 MiB, rounded up."""
    stores = {(d.image.slug, d.image.hardware, d.strategy): d for d in project_stores(project)}
    kimi = "kimi-linear-48b-a3b-instruct"
    assert _instance_memory(stores[(kimi, "h200", "kv_store_distributed_mooncake")]) == "864Gi"
    assert _instance_memory(stores[(kimi, "h200", "kv_store_centralized_mooncake")]) == "64Gi"
    tiny = stores[("tiny-random-llama", "cpu", "kv_store_centralized_mooncake")]
    assert _instance_memory(tiny) == "7Gi", "4 GiB floor + 2 GiB /dev/shm + 64 MiB of buffer, rounded up"


# --- the start order: each pod waits for the Services of the processes it starts after -----------------


def test_each_kv_pod_waits_until_the_processes_it_starts_after_answer(
    project: Project, multi_node: list[Deployment], tmp_path: Path
) -> None:
    """vLLM with an unreachable Mooncake master hangs instead of exiting: the store waits for the master,
    every rank of every instance for the master and the store, the router for the instances. Each init
    container is run by the real shell against a curl that refuses each URL twice before it answers."""
    waited = 0
    for n, deployment in enumerate([*project_stores(project), *multi_node]):
        order = start_order(deployment)
        documents = kubernetes.objects(deployment)
        assert kv_checks.start_order_problems(documents, order, tmp_path / str(n)) == []
        waited += sum(len(awaited) for awaited in order.values())
    assert waited > 100


@pytest.mark.parametrize(
    "mistake",
    [
        "no init container",  # the instance starts at once, before the master answers
        "one try",  # it asks once and starts whatever the answer
        "another path",  # it waits for an answer the master never gives
    ],
)
def test_an_instance_that_would_start_before_the_master_answers_fails_its_check(
    project: Project, tmp_path: Path, mistake: str
) -> None:
    deployment = next(d for d in project_stores(project) if d.image.hardware == "cpu")
    documents = copy.deepcopy(kubernetes.objects(deployment))
    instance = _named(documents, kubernetes.unit_names(deployment)["instance-1"])
    spec = instance["spec"]["template"]["spec"]
    if mistake == "no init container":
        del spec["initContainers"]
    elif mistake == "one try":
        spec["initContainers"][0]["command"][2] = 'for url; do curl -fsS "$$url" || true; done'
    else:
        command = spec["initContainers"][0]["command"]
        command[:] = [word.replace("/health", "/ready") for word in command]
    problems = kv_checks.start_order_problems(documents, start_order(deployment), tmp_path)
    master = kubernetes.unit_names(deployment)["master"]
    assert any(f"starts before {master} answers" in p for p in problems), problems


# --- addresses: the master by its Service; the store and the instances by their pod's address --------------


def test_each_mooncake_config_names_the_master_by_its_service_and_the_store_by_its_pod(
    project: Project, multi_node: list[Deployment], tmp_path: Path
) -> None:
    """Each config as the image's launcher fills it from the pod's environment."""
    filled = 0
    for n, deployment in enumerate([*project_stores(project), *multi_node]):
        documents = kubernetes.objects(deployment)
        assert kv_checks.mooncake_address_problems(documents, tmp_path / str(n)) == []
        filled += sum(1 for _ in kv_checks.filled_configs(documents, tmp_path / f"{n}-again"))
    assert filled > 50


@pytest.mark.parametrize("address", ["service", "loopback"])
def test_a_store_advertising_other_than_its_pod_address_fails_its_check(
    project: Project, tmp_path: Path, address: str
) -> None:
    """A Service's address is no interface of the store's pod, and the store advertises its segment there
    with ports it picks at random (15653 and 16089 in one run here), which a Service does not forward."""
    deployment = next(
        d
        for d in project_stores(project)
        if d.image.hardware == "cpu" and d.strategy == "kv_store_centralized_mooncake"
    )
    documents = copy.deepcopy(kubernetes.objects(deployment))
    units, services = kubernetes.unit_names(deployment), kubernetes.unit_services(deployment)
    env = _container(_named(documents, units["store"]))["env"]
    entry = next(e for e in env if e["name"] == "MOONCAKE_STORE_IP")
    entry["value"] = services["store"] if address == "service" else "127.0.0.1"
    problems = kv_checks.mooncake_address_problems(documents, tmp_path)
    assert len(problems) == 1 and "advertises local_hostname" in problems[0], problems


def test_a_config_naming_the_master_by_other_than_its_service_fails_its_check(
    project: Project, tmp_path: Path
) -> None:
    deployment = next(d for d in project_stores(project) if d.image.hardware == "cpu")
    documents = copy.deepcopy(kubernetes.objects(deployment))
    instance = _container(_named(documents, kubernetes.unit_names(deployment)["instance-1"]))
    next(e for e in instance["env"] if e["name"] == "MOONCAKE_MASTER_IP")["value"] = "10.0.0.7"
    problems = kv_checks.mooncake_address_problems(documents, tmp_path)
    assert problems and all("10.0.0.7:50051 is no Service" in p for p in problems), problems


def test_a_router_pointed_at_an_instance_pod_fails_its_check(project: Project) -> None:
    deployment = next(d for d in project_stores(project) if d.strategy == "kv_store_centralized_mooncake")
    documents = copy.deepcopy(kubernetes.objects(deployment))
    args = _container(_named(documents, kubernetes.unit_names(deployment)["router"]))["args"]
    args[args.index("--worker-urls") + 1] = "http://10.0.0.12:8000"
    problems = checks.address_problems(documents)
    assert len(problems) == 1 and "--worker-urls http://10.0.0.12:8000" in problems[0], problems


# --- a multi-node instance: a LeaderWorkerSet whose ranks meet at its leader --------------------------------


def test_a_multi_node_instance_is_a_leader_worker_set_whose_ranks_meet_at_its_leader(
    multi_node: list[Deployment], launcher: Path
) -> None:
    for deployment in multi_node:
        documents = kubernetes.objects(deployment)
        units, services = kubernetes.unit_names(deployment), kubernetes.unit_services(deployment)
        groups = [d for d in documents if d["kind"] == "LeaderWorkerSet"]
        instances = [unit for unit in units if unit.startswith("instance-")]
        assert {g["metadata"]["name"] for g in groups} == {units[i] for i in instances}
        for lws in groups:
            assert lws["spec"]["leaderWorkerTemplate"]["size"] == 2
            assert len(lws["metadata"]["name"]) <= kubernetes.NAME_BUDGET
            assert (
                checks.schema_problems(lws, kubernetes.MIN_LWS) == [] and checks.webhook_problems(lws) == []
            )
            assert checks.group_problems(lws) == [], "the worker's --master-addr is the LWS leader"
            leader, worker = _container(lws, "leader"), _container(lws, "worker")
            assert leader["args"][leader["args"].index("--host") + 1] == "$(POD_IP)"
            assert worker["args"][worker["args"].index("--master-addr") + 1] == "$(LWS_LEADER_ADDRESS)"
        for instance in instances:  # its Service, not named as its LWS, fronts the leader
            service = _named(documents, services[instance], "Service")
            assert service["metadata"]["name"] != units[instance]
            assert service["spec"]["selector"][kubernetes.LWS_INDEX_LABEL] == "0"
        if "router" in units:
            args = _container(_named(documents, units["router"]))["args"]
            urls = {f"http://{services[i]}:8000" for i in instances}
            assert urls <= set(args)
        assert checks.address_problems(documents) == []
        assert parity_problems(deployment, launcher) == []
        for doc in documents:
            assert checks.core_problems(doc, checks.KUBERNETES_VERSIONS[-1]) == [], doc["metadata"]["name"]
