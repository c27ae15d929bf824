"""A real Kubernetes control plane on loopback for the tests (testbench/control-plane: etcd, API server,
controller manager, scheduler, the LWS controller with its webhooks, kwok nodes), and what "reconciled"
means for the objects a kustomization applies: what each controller must have made of them.

kwok runs no container: pods are scheduled, given an address and marked Running and Ready. What only a
kubelet shows (the processes, DNS answers, device plugins, `$(VAR)` expansion) stays unproven here."""

from __future__ import annotations

import fcntl
import json
import math
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from factory.catalog.loader import load_catalog
from tests.conftest import ROOT, kubectl

CONTROL_PLANE = ROOT / "testbench" / "control-plane"
# The resources the catalog's vendors ask for GPUs by (nvidia.com/gpu, amd.com/gpu): each node offers them.
GPU_RESOURCES = tuple(
    sorted(
        {
            v.kubernetes_resource
            for v in load_catalog(ROOT / "catalog" / "hardware.yaml").vendors.values()
            if v.kubernetes_resource
        }
    )
)
GPUS_PER_NODE = 8  # each kwok node advertises 8 of each kind, as an 8-GPU server does
LWS_NAME = "leaderworkerset.sigs.k8s.io/name"


@dataclass(frozen=True)
class ControlPlane:
    folder: Path

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        result = subprocess.run(
            [kubectl(), "--kubeconfig", str(self.folder / "kubeconfig"), *args],
            input=stdin, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {result.stderr[-2000:]}")
        return result.stdout

    def items(self, kind: str, namespace: str, *selector: str) -> list[dict[str, Any]]:
        listed = json.loads(self.kubectl("get", kind, "-n", namespace, "-o", "json", *selector))
        return list(listed["items"])

    def apply(self, documents: Sequence[Mapping[str, Any]], namespace: str) -> str:
        """Server-side apply, as `kubectl apply -k --server-side` does with what kustomize printed."""
        return self.kubectl(
            "apply", "--server-side", "--field-manager", "factory-test", "-n", namespace, "-f", "-",
            stdin=yaml.safe_dump_all(documents),
        )  # fmt: skip

    def namespace(self, name: str) -> str:
        self.kubectl("create", "namespace", name)
        return name

    def add_gpu_nodes(self, prefix: str, count: int, arch: str) -> None:
        nodes = [
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": f"{prefix}-{n}",
                    "annotations": {"kwok.x-k8s.io/node": "fake"},
                    "labels": {
                        "kubernetes.io/arch": arch,
                        "kubernetes.io/os": "linux",
                        "kubernetes.io/hostname": f"{prefix}-{n}",
                        "type": "kwok",
                    },
                },
                "status": {
                    # an 8-GPU server's (NVIDIA's DGX H200: 2 TB of memory, 30 TB of NVMe, 224 threads)
                    key: {"cpu": "224", "memory": "2Ti", "ephemeral-storage": "30Ti", "pods": "110"}
                    | dict.fromkeys(GPU_RESOURCES, str(GPUS_PER_NODE))
                    for key in ("allocatable", "capacity")
                },
            }
            for n in range(count)
        ]
        self.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(nodes))


# The control plane listens on fixed loopback ports: one at a time per machine. A second run (another clone's
# tests) waits for the first one's to stop instead of failing on a port in use.
MACHINE_LOCK = Path("/tmp/factory-control-plane.lock")


@contextmanager
def running_control_plane(folder: Path) -> Iterator[ControlPlane]:
    """Starts the control plane (testbench/control-plane builds or reuses the binaries), stops it after,
    by the PIDs it wrote; its logs stay in the folder. Holds the machine's control-plane lock meanwhile."""
    with MACHINE_LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        started = subprocess.run(
            [str(CONTROL_PLANE), "up", str(folder)], capture_output=True, text=True, timeout=3600, check=False
        )
        try:
            assert started.returncode == 0, f"testbench/control-plane up: {started.stderr[-3000:]}"
            yield ControlPlane(folder)
        finally:
            subprocess.run([str(CONTROL_PLANE), "down", str(folder)], capture_output=True, timeout=120)


def version(plane: ControlPlane) -> str:
    return str(json.loads(plane.kubectl("version", "-o", "json"))["serverVersion"]["gitVersion"])


# --- what the controllers must have made -----------------------------------------------------------------


def pods_wanted(documents: Sequence[Mapping[str, Any]]) -> int:
    """How many pods the workloads among these objects ask for."""
    total = 0
    for doc in documents:
        if doc["kind"] == "LeaderWorkerSet":
            total += doc["spec"].get("replicas", 1) * doc["spec"]["leaderWorkerTemplate"].get("size", 1)
        elif doc["kind"] == "Deployment":
            total += doc["spec"].get("replicas", 1)
    return total


def nodes_wanted(documents: Sequence[Mapping[str, Any]], arch: str) -> int:
    """Nodes of this architecture enough for every pod that asks for GPUs and selects it: a node has 8 of
    each kind, so a pod asking for 8 NVIDIA GPUs and one asking for 8 AMD GPUs may share one."""
    asked = dict.fromkeys(GPU_RESOURCES, 0)
    for doc in documents:
        for count, template in _templates(doc):
            if template["spec"].get("nodeSelector", {}).get("kubernetes.io/arch", "amd64") != arch:
                continue
            for resource, gpus in _gpus(template).items():
                asked[resource] += count * math.ceil(gpus / GPUS_PER_NODE) if gpus else 0
    return max(asked.values())


def _templates(doc: Mapping[str, Any]) -> Iterator[tuple[int, dict[str, Any]]]:
    if doc["kind"] == "Deployment":
        yield doc["spec"].get("replicas", 1), doc["spec"]["template"]
    elif doc["kind"] == "LeaderWorkerSet":
        groups, size = doc["spec"].get("replicas", 1), doc["spec"]["leaderWorkerTemplate"].get("size", 1)
        template = doc["spec"]["leaderWorkerTemplate"]
        leader = template.get("leaderTemplate", template["workerTemplate"])
        yield groups, leader
        yield groups * (size - 1), template["workerTemplate"]


def _gpus(pod_spec_holder: Mapping[str, Any]) -> dict[str, int]:
    asked = dict.fromkeys(GPU_RESOURCES, 0)
    for container in pod_spec_holder["spec"]["containers"]:
        resources = container.get("resources", {})
        for resource in GPU_RESOURCES:
            value = resources.get("limits", {}).get(resource) or resources.get("requests", {}).get(resource)
            asked[resource] += int(value or 0)
    return asked


LISTED = ("pods", "services", "statefulsets", "endpointslices", "events")


def snapshot(plane: ControlPlane, namespace: str) -> dict[str, list[dict[str, Any]]]:
    """What the namespace holds of each kind the checks read: one request per kind."""
    return {kind: plane.items(kind, namespace) for kind in LISTED}


def _labelled(objects: list[dict[str, Any]], labels: Mapping[str, str]) -> list[dict[str, Any]]:
    return [o for o in objects if labels.items() <= (o["metadata"].get("labels") or {}).items()]


def problems(
    held: Mapping[str, list[dict[str, Any]]], documents: Sequence[Mapping[str, Any]], needs_gpus: bool
) -> list[str]:
    """What the cluster has not (yet) made of the applied objects; empty once every controller is done."""
    found: list[str] = []
    for doc in documents:
        kind, name = doc["kind"], doc["metadata"]["name"]
        if kind == "LeaderWorkerSet":
            found += _group_problems(held, doc, needs_gpus)
        elif kind == "Deployment":
            pods = _labelled(held["pods"], doc["spec"]["selector"]["matchLabels"])
            wanted = doc["spec"].get("replicas", 1)
            found += _pod_problems(held, f"Deployment {name}", pods, wanted, needs_gpus)
        elif kind == "Service" and doc["spec"].get("clusterIP") != "None":
            slices = _labelled(held["endpointslices"], {"kubernetes.io/service-name": name})
            ready = [
                e for s in slices for e in s.get("endpoints") or [] if e.get("conditions", {}).get("ready")
            ]
            if not ready:
                found.append(f"Service {name}: no ready endpoint (its selector matches no Ready pod)")
    return found


def _group_problems(
    held: Mapping[str, list[dict[str, Any]]], lws: Mapping[str, Any], needs_gpus: bool
) -> list[str]:
    name = lws["metadata"]["name"]
    groups, size = lws["spec"].get("replicas", 1), lws["spec"]["leaderWorkerTemplate"].get("size", 1)
    found: list[str] = []
    headless = [s for s in held["services"] if s["metadata"]["name"] == name]
    owners = [o["kind"] for s in headless for o in s["metadata"].get("ownerReferences", [])]
    if not headless or headless[0]["spec"].get("clusterIP") != "None" or "LeaderWorkerSet" not in owners:
        found.append(
            f"LeaderWorkerSet {name}: no headless Service of its own (LWS makes none where a Service of "
            f"that name exists; found: {[s['spec'].get('clusterIP') for s in headless]})"
        )
    sets = {s["metadata"]["name"] for s in _labelled(held["statefulsets"], {LWS_NAME: name})}
    wanted = {name} | ({f"{name}-{g}" for g in range(groups)} if size > 1 else set())
    if wanted - sets:
        found.append(f"LeaderWorkerSet {name}: StatefulSets {sorted(wanted - sets)} missing")
    pods = _labelled(held["pods"], {LWS_NAME: name})
    found += _pod_problems(held, f"LeaderWorkerSet {name}", pods, groups * size, needs_gpus)
    for pod in pods:
        names = {e["name"] for c in pod["spec"]["containers"] for e in c.get("env", [])}
        if "LWS_LEADER_ADDRESS" not in names:
            found.append(f"pod {pod['metadata']['name']}: LWS's webhook set no LWS_LEADER_ADDRESS")
    return found


def _pod_problems(
    held: Mapping[str, list[dict[str, Any]]],
    owner: str,
    pods: list[dict[str, Any]],
    wanted: int,
    needs_gpus: bool,
) -> list[str]:
    found: list[str] = []
    if len(pods) != wanted:
        owned = owner.split()[-1]
        refused = [
            e["message"]
            for e in held["events"]
            if e["reason"] == "FailedCreate" and e["involvedObject"]["name"].startswith(owned)
        ]
        found.append(f"{owner}: {len(pods)} of {wanted} pods; refused: {refused[-1:] or 'none recorded'}")
    for pod in pods:
        pod_name = pod["metadata"]["name"]
        if pod["status"].get("phase") != "Running" or not pod["spec"].get("nodeName"):
            found.append(f"pod {pod_name}: {pod['status'].get('phase')} on {pod['spec'].get('nodeName')}")
        # The renderer's note of the GPUs the process uses (a router uses none) against what it asks for.
        uses = int((pod["metadata"].get("annotations") or {}).get("ai.vllm.factory.gpus", "0"))
        if needs_gpus and uses and not any(_gpus(pod).values()):
            found.append(f"pod {pod_name}: asks for no GPU (nvidia.com/gpu or amd.com/gpu)")
    return found


def wait_reconciled(
    plane: ControlPlane,
    namespace: str,
    applied: Sequence[tuple[Sequence[Mapping[str, Any]], bool]],
    timeout: float = 240,
) -> list[str]:
    """Waits until no applied object (its documents, whether they need GPUs) has a problem left; returns
    what is left at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        held = snapshot(plane, namespace)
        left = [p for docs, gpus in applied for p in problems(held, docs, gpus)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(3)


def generations(plane: ControlPlane, namespace: str) -> dict[str, int]:
    """metadata.generation of every object of the kinds the manifests hold, as the API server has them."""
    kinds = "deployments,leaderworkersets,services,configmaps"
    listed = json.loads(plane.kubectl("get", kinds, "-n", namespace, "-o", "json"))["items"]
    return {f"{o['kind']}/{o['metadata']['name']}": int(o["metadata"].get("generation", 0)) for o in listed}
