"""A process's pod, printed from its run spec: the container (command and environment through the group's
setting values), its resources (resources.py), probes, security (security.py) and volumes (volumes.py), after
an init container that waits for the processes it starts after. Also the run spec fields no manifest can
express, and why."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from factory.base.errors import InputError
from factory.plan.deployment import Deployment
from factory.plan.runspec import RunSpec, Value
from factory.render.kubernetes.names import SERVES_API, SERVES_LABEL, object_name
from factory.render.kubernetes.resources import resources
from factory.render.kubernetes.security import container_context, pod_context
from factory.render.kubernetes.values import DEFAULT, Table, env_value, pod_command
from factory.render.kubernetes.volumes import volumes

Manifest = dict[str, Any]

ARCHITECTURES = {"linux/amd64": "amd64", "linux/arm64": "arm64"}
# Kubernetes' own default for an image named by a tag other than `latest`, said outright: a start reads the
# image the node holds (the tag names its inputs; once published, the digest pins it). kube-score's ignore
# says why it is not Always (render/kubernetes/lint.py).
PULL_POLICY = "IfNotPresent"
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


def _probes(spec: RunSpec) -> dict[str, Any]:
    """Startup with the model's start budget; readiness from the health check (a busy server leaves its
    Service); liveness from the spec's, more tolerant (it is restarted only long after)."""
    if spec.probe is None:
        return {}
    probe = spec.probe
    check = {"httpGet": {"path": probe.path, "port": "http"}}
    probes: dict[str, Any] = {
        # the start budget (loading the model): checked every 10 s until it is used up
        "startupProbe": {
            **check,
            "timeoutSeconds": probe.timeout_s,
            "periodSeconds": 10,
            "failureThreshold": math.ceil(probe.start_period_s / 10),
        },
        "readinessProbe": {
            **check,
            "timeoutSeconds": probe.timeout_s,
            "periodSeconds": probe.interval_s,
            "failureThreshold": probe.retries,
        },
    }
    if spec.liveness is not None:
        live = spec.liveness
        probes["livenessProbe"] = {
            **check,
            "timeoutSeconds": live.timeout_s,
            "periodSeconds": live.interval_s,
            "failureThreshold": live.failures,
        }
    return probes


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
    # The pod's own security and resources (its GPUs left to the container that uses them): a pod's request
    # is the larger of its init containers' and the sum of its containers', so this asks for nothing more.
    return [
        {
            "name": WAIT_CONTAINER,
            "image": spec.image,
            "imagePullPolicy": PULL_POLICY,
            "command": ["sh", "-c", script, "wait", *args],
            "resources": resources(spec, gpus=False),
            "securityContext": container_context(spec),
        }
    ]


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
    mounts, pod_volumes = volumes(spec, name)
    container: dict[str, Any] = {"name": spec.program, "image": spec.image, "imagePullPolicy": PULL_POLICY}
    container |= {"command": command} if command else {}
    container |= {"args": args, "env": env}
    ports = [{"name": "http", "containerPort": spec.port}] if spec.probe else []
    ports += [{"name": "rpc", "containerPort": spec.rpc_port}] if spec.rpc_port else []
    container |= {"ports": ports} if ports else {}
    container |= {"resources": resources(spec), "securityContext": container_context(spec)}
    container |= {"volumeMounts": mounts} | _probes(spec)
    waits = _waits(spec, answers or {}, where)
    annotations = dict(spec.all_labels)
    annotations["ai.vllm.factory.gpus"] = str(spec.gpus)  # the GPUs the process uses
    if spec.cache_basis:  # what sized its model cache's emptyDir
        annotations["ai.vllm.factory.model-cache"] = f"{spec.cache_gb} GB: {spec.cache_basis}"
    pod: dict[str, Any] = {
        # No variables for every Service of the namespace: vLLM reads none, and a Service named `vllm`
        # would give each pod VLLM_PORT=tcp://..., which vLLM takes for its own setting.
        "enableServiceLinks": False,
        "securityContext": pod_context(spec),
        "nodeSelector": {"kubernetes.io/arch": ARCHITECTURES[spec.platform]},
        **({"initContainers": waits} if waits else {}),
        "containers": [container],
        "volumes": pod_volumes,
    }
    serves = {SERVES_LABEL: SERVES_API} if spec.program == "vllm" and spec.probe is not None else {}
    return {"metadata": {"labels": labels | serves, "annotations": annotations}, "spec": pod}


def _environment(
    spec: RunSpec, names: list[str], where: str, table: Table, name: str
) -> list[dict[str, Any]]:
    """The container's env: each setting its pod value (or its ConfigMap key) first, then the secrets, then
    the spec's own variables (`names`: the settings the command names, to which those the env names are
    added)."""
    env: list[dict[str, Any]] = []
    extra: list[tuple[str, Value]] = list(spec.env)
    values: list[tuple[str, str]] = []
    if spec.gpu_resource is not None:
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


def secret_name(env: str) -> str:
    return env.lower().replace("_", "-")
