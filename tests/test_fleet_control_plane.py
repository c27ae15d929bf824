"""The fleet components on a real control plane (tests/cluster.py: kube-apiserver, kube-controller-manager,
scheduler, LWS, kwok nodes): the CRDs installed exactly as their projects ship them (../shared/k8s); every
project deployment and a sample of the upstream corpus applied server-side with every component, accepted by
the API server; the plain HPA taken up by the real HPA controller (its status conditions read back: it reads
the scale of a Deployment and of a LeaderWorkerSet, and finds no metric, since no custom metrics adapter
runs); and Pod Security admission: each vendor's pods admitted under the level the plan names and refused
under the next stricter one, a root pod refused under `restricted`. No KEDA, Prometheus or endpoint picker
runs here: their objects are accepted, not acted on. kwok enforces no NetworkPolicy."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from factory.plan.deployment import Deployment
from factory.plan.pod_security import LEVELS, strictest
from factory.project import Project
from factory.render import kubernetes
from factory.render.components import autoscale
from tests import fleet_checks
from tests.cluster import ControlPlane
from tests.conftest import ROOT, TINY, blueprint_of, kubectl, missing_tool
from tests.fleet_checks import crd_files
from tests.kubernetes_checks import pod_templates
from tests.test_control_plane import _sample
from tests.test_kubernetes import _deployments

PARTS = ("monitoring", "inference-pool", autoscale.KEDA, autoscale.HPA)
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@pytest.fixture(scope="module")
def plane(control_plane: ControlPlane) -> ControlPlane:
    """The run's control plane with the fleet's CRDs installed (server-side, as shipped) and established."""
    files = crd_files()
    if not all(path.is_file() for path in files):
        missing_tool("the fleet CRDs", "../shared/k8s (or FACTORY_SHARED_K8S) with the shipped CRD files")
    for path in files:
        control_plane.kubectl("apply", "--server-side", "-f", str(path))
    names = [yaml.safe_load(path.read_text())["metadata"]["name"] for path in files]
    control_plane.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s", *[f"crd/{n}" for n in names]
    )
    return control_plane


def _read(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.load_all(path.read_text(), Loader=LOADER) if doc] if path.exists() else []


def _with_components(folder: Path, parts: tuple[str, ...] = PARTS) -> list[dict[str, Any]]:
    """A deployment's objects with its components, as kustomize builds them from the committed files: the
    manifest, the network policy, each component's objects, and the autoscalers' patch (the workload's
    replicas left to them). tests/test_fleet_manifests.py builds the same with kustomize itself."""
    documents = _read(folder / "manifest.yaml") + _read(folder / kubernetes.NETWORK_POLICY_FILE)
    scaled = False
    for part in parts:
        found = _read(folder / part / f"{part}.yaml")
        documents += found
        scaled |= any(doc["kind"] in ("ScaledObject", "HorizontalPodAutoscaler") for doc in found)
    for doc in documents if scaled else []:
        if doc["kind"] in ("Deployment", "LeaderWorkerSet") and doc["spec"].get("replicas") == 1:
            doc["spec"].pop("replicas")  # the component's patch; a KV store's units keep theirs
    return documents


def _apply(plane: ControlPlane, documents: list[dict[str, Any]], namespace: str, *flags: str) -> str:
    return plane.kubectl(
        "apply", "--server-side", "--field-manager", "factory-fleet", "-n", namespace, *flags, "-f", "-",
        stdin=yaml.safe_dump_all(documents),
    )  # fmt: skip


def _accepted(plane: ControlPlane, folders: list[Path], namespace: str) -> dict[str, int]:
    """Every object of the folders with their components, applied server-side (the API server's schemas,
    the CRDs' and its admission; a server-side dry run, so that no controller acts on a thousand objects);
    the kinds accepted."""
    # The KEDA and plain autoscalers are alternatives: each deployment takes one, so the HPA variants are
    # applied on their own (the API server would accept both, a cluster should not run both).
    keda = [doc for folder in folders for doc in _with_components(folder, PARTS[:3])]
    hpa = [doc for folder in folders for doc in _read(folder / autoscale.HPA / f"{autoscale.HPA}.yaml")]
    kinds: dict[str, int] = {}
    for documents in (keda, hpa):
        printed = _apply(plane, documents, namespace, "--dry-run=server")
        lines = [line for line in printed.splitlines() if line.strip()]
        assert len(lines) == len(documents) and all("serverside-applied" in line for line in lines), printed
        for doc in documents:
            kinds[doc["kind"]] = kinds.get(doc["kind"], 0) + 1
    return kinds


def _check_accepted(plane: ControlPlane, what: str, folders: list[Path]) -> None:
    kinds = _accepted(plane, folders, plane.namespace(f"fleet-{what}"))
    print(f"{what}: {len(folders)} deployments accepted with their components: {kinds}")
    assert kinds["PodMonitor"] == len(folders) and kinds["InferencePool"] > 0
    assert kinds["ScaledObject"] == kinds["HorizontalPodAutoscaler"] > 0


def test_every_component_of_every_project_deployment_is_accepted(
    project: Project, plane: ControlPlane
) -> None:
    """Each project deployment with the PodMonitor, the InferencePool, the ScaledObject and the HPA,
    server-side against the CRDs of prometheus-operator v0.93.0, the Inference Extension v1.6.0 and KEDA
    v2.20.2, and Kubernetes' own schemas and admission."""
    folders = [ROOT / kubernetes.directory(d) for d in _deployments(project) if kubernetes.deployable(d)]
    _check_accepted(plane, "project", folders)


def test_every_component_of_a_corpus_sample_is_accepted(
    plane: ControlPlane, upstream_generated: Path
) -> None:
    """One deployment of each shape of the upstream corpus (generated with the run's lock; the sample
    tests/test_control_plane.py reconciles), with every component, accepted the same way."""
    _check_accepted(plane, "corpus", list(_sample(upstream_generated / "k8s").values()))


def _conditions(plane: ControlPlane, namespace: str, name: str) -> dict[str, dict[str, str]]:
    hpa = json.loads(plane.kubectl("get", "hpa", name, "-n", namespace, "-o", "json"))
    return {c["type"]: c for c in hpa.get("status", {}).get("conditions") or []}


def _tiny(project: Project, strategy: str) -> Deployment:
    return blueprint_of(project, TINY, "cpu").deployment(strategy)


def test_the_hpa_controller_takes_up_the_plain_autoscaler_of_a_deployment_and_of_a_leaderworkerset(
    project: Project, plane: ControlPlane
) -> None:
    """The tiny model's one-node Deployment and its two-node LeaderWorkerSet with `autoscale-hpa`, in a
    namespace enforcing the `restricted` Pod Security Standard: their controllers create every pod (admitted);
    the real HPA controller reads each target's scale (the LWS's through its scale subresource, which counts
    groups) and then finds no metric: no custom metrics adapter serves vllm:num_requests_waiting here."""
    namespace = plane.namespace("fleet-hpa")
    plane.kubectl("label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted")
    names = []
    for strategy in ("single_node_tp", "multi_node_tp_dp"):
        deployment = _tiny(project, strategy)
        _apply(plane, _with_components(ROOT / kubernetes.directory(deployment), (autoscale.HPA,)), namespace)
        names.append(kubernetes.object_name(deployment))
    deadline = time.monotonic() + 180  # the controller looks again every 15 s
    while True:
        found = {name: _conditions(plane, namespace, name) for name in names}
        # (until the LWS controller reports its leaders' selector, the scale has none: InvalidSelector)
        done = all(c.get("ScalingActive", {}).get("reason") == "FailedGetPodsMetric" for c in found.values())
        if done or time.monotonic() > deadline:
            break
        time.sleep(3)
    # Their pods were made by the real controllers in a namespace enforcing `restricted`: admitted (the
    # Deployment's, the LWS's leader and worker).
    while len(pods := plane.items("pods", namespace)) < 3 and time.monotonic() < deadline + 60:
        time.sleep(2)
    refused = [e["message"] for e in plane.items("events", namespace) if e["reason"] == "FailedCreate"]
    assert len(pods) == 3 and not refused, ([p["metadata"]["name"] for p in pods], refused[-1:])
    # The LWS's scale: its groups, and its leaders as the pods a Pods metric is averaged over.
    lws = names[1]
    path = f"/apis/leaderworkerset.x-k8s.io/v1/namespaces/{namespace}/leaderworkersets/{lws}/scale"
    scale = json.loads(plane.kubectl("get", "--raw", path))
    print(f"{lws} scale: {scale['spec']} {scale['status']}")
    assert scale["spec"]["replicas"] == 1 and "worker-index=0" in scale["status"]["selector"]
    for name, conditions in found.items():
        print(
            name,
            {kind: (c["status"], c["reason"], c.get("message", "")[:160]) for kind, c in conditions.items()},
        )
        assert conditions["AbleToScale"]["status"] == "True", conditions
        assert conditions["ScalingActive"]["status"] == "False", conditions
        assert conditions["ScalingActive"]["reason"] == "FailedGetPodsMetric", conditions
        assert "vllm:num_requests_waiting" in conditions["ScalingActive"]["message"], conditions


def _pods_of(deployment: Deployment) -> Iterator[dict[str, Any]]:
    """A Pod for each pod template of the deployment, as its controller would create it."""
    for doc in kubernetes.objects(deployment):
        for role, template in pod_templates(doc):
            pod = copy.deepcopy(template)
            pod["metadata"]["name"] = f"{doc['metadata']['name']}-{role}"[:63].rstrip("-")
            yield {"apiVersion": "v1", "kind": "Pod", **pod}


def _create_dry(plane: ControlPlane, namespace: str, documents: list[dict[str, Any]]) -> tuple[str, str]:
    """A server-side dry run of creating each object: (what was created, what was refused and why)."""
    result = subprocess.run(
        [kubectl(), "--kubeconfig", str(plane.folder / "kubeconfig"), "create", "--dry-run=server",
         "-n", namespace, "-f", "-"],
        input=yaml.safe_dump_all(documents), capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    return result.stdout, result.stderr


def _enforcing(plane: ControlPlane, level: str) -> str:
    """A namespace whose Pod Security admission enforces `level` (made once)."""
    namespace = f"fleet-{level}"
    if f"namespace/{namespace}" not in plane.kubectl("get", "namespaces", "-o", "name").split():
        plane.namespace(namespace)
        plane.kubectl("label", "namespace", namespace, f"pod-security.kubernetes.io/enforce={level}")
    return namespace


def test_each_deployment_is_admitted_at_the_pod_security_level_the_plan_names_and_refused_above(
    project: Project, plane: ControlPlane
) -> None:
    """Pod Security admission of the real API server, on a pod of every template of every project
    deployment: a namespace enforcing the level the plan names for the deployment admits all its pods, and
    every stricter level refuses at least one of them: the CPU's and NVIDIA's deployments run under
    `restricted`, AMD's under `privileged` only (ROCm's Unconfined seccomp, which `baseline` refuses too);
    and a pod running as root is refused under `restricted`."""
    pods: dict[str, list[dict[str, Any]]] = {level: [] for level in LEVELS}
    owner: dict[str, str] = {}
    levels: dict[str, str] = {}
    for deployment in _deployments(project):
        if kubernetes.deployable(deployment):
            level, _ = strictest([group.spec for group in deployment.run])
            levels[deployment.name] = level
            for pod in _pods_of(deployment):
                pods[level].append(pod)
                owner[pod["metadata"]["name"]] = deployment.name
    assert pods["restricted"] and pods["privileged"] and not pods["baseline"]
    for level in (level for level in LEVELS if pods[level]):
        for enforced in LEVELS:
            created, refused = _create_dry(plane, _enforcing(plane, enforced), pods[level])
            admitted = created.count("created (server dry run)")
            if LEVELS.index(enforced) >= LEVELS.index(level):
                assert admitted == len(pods[level]), (level, enforced, refused[:600])
                continue
            refusing = {
                owner[name]
                for name in re.findall(r'pods "([^"]+)" is forbidden: violates PodSecurity', refused)
            }
            assert refusing == {name for name, at in levels.items() if at == level}, (level, enforced)
        print(f"{level}: {len(pods[level])} pods admitted under `{level}`; each deployment refused above it")
    root = next(_pods_of(_tiny(project, "single_node_tp")))
    root["spec"]["securityContext"] |= {"runAsUser": 0, "runAsNonRoot": False}
    created, refused = _create_dry(plane, _enforcing(plane, "restricted"), [root])
    print(f"a root pod under restricted: {refused.strip()[:300]}")
    assert not created and 'violates PodSecurity "restricted' in refused and "runAsNonRoot" in refused


def test_the_docs_pages_fleet_kustomization_applies_to_a_cluster(plane: ControlPlane, tmp_path: Path) -> None:
    """The page's kustomization, then its apply and get, as written, against the control plane (in the
    namespace its kubeconfig names: a namespace of this test's own)."""
    from tests.test_fleet_manifests import docs_env

    namespace = plane.namespace("fleet-docs")
    config = tmp_path / "kubeconfig"
    config.write_text((plane.folder / "kubeconfig").read_text())
    env = {**docs_env(tmp_path), "KUBECONFIG": str(config)}
    fleet_checks.run_docs_commands(
        [f"kubectl config set-context --current --namespace {namespace}"], tmp_path, env
    )
    commands = fleet_checks.docs_commands()
    start = next(i for i, c in enumerate(commands) if c.startswith("mkdir -p my-fleet"))
    wanted = [commands[start], *[c for c in commands if c.startswith(("kubectl apply", "kubectl get"))]]
    printed = fleet_checks.run_docs_commands(wanted, tmp_path, env)
    for kind in ("podmonitor", "scaledobject", "inferencepool"):
        assert f"{kind}." in printed, printed
