"""A process's pod, printed from its run spec: the container (command and environment through the group's
setting values), its resources (GPUs by the vendor's device plugin, CPU and memory requests, the model cache's
disk), probes, security context and volumes. Also the run spec fields no manifest can express, and why."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from factory.base.errors import InputError
from factory.plan.deployment import Deployment
from factory.plan.runspec import RunSpec, Value
from factory.render.kubernetes.names import object_name
from factory.render.kubernetes.values import DEFAULT, Table, env_value, pod_command

Manifest = dict[str, Any]

# Docker security options as a container's securityContext.
SECURITY_OPTIONS = {
    "seccomp=unconfined": ("seccompProfile", {"type": "Unconfined"}),
    "apparmor=unconfined": ("appArmorProfile", {"type": "Unconfined"}),
}
ARCHITECTURES = {"linux/amd64": "amd64", "linux/arm64": "arm64"}
# Variables a pod given a GPU resource leaves out: the device plugin gives it its own GPUs, numbered from 0,
# so the node's numbering compose splits a node's GPUs by (a PD pool's "4,5,6,7") names GPUs it has not.
DEVICE_ENV = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")
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

# The start order (a spec's `after`): an init container with the pod's own image (which has curl) waits until
# each process the spec starts after answers its health check at its Service, because vLLM with an
# unreachable Mooncake master hangs instead of exiting. Each wait is three arguments (URL, timeout, interval,
# each the awaited process's own probe values), never shell text.
WAIT_SCRIPT = (
    'while [ "$#" -gt 0 ]; do url=$1 timeout=$2 every=$3; shift 3; echo "waiting for $url"; '
    'until curl -fsS -o /dev/null --max-time "$timeout" "$url"; do sleep "$every"; done; done'
)
WAIT_CONTAINER = "wait-for-start-order"


@dataclass(frozen=True)
class Answer:
    """Where a process of the deployment answers its health check, as another pod reaches it: its Service."""

    url: str
    timeout_s: int
    interval_s: int


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


def shm_mebibytes(size: str) -> int:
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


def replacement(spec: RunSpec) -> dict[str, Any]:
    """A pod that holds GPUs is replaced, not rolled: a rolling update starts the new pod first, which asks
    for a second node's worth of GPUs while the old pod holds them (Pending, where there is none)."""
    return {"strategy": {"type": "Recreate"}} if gpu_limits(spec) else {}


# The model cache's room beyond the checkpoint: the kubelet evicts a pod whose emptyDir outgrows its
# sizeLimit, so a tight one would evict on the tokenizer's and the hub's own files.
CACHE_ROOM = 1.25


def cache_limit(spec: RunSpec) -> str | None:
    """The model cache's size limit, from the checkpoint's size where the recipe gives it."""
    if spec.cache_gb is None:
        return None
    return f"{math.ceil(spec.cache_gb * 1e9 / 2**30 * CACHE_ROOM) + 1}Gi"


def _requests(spec: RunSpec) -> dict[str, Any]:
    """CPU (the catalog's, plus one per GPU the process drives), memory (the catalog's, plus /dev/shm, a
    memory-backed emptyDir the pod's memory counts) and, where the model cache is sized, its disk."""
    if spec.requests is None:
        return {}
    shm = shm_mebibytes(spec.shm_size) if spec.shm_size else 0
    memory = spec.requests.memory_gib * 1024 + shm
    asked = {
        "cpu": str(spec.requests.cpu + spec.gpus),
        "memory": f"{memory // 1024}Gi" if memory % 1024 == 0 else f"{memory}Mi",
    }
    cache = cache_limit(spec)
    return {"requests": asked | ({"ephemeral-storage": cache} if cache else {})}


def gpu_limits(spec: RunSpec) -> dict[str, Any]:
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


def _waits(spec: RunSpec, answers: Mapping[str, Answer], where: str) -> list[dict[str, Any]]:
    """The init container that holds the pod until every process the spec starts after answers."""
    if not spec.after:
        return []
    missing = [process for process in spec.after if process not in answers]
    if missing:
        raise InputError(
            f"{where} starts after {missing[0]}, which no Service of the deployment answers for",
            field="after",
            value=missing[0],
            valid=sorted(answers),
        )
    waits = [answers[process] for process in spec.after]
    args = [word for w in waits for word in (w.url, str(w.timeout_s), str(w.interval_s))]
    script = WAIT_SCRIPT.replace("$", "$$")  # Kubernetes reads $$ as $: the shell gets the line as written
    return [{"name": WAIT_CONTAINER, "image": spec.image, "command": ["sh", "-c", script, "wait", *args]}]


def pod_template(
    deployment: Deployment,
    spec: RunSpec,
    labels: dict[str, str],
    where: str,
    table: Table = DEFAULT,
    answers: Mapping[str, Answer] | None = None,
) -> Manifest:
    """The pod of one process group: its container printed from the spec, after an init container that waits
    for the processes it starts after (`answers`: where each process of the deployment answers)."""
    name = object_name(deployment)
    command, args, names = pod_command(spec, where, table)
    if spec.entrypoint:  # a Mooncake process, or one whose config is filled first: its program, then args
        if command is not None:
            raise InputError(f"{where}: a computed rank and an entrypoint of its own", field="entrypoint")
        command = list(spec.entrypoint)
    env = _environment(spec, names, where, table, name)
    mounts, volumes = _volumes(spec, name)
    container: dict[str, Any] = {"name": spec.program, "image": spec.image}
    container |= {"command": command} if command else {}
    container |= {"args": args, "env": env}
    ports = [{"name": "http", "containerPort": spec.port}] if spec.probe else []
    ports += [{"name": "rpc", "containerPort": spec.rpc_port}] if spec.rpc_port else []
    container |= {"ports": ports} if ports else {}
    resources = gpu_limits(spec) | _requests(spec)
    container |= {"resources": resources} if resources else {}
    container |= _security(spec) | {"volumeMounts": mounts} | _probes(spec)
    waits = _waits(spec, answers or {}, where)
    annotations = dict(spec.all_labels)
    annotations["ai.vllm.factory.gpus"] = str(spec.gpus)  # the GPUs the process uses
    pod: dict[str, Any] = {
        # No variables for every Service of the namespace: vLLM reads none, and a Service named `vllm`
        # would give each pod VLLM_PORT=tcp://..., which vLLM takes for its own setting.
        "enableServiceLinks": False,
        "nodeSelector": {"kubernetes.io/arch": ARCHITECTURES[spec.platform]},
        **({"initContainers": waits} if waits else {}),
        "containers": [container],
        "volumes": volumes,
    }
    return {"metadata": {"labels": labels, "annotations": annotations}, "spec": pod}


def _environment(
    spec: RunSpec, names: list[str], where: str, table: Table, name: str
) -> list[dict[str, Any]]:
    """The container's env: each setting its pod value (or its ConfigMap key) first, then the secrets, then
    the spec's own variables (`names`: the settings the command names, to which those the env names are
    added)."""
    env: list[dict[str, Any]] = []
    extra: list[tuple[str, Value]] = list(spec.env)
    values: list[tuple[str, str]] = []
    if gpu_limits(spec):
        extra = [(env_name, value) for env_name, value in extra if env_name not in DEVICE_ENV]
    for env_name, value in extra:
        text, used = env_value(env_name, value, where, table)
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
            "valueFrom": {"secretKeyRef": {"name": secret_name(s.env), "key": s.env, "optional": s.optional}},
        }
        for s in spec.secrets
    ]
    # A variable named as the setting it is given (MOONCAKE_DEVICE_NAME: $MOONCAKE_DEVICE_NAME) is that
    # setting's entry already: a second entry of the same name would hide the first.
    defined = {entry["name"] for entry in env}
    env += [
        {"name": env_name, "value": text}
        for env_name, text in values
        if not (env_name in defined and text == f"$({env_name})")
    ]
    return env


def _volumes(spec: RunSpec, name: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(mounts, volumes): the catalog's volumes, the generated configs and /dev/shm."""
    # The catalog's volumes come first, in its order: the model cache component patches them by index.
    mounts: list[dict[str, Any]] = [{"name": v.name, "mountPath": v.target} for v in spec.volumes]
    # Generated configs, from the deployment's ConfigMap <name>-configs (one key per file).
    mounts += [
        {"name": "configs", "mountPath": config.template, "subPath": config.file, "readOnly": True}
        for config in spec.configs
    ]
    cache = cache_limit(spec)
    volumes: list[dict[str, Any]] = [
        {"name": volume.name, "emptyDir": {"sizeLimit": cache} if cache else {}} for volume in spec.volumes
    ]
    if spec.configs:
        volumes.append({"name": "configs", "configMap": {"name": f"{name}-configs"}})
    if spec.shm_size:
        mounts.append({"name": "dshm", "mountPath": "/dev/shm"})
        volumes.append(
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": _shm_limit(spec.shm_size)}}
        )
    return mounts, volumes


def secret_name(env: str) -> str:
    return env.lower().replace("_", "-")
