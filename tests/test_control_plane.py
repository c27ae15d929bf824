"""The committed Kubernetes manifests on a real control plane (tests/cluster.py: etcd, API server,
controller manager, scheduler, LWS v0.9.0 with its webhooks, kwok GPU nodes; built from the Go modules
pinned under testbench/go/): every kustomization applied server-side as `kubectl apply -k --server-side`
does, then what each controller must make of it. No kubelet runs: kwok stands in for the nodes, so no
container starts (docs/kubernetes.md lists what stays unproven)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from factory.plan.deployment import Deployment
from factory.project import Project
from factory.render import kubernetes
from tests.cluster import (
    ControlPlane,
    generations,
    nodes_wanted,
    pods_wanted,
    version,
    wait_reconciled,
)
from tests.conftest import KIMI, ROOT, kubectl
from tests.manifest_records import on_disk, recording
from tests.test_kubernetes import _deployments as every_deployment


@pytest.fixture(scope="module")
def plane(control_plane: ControlPlane) -> ControlPlane:
    """The run's one control plane (conftest.control_plane); this module's namespaces are its own."""
    return control_plane


def _deployments(project: Project) -> list[Deployment]:
    """The project's deployments that have manifests."""
    return [d for d in every_deployment(project) if kubernetes.deployable(d)]


def _kustomized(folder: Path) -> list[dict[str, Any]]:
    printed = subprocess.run(
        [kubectl(), "kustomize", str(folder)], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    return [doc for doc in yaml.safe_load_all(printed) if doc]


def _apply_k(plane: ControlPlane, folder: Path, namespace: str) -> None:
    plane.kubectl("apply", "-k", str(folder), "--server-side", "-n", namespace)


def _nodes_for(plane: ControlPlane, prefix: str, documents: Sequence[Mapping[str, Any]]) -> None:
    for arch in ("amd64", "arm64"):
        plane.add_gpu_nodes(f"{prefix}-{arch}", nodes_wanted(documents, arch) + 1, arch)


def _lws_release() -> str:
    """The LWS release the control plane runs: the one its Go module pins."""
    pinned = (ROOT / "testbench" / "go" / "lws" / "go.mod").read_text()
    lines = [line.split() for line in pinned.splitlines()]
    return next(words[1] for words in lines if words[:1] == ["sigs.k8s.io/lws"])


def test_every_project_kustomization_reconciles_and_a_second_apply_changes_nothing(
    project: Project, plane: ControlPlane, request: pytest.FixtureRequest
) -> None:
    """Every LeaderWorkerSet gets its StatefulSets, its own headless Service and every pod (LWS_* set by
    its webhook, on a node with the GPUs asked for); every Deployment its pod; every Service a ready
    endpoint. A second apply of every kustomization moves no object's generation."""
    deployments = _deployments(project)
    folders = [ROOT / kubernetes.directory(d) for d in deployments]
    applied = [
        (_kustomized(folder), d.image.gpu_arch is not None)
        for folder, d in zip(folders, deployments, strict=True)
    ]
    everything = [doc for docs, _ in applied for doc in docs]
    named = [f"{doc['kind']}/{doc['metadata']['name']}" for doc in everything]
    assert len(named) == len(set(named)), "two deployments print an object of the same name"
    _nodes_for(plane, "project", everything)
    namespace = plane.namespace("project")
    check = (
        f"kubectl apply -k --server-side to Kubernetes {version(plane)} with LWS {_lws_release()}:"
        " every object reconciled, a second apply changed nothing (kwok nodes: no container ran)"
    )
    with recording(request.node.nodeid, check, on_disk(ROOT, folders)):
        for folder in folders:
            _apply_k(plane, folder, namespace)
        left = wait_reconciled(plane, namespace, applied)
        assert not left, "\n".join(left[:20])
        groups = sum(doc["kind"] == "LeaderWorkerSet" for doc in everything)
        stores = [
            docs for (docs, _), d in zip(applied, deployments, strict=True) if d.deploy_type == "kv_store_lb"
        ]
        kv = [doc for docs in stores for doc in docs]
        print(
            f"Kubernetes {version(plane)}: {len(folders)} kustomizations, {len(everything)} objects applied, "
            f"{groups} LeaderWorkerSets, {pods_wanted(everything)} pods reconciled; of them KV stores: "
            f"{len(stores)} kustomizations, {len(kv)} objects, {pods_wanted(kv)} pods"
        )
        assert groups >= 40 and len(folders) >= 80 and len(stores) >= 20
        before = generations(plane, namespace)
        for folder in folders:
            _apply_k(plane, folder, namespace)
        assert generations(plane, namespace) == before


def _renamed(documents: Sequence[Mapping[str, Any]], old: str, new: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(yaml.safe_dump_all(documents).replace(old, new)) if doc]


def _kimi_group(project: Project) -> tuple[list[dict[str, Any]], str]:
    deployment = next(
        d
        for d in _deployments(project)
        if d.image.recipe_id == KIMI and d.image.hardware == "h200" and d.strategy == "multi_node_tp"
    )
    documents = _kustomized(ROOT / kubernetes.directory(deployment))
    lws = next(doc["metadata"]["name"] for doc in documents if doc["kind"] == "LeaderWorkerSet")
    return documents, lws


def _without_gpus(documents: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    changed = yaml.safe_load(yaml.safe_dump(list(documents)))
    for doc in changed:
        if doc["kind"] == "LeaderWorkerSet":
            template = doc["spec"]["leaderWorkerTemplate"]
            for pod in (template.get("leaderTemplate"), template["workerTemplate"]):
                for container in (pod or {"spec": {"containers": []}})["spec"]["containers"]:
                    for key in ("limits", "requests"):
                        container.get("resources", {}).get(key, {}).pop("nvidia.com/gpu", None)
    return list(changed)


def _with_service_named(documents: Sequence[Mapping[str, Any]], name: str) -> list[dict[str, Any]]:
    changed = yaml.safe_load(yaml.safe_dump(list(documents)))
    for doc in changed:
        if doc["kind"] == "Service":
            doc["metadata"]["name"] = name  # the manifests before the fix named it so
    return list(changed)


def test_the_old_mistakes_fail_on_the_control_plane_and_the_name_budget_holds_for_eleven_groups(
    project: Project, plane: ControlPlane
) -> None:
    """The defects only controllers show: a Service named like the LWS (no headless Service is made), an
    LWS name of 52 characters (its worker pods are refused), no GPU request. And a name of exactly
    NAME_BUDGET characters with 11 groups (two-digit group indexes) reconciles."""
    documents, lws = _kimi_group(project)
    long_name = "kimi-linear-48b-a3b-instruct-h200-multi-node-tp-2n-x"  # 52 characters, as committed before
    at_budget = ("k" * kubernetes.NAME_BUDGET)[: kubernetes.NAME_BUDGET]
    eleven = _renamed(documents, lws, at_budget)
    for doc in eleven:
        if doc["kind"] == "LeaderWorkerSet":
            doc["spec"]["replicas"] = 11
    cases = {
        "service-named-like-lws": (_with_service_named(documents, lws), "no headless Service of its own"),
        "long-name": (_renamed(documents, lws, long_name), "must be no more than 63 bytes"),
        "no-gpu-request": (_without_gpus(documents), "asks for no GPU"),
    }
    _nodes_for(plane, "mistakes", [doc for docs, _ in cases.values() for doc in docs] + eleven)
    for namespace, (docs, _) in cases.items():
        plane.apply(docs, plane.namespace(namespace))
    plane.apply(eleven, plane.namespace("at-budget"))
    assert not wait_reconciled(plane, "at-budget", [(eleven, True)]), "11 groups at the name budget"
    for namespace, (docs, expected) in cases.items():
        left = wait_reconciled(plane, namespace, [(docs, True)], timeout=30)
        assert any(expected in problem for problem in left), (namespace, left)


MULTI_NODE_INSTANCES = "multi-node-instances"  # a KV store's layout whose instances are LeaderWorkerSets


def _sample(k8s: Path) -> dict[str, Path]:
    """One kustomization per strategy and layout (one node, each node count, prefill/decode, a KV store's
    instances of one node and of several), the first in path order: every shape the corpus prints, few
    enough for two minutes."""
    chosen: dict[str, Path] = {}
    for found in sorted(k8s.glob("*/*/*/**/manifest.yaml")):  # a deployment's (not a component's) folder
        folder = found.parent
        parts = folder.relative_to(k8s).parts  # slug, hardware-variant, strategy[, N-nodes]
        layout = list(parts[2:])
        if (
            parts[2].startswith("kv_store")
            and "kind: LeaderWorkerSet" in (folder / "manifest.yaml").read_text()
        ):
            layout.append(MULTI_NODE_INSTANCES)
        chosen.setdefault("/".join(layout), folder)
    return chosen


def test_a_sample_of_the_upstream_corpus_reconciles(
    plane: ControlPlane, upstream_generated: Path, tmp_path: Path
) -> None:
    """The shared corpus's recipes, generated with the run's corpus lock: one kustomization of each
    strategy and layout applied as `kubectl apply -k --server-side`, every group reconciled."""
    out = upstream_generated
    sample = _sample(out / "k8s")
    applied = [
        (_kustomized(folder), not folder.relative_to(out / "k8s").parts[1].startswith("cpu-"))
        for folder in sample.values()
    ]
    _nodes_for(plane, "corpus", [doc for docs, _ in applied for doc in docs])
    namespace = plane.namespace("corpus")
    for folder in sample.values():
        _apply_k(plane, folder, namespace)
    left = wait_reconciled(plane, namespace, applied)
    assert not left, "\n".join(left[:20])
    layouts = {key.split("/")[-1] for key in sample if key.endswith("-nodes")}
    strategies = {key.split("/")[0] for key in sample}
    pods = pods_wanted([doc for docs, _ in applied for doc in docs])
    kv = [docs for key, (docs, _) in zip(sample, applied, strict=True) if key.startswith("kv_store")]
    print(
        f"corpus sample: {len(sample)} kustomizations ({sorted(strategies)}; layouts {sorted(layouts)}), "
        f"{sum(map(len, (docs for docs, _ in applied)))} objects, {pods} pods reconciled; KV stores: "
        f"{sorted(k for k in sample if k.startswith('kv_store'))}, {sum(map(len, kv))} objects, "
        f"{pods_wanted([doc for docs in kv for doc in docs])} pods"
    )
    kv = {"kv_store_centralized_mooncake", "kv_store_distributed_mooncake"}
    assert {"single_node_tp", "multi_node_tp", "multi_node_dep", "pd_cluster"} | kv <= strategies, sorted(
        strategies
    )
    assert len(layouts) >= 2, sorted(layouts)
    assert any(key.endswith(MULTI_NODE_INSTANCES) for key in sample), "a KV store with multi-node instances"
    # The claim component holds for every shape too (prefill/decode pools of one node, the router's pod).
    claimed = _kustomized(_claim_overlay(tmp_path / "with-claim", list(sample.values())))
    for doc in claimed:
        for _, template in _pod_templates(doc):
            serving = doc["metadata"]["labels"][kubernetes.COMPONENT_LABEL] == kubernetes.SERVER_COMPONENT
            first = (template["spec"].get("volumes") or [{}])[0]
            claim = first.get("persistentVolumeClaim")
            assert (claim == {"claimName": "model-cache"}) == serving, doc["metadata"]["name"]
    assert any(doc["metadata"]["name"].endswith("-router") for doc in claimed)


# What the pods need beyond Pod Security's "baseline" profile, and why (docs/kubernetes.md lists the same): on
# AMD an unconfined seccomp profile (ROCm's runtime's NUMA calls: the catalog's amd security_opt). No pod adds
# a capability any more: every process runs as the images' non-root user (issue 48), for whom an added
# IPC_LOCK is not effective; RDMA's locked memory comes from the node's memlock limit.
BEYOND_BASELINE = {"seccompProfile"}


def test_what_the_pods_need_beyond_the_baseline_pod_security_profile_is_what_the_docs_list(
    project: Project, plane: ControlPlane
) -> None:
    """The API server's own Pod Security admission, in warn mode, on every project kustomization: each
    violation it names is one listed above, and each listed one occurs (so the list stays true)."""
    namespace = plane.namespace("baseline")
    plane.kubectl("label", "namespace", namespace, "pod-security.kubernetes.io/warn=baseline")
    warned: set[str] = set()
    for deployment in _deployments(project):
        folder = ROOT / kubernetes.directory(deployment)
        result = subprocess.run(
            [kubectl(), "--kubeconfig", str(plane.folder / "kubeconfig"), "apply", "-k", str(folder),
             "--server-side", "-n", namespace, "--dry-run=server"],
            capture_output=True, text=True, timeout=120, check=True,
        )  # fmt: skip
        for line in result.stderr.splitlines():
            if "would violate PodSecurity" in line:
                warned |= {part.strip() for part in line.split(":", 2)[-1].split("), ")}
    unexplained = [w for w in warned if not any(known in w for known in BEYOND_BASELINE)]
    assert not unexplained, unexplained
    assert all(any(known in w for w in warned) for known in BEYOND_BASELINE), warned


def _claim_overlay(folder: Path, deployments: Sequence[Path]) -> Path:
    """A user's own kustomization: the deployments' folders with the model cache claim component."""
    folder.mkdir(parents=True)
    body = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(d, folder) for d in deployments],
        "components": [os.path.relpath(ROOT / kubernetes.CLAIM_COMPONENT, folder)],
    }
    (folder / "kustomization.yaml").write_text(yaml.safe_dump(body))
    return folder


def _claim_objects(size: str) -> list[dict[str, Any]]:
    """What the user creates: the ReadWriteMany claim, and here the volume it binds to (no provisioner)."""
    access = {"accessModes": ["ReadWriteMany"], "storageClassName": ""}
    return [
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": "model-cache-volume"},
            "spec": {**access, "capacity": {"storage": "1Ti"}, "hostPath": {"path": "/srv/models"}},
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "model-cache"},
            "spec": {
                **access,
                "resources": {"requests": {"storage": size}},
                "volumeName": "model-cache-volume",
            },
        },
    ]


def test_the_model_cache_claim_component_puts_every_pod_of_a_group_on_one_claim(
    project: Project, plane: ControlPlane, tmp_path: Path
) -> None:
    """A one-node Deployment and a two-node LeaderWorkerSet of Kimi on H200 with the component: every
    pod (leader and worker) mounts the claim `model-cache` where it had an emptyDir, the claim binds, and
    the pods are scheduled and reconciled as before. The size the kustomization names is the claim's."""
    chosen = [
        d
        for d in _deployments(project)
        if d.image.recipe_id == KIMI and d.image.hardware == "h200"
        and d.strategy in ("single_node_tp", "multi_node_tp")
    ]  # fmt: skip
    assert len(chosen) == 2
    folders = [ROOT / kubernetes.directory(d) for d in chosen]
    overlay = _claim_overlay(tmp_path / "with-claim", folders)
    documents = _kustomized(overlay)
    pods = [template for doc in documents for _, template in _pod_templates(doc)]
    assert len(pods) == 3  # the Deployment's, the LWS's leader and worker
    for template in pods:
        cache = template["spec"]["volumes"][0]
        assert cache == {"name": "model-cache", "persistentVolumeClaim": {"claimName": "model-cache"}}
    noted = (folders[0] / "kustomization.yaml").read_text()
    size = noted.split("claim model-cache of ", 1)[1].split()[0]
    namespace = plane.namespace("claim")
    plane.apply(_claim_objects(size), namespace)
    _nodes_for(plane, "claim", documents)
    _apply_k(plane, overlay, namespace)
    left = wait_reconciled(plane, namespace, [(documents, True)])
    assert not left, "\n".join(left[:20])
    claim = plane.items("persistentvolumeclaims", namespace)[0]
    assert claim["status"]["phase"] == "Bound"
    started = plane.items("pods", namespace)
    assert len(started) == 3 and all(
        any(
            v.get("persistentVolumeClaim", {}).get("claimName") == "model-cache" for v in p["spec"]["volumes"]
        )
        and p["spec"].get("nodeName")
        for p in started
    )


def _pod_templates(doc: Mapping[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    if doc["kind"] == "Deployment":
        yield "template", doc["spec"]["template"]
    elif doc["kind"] == "LeaderWorkerSet":
        for key in ("leaderTemplate", "workerTemplate"):
            yield key, doc["spec"]["leaderWorkerTemplate"][key]
