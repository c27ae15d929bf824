"""Start a pod template's container on the Docker engine with what Kubernetes and LWS would give it.

No kubelet runs here, so this is its part for one container: the environment (LWS's webhook variables, the
downward API's pod IP, ConfigMap and Secret references, each entry's $(VAR)s), the command with its $(VAR)s
expanded, the pod's address (a fixed IP on a bridge network) and the DNS names pods and Services answer to
(network aliases), a ConfigMap's key mounted by subPath (a read-only file), and each init container, run to
its end before the pod's container as the kubelet runs it (`init_options`). Every field it does not map is
refused: a manifest that uses one cannot be tested here as if it had been.
"""

from __future__ import annotations

import platform
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker

from factory.engine.connect import OWNER_LABEL
from tests import kubernetes_checks as checks

POD_FIELDS = {
    "nodeSelector",
    "initContainers",
    "containers",
    "volumes",
    "enableServiceLinks",
    "securityContext",
}
INIT_FIELDS = {"name", "image", "imagePullPolicy", "command", "args", "env", "resources", "securityContext"}
CONTAINER_FIELDS = {
    "name",
    "image",
    "imagePullPolicy",  # the engine has the image: IfNotPresent
    "command",
    "args",
    "env",
    "ports",
    "resources",
    "securityContext",
    "volumeMounts",
    "startupProbe",
    "readinessProbe",
    "livenessProbe",
}
SECURITY_FIELDS = {"capabilities", "seccompProfile", "allowPrivilegeEscalation", "readOnlyRootFilesystem"}
# The pod's: its user and group, fsGroup (the group its volumes are given: the container's supplementary
# group here, each emptyDir a tmpfs any user may write, as a kubelet makes one), its seccomp profile.
POD_SECURITY_FIELDS = {
    "runAsNonRoot",
    "runAsUser",
    "runAsGroup",
    "fsGroup",
    "fsGroupChangePolicy",
    "seccompProfile",
}
RESOURCES = {"cpu", "memory", "ephemeral-storage"}  # ephemeral storage: the kubelet's eviction, not mapped
ARCH = {"x86_64": "amd64", "aarch64": "arm64"}


class UnmappedField(ValueError):
    """A pod-spec field the translator cannot give a container: the test would not run what the manifest
    says."""


def _refuse_unknown(found: Mapping[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(found) - allowed)
    if unknown:
        raise UnmappedField(f"{where}: {unknown} not mapped to a container (mapped: {sorted(allowed)})")


@dataclass
class Pod:
    """One pod to start: its template, its address, its names and the environment LWS gives it."""

    name: str
    template: dict[str, Any]
    ip: str
    aliases: list[str] = field(default_factory=list)
    injected: dict[str, str] = field(default_factory=dict)  # LWS_* from LWS's pod webhook


def container_options(
    pod: Pod,
    network: str,
    sources: Mapping[str, Mapping[str, str]],
    client: docker.APIClient,
    label: str,
    files: Path | None = None,
) -> dict[str, Any]:
    """The low-level API's create_container arguments for the pod's only container (`files`: where a
    ConfigMap's keys are written to be mounted)."""
    spec = pod.template["spec"]
    _refuse_unknown(spec, POD_FIELDS, "pod spec")
    if spec.get("enableServiceLinks", True):  # Docker gives a container no service variables
        raise UnmappedField("enableServiceLinks: a kubelet's service variables are not mapped")
    arch = spec.get("nodeSelector", {}).get("kubernetes.io/arch")
    _refuse_unknown(spec.get("nodeSelector", {}), {"kubernetes.io/arch"}, "nodeSelector")
    if arch is not None and arch != ARCH.get(platform.machine()):
        raise UnmappedField(f"nodeSelector: {arch} does not match this engine's {platform.machine()}")
    if len(spec["containers"]) != 1:
        raise UnmappedField("one container per pod is mapped")
    container = spec["containers"][0]
    _refuse_unknown(container, CONTAINER_FIELDS, "container")
    limits = container.get("resources", {}).get("limits", {})
    _refuse_unknown(limits, RESOURCES, "resources (no GPU here)")
    env = checks.container_environment(container, pod.injected, {"status.podIP": pod.ip}, sources)
    command = [checks.expand(word, env.get) for word in container.get("command", [])]
    args = [checks.expand(word, env.get) for word in container.get("args", [])]
    # volumes: the memory-backed /dev/shm becomes the container's shm size, an emptyDir a tmpfs, a
    # ConfigMap's key a read-only file
    volumes = {volume["name"]: volume for volume in spec.get("volumes", [])}
    shm_size = None
    tmpfs: dict[str, str] = {}
    binds: dict[str, dict[str, str]] = {}
    for mount in container.get("volumeMounts", []):
        volume = volumes[mount["name"]]
        if "configMap" in volume:
            binds |= _config_file(volume, mount, sources, files)
            continue
        _refuse_unknown(mount, {"name", "mountPath"}, "volumeMount")
        _refuse_unknown(volume, {"name", "emptyDir"}, f"volume {volume['name']}")
        empty = volume["emptyDir"]
        _refuse_unknown(empty, {"medium", "sizeLimit"}, f"volume {volume['name']}")
        if mount["mountPath"] == "/dev/shm" and empty.get("medium") == "Memory":
            shm_size = empty["sizeLimit"].replace("Gi", "g").replace("Mi", "m")
        else:
            tmpfs[mount["mountPath"]] = _empty_dir(spec)
    user, security = _security(spec, container)
    healthcheck = _healthcheck(container, pod.ip)
    host_config = client.create_host_config(
        shm_size=shm_size,
        tmpfs=tmpfs or None,
        binds=binds or None,
        mem_limit=_bytes(limits["memory"]) if "memory" in limits else None,
        nano_cpus=int(float(limits["cpu"]) * 1e9) if "cpu" in limits else None,
        **security,
    )
    endpoint = client.create_endpoint_config(ipv4_address=pod.ip, aliases=[pod.name, *pod.aliases])
    return {
        "image": container["image"],
        "entrypoint": command or None,
        "command": args,
        "environment": env,
        "hostname": pod.name,
        "user": user,
        "labels": {OWNER_LABEL: label},
        "healthcheck": healthcheck,
        "host_config": host_config,
        "networking_config": client.create_networking_config({network: endpoint}),
    }


def init_options(pod: Pod, network: str, client: docker.APIClient, label: str) -> list[dict[str, Any]]:
    """Each init container of the pod, in order, as create_container arguments: the pod's address (a pod's
    containers share its network), its command expanded as the kubelet expands it."""
    found = []
    for init in pod.template["spec"].get("initContainers", []):
        _refuse_unknown(init, INIT_FIELDS, "initContainer")
        _refuse_unknown(init.get("resources", {}).get("limits", {}), RESOURCES, "initContainer resources")
        user, security = _security(pod.template["spec"], init)
        env = checks.container_environment(init, pod.injected, {"status.podIP": pod.ip}, {})
        words = [checks.expand(word, env.get) for word in [*init.get("command", []), *init.get("args", [])]]
        endpoint = client.create_endpoint_config(ipv4_address=pod.ip, aliases=[pod.name])
        found.append(
            {
                "image": init["image"],
                "entrypoint": words[:1],
                "command": words[1:],
                "environment": env,
                "hostname": pod.name,
                "user": user,
                "labels": {OWNER_LABEL: label},
                "host_config": client.create_host_config(**security),
                "networking_config": client.create_networking_config({network: endpoint}),
            }
        )
    return found


def _security(spec: Mapping[str, Any], container: Mapping[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """(the user, the host config's security arguments) of a container of the pod: its user and group (and
    fsGroup as a supplementary group), a read-only root, capabilities dropped and added, no new privileges,
    the seccomp profile."""
    pod = spec.get("securityContext", {})
    _refuse_unknown(pod, POD_SECURITY_FIELDS, "pod securityContext")
    security = container.get("securityContext", {})
    _refuse_unknown(security, SECURITY_FIELDS, "securityContext")
    capabilities = security.get("capabilities", {})
    _refuse_unknown(capabilities, {"add", "drop"}, "capabilities")
    if pod.get("runAsNonRoot") and pod.get("runAsUser", 1) == 0:
        raise UnmappedField("runAsNonRoot with runAsUser 0: the kubelet refuses to start it")
    user = f"{pod['runAsUser']}:{pod.get('runAsGroup', 0)}" if "runAsUser" in pod else None
    profile = security.get("seccompProfile") or pod.get("seccompProfile")
    options = ["seccomp=unconfined"] if profile == {"type": "Unconfined"} else []
    options += ["no-new-privileges"] if security.get("allowPrivilegeEscalation") is False else []
    return user, {
        "cap_add": capabilities.get("add"),
        "cap_drop": capabilities.get("drop"),
        "security_opt": options or None,
        "read_only": security.get("readOnlyRootFilesystem", False),
        "group_add": [str(pod["fsGroup"])] if "fsGroup" in pod else None,
    }


def _empty_dir(spec: Mapping[str, Any]) -> str:
    """A tmpfs the pod's user writes, as it writes a kubelet's emptyDir (made 0777, given to fsGroup). Docker
    gives a tmpfs over a folder of the image that folder's mode: the tmpfs is given to the user instead, with
    exec (a kubelet mounts an emptyDir without noexec)."""
    pod = spec.get("securityContext", {})
    if "runAsUser" not in pod:
        return "exec,mode=1777"
    return f"exec,uid={pod['runAsUser']},gid={pod.get('fsGroup', pod.get('runAsGroup', 0))},mode=0775"


def _bytes(quantity: str) -> int:
    """A Kubernetes memory quantity (6Gi, 512Mi) in bytes."""
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    unit = quantity[-2:]
    return int(quantity[:-2]) * units[unit] if unit in units else int(quantity)


def _config_file(
    volume: Mapping[str, Any],
    mount: Mapping[str, Any],
    sources: Mapping[str, Mapping[str, str]],
    files: Path | None,
) -> dict[str, dict[str, str]]:
    """A ConfigMap key mounted by subPath: the key's text in a file of `files`, bound read-only."""
    _refuse_unknown(mount, {"name", "mountPath", "subPath", "readOnly"}, "volumeMount")
    _refuse_unknown(volume, {"name", "configMap"}, f"volume {volume['name']}")
    if files is None or "subPath" not in mount:
        raise UnmappedField(f"volume {volume['name']}: a ConfigMap is mapped by subPath, into a folder")
    name = volume["configMap"]["name"]
    path = files / name / mount["subPath"]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(sources[name][mount["subPath"]])
    path.chmod(0o644)
    return {str(path): {"bind": mount["mountPath"], "mode": "ro" if mount.get("readOnly") else "rw"}}


def _healthcheck(container: Mapping[str, Any], ip: str) -> dict[str, Any] | None:
    """The readiness probe as Docker's health check (the kubelet asks the pod's IP); the startup probe's
    budget its start period."""
    ready = container.get("readinessProbe")
    if ready is None:
        return {"test": ["NONE"]}
    get = ready["httpGet"]
    port = next(p["containerPort"] for p in container["ports"] if p["name"] == get["port"])
    startup = container["startupProbe"]
    second = 1_000_000_000
    return {
        "test": ["CMD", "curl", "-fsS", "-o", "/dev/null", f"http://{ip}:{port}{get['path']}"],
        "interval": 5 * second,
        "timeout": ready["timeoutSeconds"] * second,
        "retries": ready["failureThreshold"],
        "start_period": startup["periodSeconds"] * startup["failureThreshold"] * second,
    }
