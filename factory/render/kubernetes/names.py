"""Names in the Kubernetes format: where each deployment's files go, the objects' names (within what LWS and
the StatefulSet controller build from them), the labels, and the shared kustomize components."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import PurePosixPath

from factory.base.errors import InputError
from factory.plan.deployment import Deployment
from factory.plan.runspec import ProcessGroup

ROOT = "k8s"
LWS_API = "leaderworkerset.x-k8s.io/v1"
MIN_LWS = "v0.7.0"  # the oldest LWS release whose CRD accepts every manifest (a test checks each release)
KUBERNETES_VERSIONS = ("1.30", "1.37")  # first and last release the core objects were checked against
NAME_LABEL = "app.kubernetes.io/name"
INSTANCE_LABEL = "app.kubernetes.io/instance"  # the deployment's name, on each of its objects and pods
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
# The kustomize Component every kustomization includes: it names each published image by registry and
# digest (printed by render/published_images.py from the publish record). "_" starts no image slug.
IMAGES_COMPONENT = PurePosixPath(ROOT) / "_published"
# The kustomize Component a user adds to put the model cache on a claim (render/model_cache_claim.py). It
# patches the pod templates at these paths, in the workloads labelled as serving (not the router's).
CLAIM_COMPONENT = PurePosixPath(ROOT) / "_model-cache-claim"
COMPONENT_LABEL = "app.kubernetes.io/component"
# Every object the factory generates carries it (the verify component's floor selects workloads by it).
MANAGED_BY = {"app.kubernetes.io/managed-by": "vllm-factory"}
SERVER_COMPONENT = "server"
# On the pods of every vLLM process that serves the API (not a headless rank): what the PodMonitor scrapes
# and an InferencePool selects.
SERVES_LABEL = "ai.vllm.factory.serves"
SERVES_API = "api"
NETWORK_POLICY_FILE = "network-policy.yaml"  # beside manifest.yaml: render/network_policy.py prints it
TEMPLATE_PATHS = {
    "Deployment": ("/spec/template",),
    "LeaderWorkerSet": (
        "/spec/leaderWorkerTemplate/leaderTemplate",
        "/spec/leaderWorkerTemplate/workerTemplate",
    ),
}

ROUTER = "router"  # the P/D router's part of its objects' names, and its component label


def deployable(deployment: Deployment) -> bool:
    """Deployments printed as manifests: every one, one with a router (prefill/decode, a KV store's) once the
    router is locked (a pod needs its image; compose can take it from a setting)."""
    return not any(group.spec.image.startswith("$") for group in deployment.run)


def require_deployable(deployment: Deployment, where: str) -> None:
    """Refuses a deployment whose router is not locked, saying why and what to run."""
    if not deployable(deployment):
        raise InputError(
            f"{where}: the router is not locked, and a pod needs its image (compose takes it from "
            "$VLLM_ROUTER_IMAGE)",
            field="router",
            hint="run `factory lock` (it locks vllm-router beside vLLM)",
        )


def directory(deployment: Deployment) -> PurePosixPath:
    image = deployment.image
    base = PurePosixPath(ROOT) / image.slug / f"{image.hardware}-{image.variant}" / deployment.layout
    return base / f"{deployment.nodes}-nodes" if deployment.deploy_type == "multi_node" else base


# What the controllers build from an LWS's name must fit a label value (63 characters): LWS names a group's
# worker StatefulSet `<lws>-<group>`, and the StatefulSet controller labels its pods
# `controller-revision-hash: <statefulset>-<hash of up to 10 characters>`. With room for 99 groups:
# 63 - len("-") - 2 - len("-") - 10 = 49. (A name of 52 left the worker pods refused by the API server.)
LABEL_LIMIT = 63
REVISION_HASH = 10
GROUP_DIGITS = 2
NAME_BUDGET = LABEL_LIMIT - 1 - GROUP_DIGITS - 1 - REVISION_HASH
# LWS makes a headless Service named after the LWS, and makes none when one of that name exists: the
# Service in front of a multi-node deployment takes another name, or the leader's DNS name never resolves.
SERVICE_SUFFIX = "api"


def object_name(deployment: Deployment, part: str = "") -> str:
    """A DNS label short enough for what LWS and the StatefulSet controller build from it (NAME_BUDGET);
    `part` (a PD pool, the router) ends it."""
    image = deployment.image
    text = "-".join([image.slug, image.hardware, image.variant, deployment.layout])
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    room = NAME_BUDGET - (len(part) + 1 if part else 0)
    if len(name) > room:
        name = f"{name[: room - 7].rstrip('-')}-{hashlib.sha256(name.encode()).hexdigest()[:6]}"
    name = name if name[0].isalpha() else f"m-{name}"
    return f"{name}-{part}" if part else name


# --- a KV-store deployment: one workload per unit (the master, the store service, each instance, the router)


def unit(group: ProcessGroup) -> str:
    """The unit of a KV-store deployment a process group belongs to: its instance (a pool: the head and its
    ranks, one LWS when it has several nodes), else its own process (master, store, router)."""
    return group.pool or group.names[0]


@dataclass(frozen=True)
class Units:
    """A KV-store deployment's units: each one's process groups, workload and Service, by unit."""

    groups: dict[str, list[ProcessGroup]]
    names: dict[str, str]
    services: dict[str, str]


_LAST: list[tuple[Deployment, Units]] = []  # the deployment whose units were asked last, and its units


def units_of(deployment: Deployment) -> Units:
    """The units of a deployment, computed once: every pod's values read them (a table per process group),
    and computing them again per group cost n^3 in the instance count (64 instances: 12.6 s)."""
    if _LAST and _LAST[0][0] is deployment:
        return _LAST[0][1]
    groups: dict[str, list[ProcessGroup]] = {}
    for group in deployment.run:
        groups.setdefault(unit(group), []).append(group)
    names = {part: object_name(deployment, part) for part in groups}
    serving = [unit(group) for group in deployment.run if group.spec.program == "vllm"]
    entry = ROUTER if ROUTER in names else serving[0]
    services = {}
    for part, name in names.items():
        nodes = sum(len(group.names) for group in groups[part])
        over_lws = f"{name}-{SERVICE_SUFFIX}" if nodes > 1 else name
        services[part] = object_name(deployment) if part == entry else over_lws
    units = Units(groups, names, services)
    _LAST[:] = [(deployment, units)]
    return units


def unit_names(deployment: Deployment) -> dict[str, str]:
    """Each unit's workload (a Deployment, or the LWS of a multi-node instance), by unit."""
    return units_of(deployment).names


def unit_services(deployment: Deployment) -> dict[str, str]:
    """Each unit's Service: the deployment's entry point (the router, or the only instance where there is
    none) takes the deployment's name; one over an LWS never the LWS's (LWS's headless Service has it)."""
    return units_of(deployment).services
