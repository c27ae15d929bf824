"""The Kubernetes format: per deployment one manifest file and a kustomization, printed from its run spec.

One node: a Deployment and a Service. Multi-node: a LeaderWorkerSet (leaderworkerset.x-k8s.io/v1) whose
leader runs the head's spec and whose workers run the one worker spec, the rank taken from LWS's
$(LWS_WORKER_INDEX), plus a Service over the pods that serve HTTP.

Prefill/decode: one LeaderWorkerSet per pool (size = the pool's nodes, 1 for a one-node pool) and the router
as a Deployment with the Service in front of it, not LWS's DisaggregatedSet. Why: the router names each pool
node by address, and an LWS we name gives every node a stable DNS name (`<pool>-0` its leader, `<pool>-0-<i>`
its other nodes, under LWS's headless Service `<pool>`), while the LWSs a DisaggregatedSet makes are named
by its controller (their names are not in its CRD) and it has no place for the router (llm-d runs it as a
sidecar); and a DisaggregatedSet needs LWS v0.9.0, these manifests the same v0.7.0 as every other LWS here.
What a DisaggregatedSet adds, rolling the pools out together, is not needed for one copy of the deployment.

Everything Kubernetes-specific lives here; the only mapping from compose settings to pod values is
SETTING_VALUES. The objects are plain mappings checked by the schemas they are applied against (the LWS CRD
of each claimed release, Kubernetes' own, through `kubernetes-validate`) in tests; this module decides no
run option.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from factory.errors import InputError
from factory.plan.models import Deployment
from factory.plan.runspec import FromIndex, ProcessGroup, RunSpec, Value
from factory.plan.settings import PLACEHOLDER, known_setting, setting
from factory.render import yaml_text
from factory.synthesis.values import pool_node_setting, read_pool_node

Manifest = dict[str, Any]

ROOT = "k8s"
LWS_API = "leaderworkerset.x-k8s.io/v1"
MIN_LWS = "v0.7.0"  # the oldest LWS release whose CRD accepts every manifest (a test checks each release)
KUBERNETES_VERSIONS = ("1.30", "1.37")  # first and last release the core objects were checked against
NAME_LABEL = "app.kubernetes.io/name"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
INDEX = "$(LWS_WORKER_INDEX)"  # LWS's pod webhook sets it in every container: 0 is the leader
POD_IP = "POD_IP"
# A value computed from the index (a data-parallel start rank: index x the local DP size) needs arithmetic,
# which Kubernetes' $(VAR) does not do: this fixed line multiplies one positional argument and starts the
# image's launcher with the rest. Every recipe value reaches it as an argument, never as shell text.
RANK_SCRIPT = (
    'at=$1 times=$2; shift 2; i=0; for arg; do shift; i=$((i + 1)); [ "$i" = "$at" ] && '
    'arg=$((arg * times)); set -- "$@" "$arg"; done; exec factory-serve "$@"'
)


@dataclass(frozen=True)
class PodValue:
    """What a compose setting becomes in a pod: text with $(VAR) references, and where each VAR comes from."""

    text: str
    env: tuple[tuple[str, dict[str, Any]], ...] = ()  # env entries the text needs (from the downward API)
    config: bool = False  # the setting is a key of the deployment's ConfigMap, its default the value


# The one table from compose settings to pod values; a setting not here cannot be printed for Kubernetes.
SETTING_VALUES: dict[str, PodValue] = {
    # LWS's webhook gives every pod of a group the leader's DNS name.
    "HEAD_IP": PodValue("$(LWS_LEADER_ADDRESS)"),
    # In a pod, a serving process listens on the pod's address, not on the host's loopback.
    "BIND_ADDRESS": PodValue(
        f"$({POD_IP})", env=((POD_IP, {"valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}),)
    ),
    "MASTER_PORT": PodValue("$(MASTER_PORT)", config=True),
    "DP_RPC_PORT": PodValue("$(DP_RPC_PORT)", config=True),
    "IFACE_NAME": PodValue("$(IFACE_NAME)", config=True),
}


@dataclass(frozen=True)
class Table:
    """The setting values of one process group: SETTING_VALUES, and for a PD process its pool addresses."""

    values: dict[str, PodValue]
    # a PD pool process's pool: its own address (a FromIndex, a bound variable) is its pod's
    own_pool: str | None = None


DEFAULT = Table(SETTING_VALUES)
# ConfigMap values where a setting has no default on a host: a pod's network interface is eth0.
CONFIG_DEFAULTS = {"IFACE_NAME": "eth0"}
# Docker security options as a container's securityContext.
SECURITY_OPTIONS = {
    "seccomp=unconfined": ("seccompProfile", {"type": "Unconfined"}),
    "apparmor=unconfined": ("appArmorProfile", {"type": "Unconfined"}),
}
ARCHITECTURES = {"linux/amd64": "amd64", "linux/arm64": "arm64"}
# Variables a pod given a GPU resource leaves out: the device plugin gives it its own GPUs, numbered from 0,
# so the node's numbering compose splits a node's GPUs by (a PD pool's "4,5,6,7") names GPUs it has not.
DEVICE_ENV = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")
# The kustomize Component every kustomization includes: it names each published image by registry and
# digest (printed by render/published_images.py from the publish record). "_" starts no image slug.
IMAGES_COMPONENT = PurePosixPath(ROOT) / "_published"
# The kustomize Component a user adds to put the model cache on a claim (render/model_cache_claim.py). It
# patches the pod templates at these paths, in the workloads labelled as serving (not the router's).
CLAIM_COMPONENT = PurePosixPath(ROOT) / "_model-cache-claim"
COMPONENT_LABEL = "app.kubernetes.io/component"
SERVER_COMPONENT = "server"
TEMPLATE_PATHS = {
    "Deployment": ("/spec/template",),
    "LeaderWorkerSet": (
        "/spec/leaderWorkerTemplate/leaderTemplate",
        "/spec/leaderWorkerTemplate/workerTemplate",
    ),
}

# Run spec fields Kubernetes manifests cannot express, and why (a test keeps this list complete).
CANNOT_EXPRESS = {
    "devices": "a pod is given a GPU's device files by the vendor's device plugin (the GPU resource), not "
    "by host path",
    "groups": "the device plugin gives the container access to the devices it allocates; Kubernetes takes "
    "supplementary groups by number only, and the host's render group id is the host's",
    "gpu_request": "a pod asks for GPUs by its vendor's device plugin resource (gpu_resource, from the "
    "catalog), not by the engine's GPU driver",
    "ulimits": "a pod spec has no per-container ulimits: the node's container runtime sets them",
    "publish_address": "a Service publishes the API inside the cluster; how it leaves the cluster (an "
    "Ingress, a LoadBalancer) is the cluster's own choice",
    "restart": "a Deployment's pods always restart (the only policy it allows) and an LWS recreates its "
    "group when a pod restarts",
    "network": "every pod has an address every other pod reaches (the nodes meet there, no host network); "
    "a Service publishes the API",
}


def deployable(deployment: Deployment) -> bool:
    """Deployments printed as manifests: every one, a prefill/decode one once the router is locked (a pod
    needs its image; compose can take it from a setting)."""
    return not any(group.spec.image.startswith("$") for group in deployment.run)


def directory(deployment: Deployment) -> PurePosixPath:
    image = deployment.image
    base = PurePosixPath(ROOT) / image.slug / f"{image.hardware}-{image.variant}" / deployment.strategy
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
    text = "-".join([image.slug, image.hardware, image.variant, deployment.strategy])
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    room = NAME_BUDGET - (len(part) + 1 if part else 0)
    if len(name) > room:
        name = f"{name[: room - 7].rstrip('-')}-{hashlib.sha256(name.encode()).hexdigest()[:6]}"
    name = name if name[0].isalpha() else f"m-{name}"
    return f"{name}-{part}" if part else name


def pod_text(value: str, where: str, table: Table = DEFAULT) -> tuple[str, list[str]]:
    """A value as a pod field: every literal `$` doubled (Kubernetes reads $$ as $), each setting its $(VAR)
    from the table (SETTING_VALUES). Returns the text and the settings it names."""
    values = table.values
    parts: list[str] = []
    names: list[str] = []
    last = 0
    for match in PLACEHOLDER.finditer(value):
        name = match.group("braced") or match.group("bare")
        if known_setting(name) is None:
            continue
        if name not in values:
            raise InputError(
                f"{where} uses ${name}, which has no value in a pod",
                field="setting",
                value=name,
                valid=sorted(values),
            )
        parts.append(value[last : match.start()].replace("$", "$$"))
        parts.append(values[name].text)
        names.append(name)
        last = match.end()
    parts.append(value[last:].replace("$", "$$"))
    return "".join(parts), names


def _command(
    spec: RunSpec, where: str, table: Table = DEFAULT
) -> tuple[list[str] | None, list[str], list[str]]:
    """(command, args, settings used): the image's entrypoint with the args, or the rank line when a value
    needs arithmetic."""
    args: list[str] = []
    names: list[str] = []
    computed: list[tuple[int, FromIndex]] = []
    for position, arg in enumerate(spec.args, start=1):
        if isinstance(arg, FromIndex):
            if arg.address_of is not None:
                if arg.address_of != table.own_pool:  # its own node's address: its pod's
                    raise InputError(
                        f"{where}: a pool node's address has no pod value", field="args", value=arg
                    )
                args.append(POD_ADDRESS.text)
                names.append(POD_ADDRESS_SETTING)
                continue
            if arg.times != 1:
                computed.append((position, arg))
            args.append(INDEX)
            continue
        text, used = pod_text(arg, where, table)
        args.append(text)
        names += used
    if not computed:
        return None, args, names
    if len(computed) > 1 or spec.program != "vllm":
        raise InputError(f"{where}: only one computed rank value is supported", field="args", value=computed)
    position, value = computed[0]
    script = RANK_SCRIPT.replace("$", "$$")  # Kubernetes reads $$ as $: the shell gets the line as written
    return ["sh", "-c", script, "vllm-factory", str(position), str(value.times)], args, names


def _env_value(name: str, value: Value, where: str, table: Table = DEFAULT) -> tuple[str, list[str]]:
    own = FromIndex(address_of=table.own_pool)
    if table.own_pool and (value == own or (name in BOUND_ENV and _pool_address(value) is not None)):
        # its own node's address, or one vLLM binds on its own node whichever node compose names
        return POD_ADDRESS.text, [POD_ADDRESS_SETTING]
    if isinstance(value, FromIndex):
        if value.times != 1 or value.address_of is not None:
            raise InputError(
                f"{where}: an environment value computed from the index", field="env", value=value
            )
        return INDEX, []
    return pod_text(value, where, table)


def _shm_size(size: str) -> tuple[int, str]:
    """Docker's size (`2g`) as a number and a Kubernetes binary unit (2, "Gi"; Docker's units are binary)."""
    match = re.fullmatch(r"(\d+)([kmgt]?)b?", size.lower())
    if match is None:
        raise InputError("a shared memory size Kubernetes cannot read", field="shm_size", value=size)
    number, unit = match.groups()
    return int(number), {"": "", "k": "Ki", "m": "Mi", "g": "Gi", "t": "Ti"}[unit]


def _shm_limit(size: str) -> str:
    """Docker's 2g as Kubernetes' 2Gi."""
    number, unit = _shm_size(size)
    return f"{number}{unit}"


def _shm_mebibytes(size: str) -> int:
    """Docker's size in MiB, rounded up."""
    number, unit = _shm_size(size)
    return math.ceil(number * {"": 2**-20, "Ki": 2**-10, "Mi": 1, "Gi": 2**10, "Ti": 2**20}[unit])


def _probes(spec: RunSpec) -> dict[str, Any]:
    if spec.probe is None:
        return {}
    probe = spec.probe
    check = {"httpGet": {"path": probe.path, "port": "http"}, "timeoutSeconds": probe.timeout_s}
    every = {"periodSeconds": probe.interval_s, "failureThreshold": probe.retries}
    return {
        # the start budget (loading the model): checked every 10 s until it is used up
        "startupProbe": {
            **check,
            "periodSeconds": 10,
            "failureThreshold": math.ceil(probe.start_period_s / 10),
        },
        "readinessProbe": {**check, **every},
        "livenessProbe": {**check, **every},
    }


def _replacement(spec: RunSpec) -> dict[str, Any]:
    """A pod that holds GPUs is replaced, not rolled: a rolling update starts the new pod first, which asks
    for a second node's worth of GPUs while the old pod holds them (Pending, where there is none)."""
    return {"strategy": {"type": "Recreate"}} if _gpu_limits(spec) else {}


# The model cache's room beyond the checkpoint: the kubelet evicts a pod whose emptyDir outgrows its
# sizeLimit, so a tight one would evict on the tokenizer's and the hub's own files.
CACHE_ROOM = 1.25


def _cache_limit(spec: RunSpec) -> str | None:
    """The model cache's size limit, from the checkpoint's size where the recipe gives it."""
    if spec.cache_gb is None:
        return None
    return f"{math.ceil(spec.cache_gb * 1e9 / 2**30 * CACHE_ROOM) + 1}Gi"


def _requests(spec: RunSpec) -> dict[str, Any]:
    """CPU (the catalog's, plus one per GPU the process drives), memory (the catalog's, plus /dev/shm, a
    memory-backed emptyDir the pod's memory counts) and, where the model cache is sized, its disk."""
    if spec.requests is None:
        return {}
    shm = _shm_mebibytes(spec.shm_size) if spec.shm_size else 0
    memory = spec.requests.memory_gib * 1024 + shm
    asked = {
        "cpu": str(spec.requests.cpu + spec.gpus),
        "memory": f"{memory // 1024}Gi" if memory % 1024 == 0 else f"{memory}Mi",
    }
    cache = _cache_limit(spec)
    return {"requests": asked | ({"ephemeral-storage": cache} if cache else {})}


def _gpu_limits(spec: RunSpec) -> dict[str, Any]:
    resource = spec.gpu_resource  # the vendor's device plugin's, from the catalog
    if resource is None:  # the CPU backend (the pod's annotation still says how many GPUs it uses)
        return {}
    # A quantity as the API server stores it, a string: an LWS keeps its pod templates as sent (a custom
    # resource), and each `kubectl apply` of the number 8 over the stored "8" moved its generation.
    return {"limits": {resource: str(spec.gpus)}}


def _security(spec: RunSpec) -> dict[str, Any]:
    context: dict[str, Any] = {}
    if spec.capabilities:
        context["capabilities"] = {"add": list(spec.capabilities)}
    for option in spec.security_opt:
        if option not in SECURITY_OPTIONS:
            raise InputError(
                "a security option with no Kubernetes field",
                field="security_opt",
                value=option,
                valid=sorted(SECURITY_OPTIONS),
            )
        key, value = SECURITY_OPTIONS[option]
        context[key] = value
    return {"securityContext": context} if context else {}


def pod_template(
    deployment: Deployment, spec: RunSpec, labels: dict[str, str], where: str, table: Table = DEFAULT
) -> Manifest:
    """The pod of one process group: its container printed from the spec."""
    name = object_name(deployment)
    command, args, names = _command(spec, where, table)
    env: list[dict[str, Any]] = []
    extra: list[tuple[str, Value]] = list(spec.env)
    values: list[tuple[str, str]] = []
    if _gpu_limits(spec):
        extra = [(env_name, value) for env_name, value in extra if env_name not in DEVICE_ENV]
    for env_name, value in extra:
        text, used = _env_value(env_name, value, where, table)
        names += used
        values.append((env_name, text))
    # Settings first: an env value names them as $(VAR), which Kubernetes expands from earlier entries only.
    for setting_name in dict.fromkeys(names):
        mapped = table.values[setting_name]
        known = {entry["name"] for entry in env}  # two settings may be the same pod value ($(POD_IP))
        env += [{"name": var, **source} for var, source in mapped.env if var not in known]
        if mapped.config:
            ref = {"name": f"{name}-settings", "key": setting_name}
            env.append({"name": setting_name, "valueFrom": {"configMapKeyRef": ref}})
    env += [
        {
            "name": s.env,
            "valueFrom": {
                "secretKeyRef": {"name": _secret_name(s.env), "key": s.env, "optional": s.optional}
            },
        }
        for s in spec.secrets
    ]
    env += [{"name": env_name, "value": text} for env_name, text in values]
    # The catalog's volumes come first, in its order: the model cache component patches them by index.
    mounts = [{"name": volume.name, "mountPath": volume.target} for volume in spec.volumes]
    cache = _cache_limit(spec)
    volumes: list[dict[str, Any]] = [
        {"name": volume.name, "emptyDir": {"sizeLimit": cache} if cache else {}} for volume in spec.volumes
    ]
    if spec.shm_size:
        mounts.append({"name": "dshm", "mountPath": "/dev/shm"})
        volumes.append(
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": _shm_limit(spec.shm_size)}}
        )
    container: dict[str, Any] = {"name": spec.program, "image": spec.image}
    container |= {"command": command} if command else {}
    container |= {"args": args, "env": env}
    container |= {"ports": [{"name": "http", "containerPort": spec.port}]} if spec.probe else {}
    resources = _gpu_limits(spec) | _requests(spec)
    container |= {"resources": resources} if resources else {}
    container |= _security(spec) | {"volumeMounts": mounts} | _probes(spec)
    annotations = dict(spec.all_labels)
    annotations["ai.vllm.factory.gpus"] = str(spec.gpus)  # the GPUs the process uses
    pod: dict[str, Any] = {
        # No variables for every Service of the namespace: vLLM reads none, and a Service named `vllm`
        # would give each pod VLLM_PORT=tcp://..., which vLLM takes for its own setting.
        "enableServiceLinks": False,
        "nodeSelector": {"kubernetes.io/arch": ARCHITECTURES[spec.platform]},
        "containers": [container],
        "volumes": volumes,
    }
    return {"metadata": {"labels": labels, "annotations": annotations}, "spec": pod}


def _secret_name(env: str) -> str:
    return env.lower().replace("_", "-")


def objects(deployment: Deployment) -> list[Manifest]:
    """The deployment's objects: its ConfigMap (when it uses a setting), the workload, the Service."""
    name = object_name(deployment)
    where = f"{deployment.image.reference} {deployment.strategy}"
    labels = {
        NAME_LABEL: name,
        COMPONENT_LABEL: SERVER_COMPONENT,
        "app.kubernetes.io/managed-by": "vllm-factory",
    }
    metadata = {"name": name, "labels": labels}
    if deployment.deploy_type == "pd_cluster":
        return _pd_objects(deployment, name, labels, where)
    if deployment.deploy_type == "single_node":
        spec = deployment.run[0].spec
        template = pod_template(deployment, spec, labels, where)
        workload: Manifest = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": metadata,
            "spec": {
                "replicas": 1,
                **_replacement(spec),
                "selector": {"matchLabels": {NAME_LABEL: name}},
                "template": template,
            },
        }
        serving, selector = spec, {NAME_LABEL: name}
    else:
        head, workers = deployment.run[0], deployment.run[1:]
        if len(workers) != 1 or len(deployment.run[0].names) != 1:
            raise InputError(f"{where}: workers that do not share one spec", field="run", value=len(workers))
        leader = pod_template(deployment, head.spec, labels, where)
        worker = pod_template(deployment, workers[0].spec, labels, where)
        workload = {
            "apiVersion": LWS_API,
            "kind": "LeaderWorkerSet",
            "metadata": metadata,
            "spec": {
                "replicas": 1,
                "startupPolicy": "LeaderCreated",
                "leaderWorkerTemplate": {
                    "size": deployment.nodes,
                    # one rank lost stops the group: recreate all of it
                    "restartPolicy": "RecreateGroupOnPodRestart",
                    "leaderTemplate": leader,
                    "workerTemplate": worker,
                },
            },
        }
        serving = head.spec
        selector = {LWS_NAME_LABEL: name}
        if workers[0].spec.probe is None:  # only the leader serves; with hybrid load balancing every rank
            selector[LWS_INDEX_LABEL] = "0"
    found: list[Manifest] = []
    config = _config_map(deployment, name, labels)
    found += [config] if config else []
    # The LWS's own headless Service has the LWS's name: the Service in front of it may not.
    service_name = f"{name}-{SERVICE_SUFFIX}" if workload["kind"] == "LeaderWorkerSet" else name
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {**metadata, "name": service_name},
        "spec": {
            "selector": selector,
            "ports": [{"name": "http", "port": serving.port, "targetPort": "http"}],
        },
    }
    return [*found, workload, service]


def settings_used(deployment: Deployment) -> list[str]:
    """The ConfigMap's settings: every config setting a pod of the deployment names."""
    where = deployment.strategy
    names: list[str] = []
    config: set[str] = set()
    for group in deployment.run:
        table = table_of(deployment, group)
        used = _command(group.spec, where, table)[2]
        used += [n for k, v in group.spec.env for n in _env_value(k, v, where, table)[1]]
        names += used
        config |= {n for n in used if table.values[n].config}
    return [n for n in dict.fromkeys(names) if n in config]


def _config_map(deployment: Deployment, name: str, labels: dict[str, str]) -> Manifest | None:
    names = settings_used(deployment)
    if not names:
        return None
    data = {n: CONFIG_DEFAULTS.get(n) or setting(n).default or "" for n in names}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{name}-settings", "labels": labels},
        "data": data,
    }


def _header(deployment: Deployment) -> str:
    image = deployment.image
    source = f"{image.recipe_file}, its strategy and the catalog"
    return (
        f"# DO NOT EDIT: generated by `factory generate` from {source}.\n"
        f"# {deployment.strategy_title}: {image.model_id} on {image.hardware_name}"
        f"{f', {deployment.nodes} nodes' if deployment.deploy_type == 'multi_node' else ''}.\n"
    )


def _dump(documents: list[Manifest]) -> str:
    return "---\n".join(yaml_text.dump(d) for d in documents)


def render(deployment: Deployment) -> str:
    """manifest.yaml: every object of the deployment."""
    start = "kubectl apply -k ." + (
        " (needs LeaderWorkerSet " + MIN_LWS + " or later)" if deployment.deploy_type != "single_node" else ""
    )
    return _header(deployment) + f"# Start: {start}\n" + _dump(objects(deployment))


def kustomization(deployment: Deployment) -> str:
    """kustomization.yaml: the manifest, the component that pins published images by digest, its images (a
    kustomize `images:` entry to point at a mirror), and the settings a user changes with a patch of the
    ConfigMap."""
    images = dict.fromkeys(group.spec.image for group in deployment.run)  # the PD router's is its own
    up = PurePosixPath(*[".."] * (len(directory(deployment).parts) - 1))  # back to k8s/
    notes = [f"#   {n}: {setting(n).why}" for n in settings_used(deployment)]
    settings = ["# Settings (ConfigMap <name>-settings, change them with a patch):", *notes] if notes else []
    body = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": ["manifest.yaml"],
        "components": [(up / IMAGES_COMPONENT.name).as_posix()],
        "images": [{"name": r, "newTag": t} for r, _, t in (i.rpartition(":") for i in images)],
    }
    secrets = deployment.run[0].spec.secrets
    cache = _cache_limit(deployment.run[0].spec)
    claim = ", ".join(volume.name for volume in deployment.run[0].spec.volumes)
    lines = [
        *settings,
        *(
            [f"# The model cache on a claim: {CLAIM_COMPONENT.name}, claim {claim} of {cache} or more"]
            if cache and claim
            else []
        ),
        *(
            f"# {s.what}: kubectl create secret generic {_secret_name(s.env)} --from-literal={s.env}=..."
            for s in secrets
        ),
    ]
    return _header(deployment) + "".join(f"{line}\n" for line in lines) + yaml_text.dump(body)


# --- prefill/decode: a LeaderWorkerSet per pool, the router's Deployment and its Service -----------------

# Variables naming an address vLLM binds on the process's own node (NIXL's side channel listens there): in a
# pod that is the pod's address, whichever node compose names (a headless TP rank's names the pool's first).
BOUND_ENV = ("VLLM_NIXL_SIDE_CHANNEL_HOST",)
POD_ADDRESS_SETTING = "BIND_ADDRESS"
POD_ADDRESS = SETTING_VALUES[POD_ADDRESS_SETTING]  # $(POD_IP), from status.podIP
ROUTER = "router"


def _pool_address(value: Value) -> tuple[str, int] | None:
    """(pool, node number) of a value that is one pool node's address setting ($DECODE_NODE_2)."""
    match = PLACEHOLDER.fullmatch(value) if isinstance(value, str) else None
    return read_pool_node(match["braced"] or match["bare"]) if match else None


def pool_names(deployment: Deployment) -> dict[str, str]:
    """Each pool's LWS name (also the name of LWS's headless Service over its pods), by pool."""
    pools = dict.fromkeys(group.pool for group in deployment.run if group.pool)
    return {pool: object_name(deployment, pool) for pool in pools}


def pool_sizes(deployment: Deployment) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for group in deployment.run:
        if group.pool:
            sizes[group.pool] = sizes.get(group.pool, 0) + len(group.names)
    return sizes


def node_address(deployment: Deployment, pool: str, node: int) -> str:
    """The stable DNS name of a pool's node (1: its first) in LWS's group 0: never a pod IP."""
    lws = pool_names(deployment)[pool]
    return f"{lws}-0.{lws}" if node == 1 else f"{lws}-0-{node - 1}.{lws}"


def table_of(deployment: Deployment, group: ProcessGroup, index: int | None = None) -> Table:
    """The setting values of one group (of its node at `index`, as compose names that node's own address):
    for a pool's node, its own address is its pod's and the pool's first node is the LWS leader; for the
    router, each pool node is its stable DNS name, and it listens on its pod's address at the port its Service
    targets."""
    own = (index,) if index is not None else group.indices
    if deployment.deploy_type != "pd_cluster":
        return DEFAULT
    values = dict(SETTING_VALUES)
    sizes = pool_sizes(deployment)
    for pool, size in sizes.items():
        values[f"{pool.upper()}_DP_RPC_PORT"] = PodValue(f"$({pool.upper()}_DP_RPC_PORT)", config=True)
        for node in range(1, size + 1):
            key = pool_node_setting(pool, node)
            if group.pool is None:
                values[key] = PodValue(node_address(deployment, pool, node))
            elif pool == group.pool and own == (node - 1,):
                values[key] = POD_ADDRESS
            elif pool == group.pool and node == 1:
                values[key] = SETTING_VALUES["HEAD_IP"]  # $(LWS_LEADER_ADDRESS): the pool's first node
    if group.pool is None:
        values["ROUTER_HOST"] = POD_ADDRESS
        values["ROUTER_PORT"] = PodValue(str(group.spec.port))  # the port its Service targets
    return Table(values, group.pool)


def _pd_objects(deployment: Deployment, name: str, labels: dict[str, str], where: str) -> list[Manifest]:
    if not deployable(deployment):
        raise InputError(
            f"{where}: the router is not locked, and a pod needs its image (compose takes it from "
            "$VLLM_ROUTER_IMAGE)",
            field="router",
            hint="run `factory lock` (it locks vllm-router beside vLLM)",
        )
    found: list[Manifest] = []
    config = _config_map(deployment, name, labels)
    found += [config] if config else []
    for pool, lws in pool_names(deployment).items():
        groups = [group for group in deployment.run if group.pool == pool]
        leader, workers = groups[0], groups[1:]
        if len(workers) > 1 or leader.indices != (0,):
            raise InputError(
                f"{where}: {pool} nodes that do not share one spec", field="run", value=len(workers)
            )
        pool_labels = {**labels, NAME_LABEL: lws}
        first = _pool_pod(deployment, leader, pool_labels, f"{where} {pool}")
        template: Manifest = {
            "size": pool_sizes(deployment)[pool],
            "restartPolicy": "RecreateGroupOnPodRestart",
        }
        # A one-node pool's leader is its only pod: the worker template is the same pod, never run, and
        # written so that every LWS has both (the model cache component patches both).
        template["leaderTemplate"] = first
        template["workerTemplate"] = (
            _pool_pod(deployment, workers[0], pool_labels, f"{where} {pool}") if workers else first
        )
        found.append(
            {
                "apiVersion": LWS_API,
                "kind": "LeaderWorkerSet",
                "metadata": {"name": lws, "labels": pool_labels},
                "spec": {"replicas": 1, "startupPolicy": "LeaderCreated", "leaderWorkerTemplate": template},
            }
        )
    router = next(group for group in deployment.run if group.spec.program == "vllm-router")
    router_name = object_name(deployment, ROUTER)
    router_labels = {**labels, NAME_LABEL: router_name, COMPONENT_LABEL: ROUTER}
    table = table_of(deployment, router)
    pod = pod_template(deployment, router.spec, router_labels, f"{where} router", table)
    found.append(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": router_name, "labels": router_labels},
            "spec": {"replicas": 1, "selector": {"matchLabels": {NAME_LABEL: router_name}}, "template": pod},
        }
    )
    found.append(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "selector": {NAME_LABEL: router_name},
                "ports": [{"name": "http", "port": router.spec.port, "targetPort": "http"}],
            },
        }
    )
    return found


def _pool_pod(deployment: Deployment, group: ProcessGroup, labels: dict[str, str], where: str) -> Manifest:
    return pod_template(deployment, group.spec, labels, where, table_of(deployment, group))
