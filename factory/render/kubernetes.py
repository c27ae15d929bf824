"""The Kubernetes format: per deployment one manifest file and a kustomization, printed from its run spec.

One node: a Deployment and a Service. Multi-node: a LeaderWorkerSet (leaderworkerset.x-k8s.io/v1) whose
leader runs the head's spec and whose workers run the one worker spec, the rank taken from LWS's
$(LWS_WORKER_INDEX), plus a Service over the pods that serve HTTP. Prefill/decode deployments are not
printed here (the router image comes first).

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
from factory.plan.runspec import FromIndex, RunSpec, Value
from factory.plan.settings import PLACEHOLDER, known_setting, setting
from factory.render import yaml_text

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
# ConfigMap values where a setting has no default on a host: a pod's network interface is eth0.
CONFIG_DEFAULTS = {"IFACE_NAME": "eth0"}
# A GPU is a device plugin's resource: by the engine's GPU driver, or by the device the vendor mounts.
GPU_RESOURCES = {"nvidia": "nvidia.com/gpu"}
DEVICE_RESOURCES = {"/dev/kfd": "amd.com/gpu"}
# Docker security options as a container's securityContext.
SECURITY_OPTIONS = {
    "seccomp=unconfined": ("seccompProfile", {"type": "Unconfined"}),
    "apparmor=unconfined": ("appArmorProfile", {"type": "Unconfined"}),
}
ARCHITECTURES = {"linux/amd64": "amd64", "linux/arm64": "arm64"}
# The kustomize Component every kustomization includes: it names each published image by registry and
# digest (printed by render/published_images.py from the publish record). "_" starts no image slug.
IMAGES_COMPONENT = PurePosixPath(ROOT) / "_published"

# Run spec fields Kubernetes manifests cannot express, and why (a test keeps this list complete).
CANNOT_EXPRESS = {
    "devices": "a pod is given a GPU's device files by the vendor's device plugin (the GPU resource), not "
    "by host path",
    "groups": "the device plugin gives the container access to the devices it allocates; Kubernetes takes "
    "supplementary groups by number only, and the host's render group id is the host's",
    "ulimits": "a pod spec has no per-container ulimits: the node's container runtime sets them",
    "network": "every pod has an address every other pod reaches (the nodes meet there, no host network); "
    "a Service publishes the API",
}


def deployable(deployment: Deployment) -> bool:
    """Deployments printed as manifests: one node and multi-node (prefill/decode waits for the router)."""
    return deployment.deploy_type in ("single_node", "multi_node")


def directory(deployment: Deployment) -> PurePosixPath:
    image = deployment.image
    base = PurePosixPath(ROOT) / image.slug / f"{image.hardware}-{image.variant}" / deployment.strategy
    return base / f"{deployment.nodes}-nodes" if deployment.deploy_type == "multi_node" else base


def object_name(deployment: Deployment) -> str:
    """A DNS label short enough for LWS's pod names (<name>-<group>-<index>) and its label values."""
    image = deployment.image
    text = "-".join([image.slug, image.hardware, image.variant, deployment.strategy])
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    if len(name) > 52:
        name = f"{name[:45].rstrip('-')}-{hashlib.sha256(name.encode()).hexdigest()[:6]}"
    return name if name[0].isalpha() else f"m-{name}"


def pod_text(value: str, where: str) -> tuple[str, list[str]]:
    """A value as a pod field: every literal `$` doubled (Kubernetes reads $$ as $), each setting its $(VAR)
    from SETTING_VALUES. Returns the text and the settings it names."""
    parts: list[str] = []
    names: list[str] = []
    last = 0
    for match in PLACEHOLDER.finditer(value):
        name = match.group("braced") or match.group("bare")
        if known_setting(name) is None:
            continue
        if name not in SETTING_VALUES:
            raise InputError(
                f"{where} uses ${name}, which has no value in a pod",
                field="setting",
                value=name,
                valid=sorted(SETTING_VALUES),
            )
        parts.append(value[last : match.start()].replace("$", "$$"))
        parts.append(SETTING_VALUES[name].text)
        names.append(name)
        last = match.end()
    parts.append(value[last:].replace("$", "$$"))
    return "".join(parts), names


def _command(spec: RunSpec, where: str) -> tuple[list[str] | None, list[str], list[str]]:
    """(command, args, settings used): the image's entrypoint with the args, or the rank line when a value
    needs arithmetic."""
    args: list[str] = []
    names: list[str] = []
    computed: list[tuple[int, FromIndex]] = []
    for position, arg in enumerate(spec.args, start=1):
        if isinstance(arg, FromIndex):
            if arg.address_of is not None:
                raise InputError(f"{where}: a pool node's address has no pod value", field="args", value=arg)
            if arg.times != 1:
                computed.append((position, arg))
            args.append(INDEX)
            continue
        text, used = pod_text(arg, where)
        args.append(text)
        names += used
    if not computed:
        return None, args, names
    if len(computed) > 1 or spec.program != "vllm":
        raise InputError(f"{where}: only one computed rank value is supported", field="args", value=computed)
    position, value = computed[0]
    script = RANK_SCRIPT.replace("$", "$$")  # Kubernetes reads $$ as $: the shell gets the line as written
    return ["sh", "-c", script, "vllm-factory", str(position), str(value.times)], args, names


def _env_value(value: Value, where: str) -> tuple[str, list[str]]:
    if isinstance(value, FromIndex):
        if value.times != 1 or value.address_of is not None:
            raise InputError(
                f"{where}: an environment value computed from the index", field="env", value=value
            )
        return INDEX, []
    return pod_text(value, where)


def _shm_limit(size: str) -> str:
    """Docker's 2g as Kubernetes' 2Gi (Docker's units are binary)."""
    match = re.fullmatch(r"(\d+)([kmgt]?)b?", size.lower())
    if match is None:
        raise InputError("a shared memory size Kubernetes cannot read", field="shm_size", value=size)
    number, unit = match.groups()
    return number + {"": "", "k": "Ki", "m": "Mi", "g": "Gi", "t": "Ti"}[unit]


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


def _resources(spec: RunSpec) -> dict[str, Any]:
    resource = GPU_RESOURCES.get(spec.gpu_request.driver) if spec.gpu_request else None
    resource = resource or next((DEVICE_RESOURCES[d] for d in spec.devices if d in DEVICE_RESOURCES), None)
    if resource is None:  # the CPU backend (the pod's annotation still says how many GPUs it uses)
        return {}
    return {"resources": {"limits": {resource: spec.gpus}}}


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


def pod_template(deployment: Deployment, spec: RunSpec, labels: dict[str, str], where: str) -> Manifest:
    """The pod of one process group: its container printed from the spec."""
    name = object_name(deployment)
    command, args, names = _command(spec, where)
    env: list[dict[str, Any]] = []
    extra: list[tuple[str, Value]] = list(spec.env)
    values: list[tuple[str, str]] = []
    for env_name, value in extra:
        text, used = _env_value(value, where)
        names += used
        values.append((env_name, text))
    # Settings first: an env value names them as $(VAR), which Kubernetes expands from earlier entries only.
    for setting_name in dict.fromkeys(names):
        mapped = SETTING_VALUES[setting_name]
        env += [{"name": var, **source} for var, source in mapped.env]
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
    mounts = [{"name": volume.name, "mountPath": volume.target} for volume in spec.volumes]
    volumes: list[dict[str, Any]] = [{"name": volume.name, "emptyDir": {}} for volume in spec.volumes]
    if spec.shm_size:
        mounts.append({"name": "dshm", "mountPath": "/dev/shm"})
        volumes.append(
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": _shm_limit(spec.shm_size)}}
        )
    container: dict[str, Any] = {"name": spec.program, "image": spec.image}
    container |= {"command": command} if command else {}
    container |= {"args": args, "env": env}
    container |= {"ports": [{"name": "http", "containerPort": spec.port}]} if spec.probe else {}
    container |= _resources(spec) | _security(spec) | {"volumeMounts": mounts} | _probes(spec)
    annotations = dict(spec.labels)
    annotations["ai.vllm.factory.gpus"] = str(spec.gpus)  # the GPUs the process uses
    pod: dict[str, Any] = {
        "nodeSelector": {"kubernetes.io/arch": ARCHITECTURES[deployment.image.platform]},
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
    labels = {NAME_LABEL: name, "app.kubernetes.io/managed-by": "vllm-factory"}
    metadata = {"name": name, "labels": labels}
    if deployment.deploy_type == "single_node":
        spec = deployment.run[0].spec
        template = pod_template(deployment, spec, labels, where)
        workload: Manifest = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": metadata,
            "spec": {"replicas": 1, "selector": {"matchLabels": {NAME_LABEL: name}}, "template": template},
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
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata,
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
    for group in deployment.run:
        names += _command(group.spec, where)[2]
        names += [n for _, v in group.spec.env for n in _env_value(v, where)[1]]
    return [n for n in dict.fromkeys(names) if SETTING_VALUES[n].config]


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
        " (needs LeaderWorkerSet " + MIN_LWS + " or later)" if deployment.deploy_type == "multi_node" else ""
    )
    return _header(deployment) + f"# Start: {start}\n" + _dump(objects(deployment))


def kustomization(deployment: Deployment) -> str:
    """kustomization.yaml: the manifest, the component that pins published images by digest, its image (a
    kustomize `images:` entry to point at a mirror), and the settings a user changes with a patch of the
    ConfigMap."""
    repository, _, tag = deployment.run[0].spec.image.rpartition(":")
    up = PurePosixPath(*[".."] * (len(directory(deployment).parts) - 1))  # back to k8s/
    notes = [f"#   {n}: {setting(n).why}" for n in settings_used(deployment)]
    settings = ["# Settings (ConfigMap <name>-settings, change them with a patch):", *notes] if notes else []
    body = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": ["manifest.yaml"],
        "components": [(up / IMAGES_COMPONENT.name).as_posix()],
        "images": [{"name": repository, "newTag": tag}],
    }
    secrets = deployment.run[0].spec.secrets
    lines = [
        *settings,
        *(
            f"# {s.what}: kubectl create secret generic {_secret_name(s.env)} --from-literal={s.env}=..."
            for s in secrets
        ),
    ]
    return _header(deployment) + "".join(f"{line}\n" for line in lines) + yaml_text.dump(body)
