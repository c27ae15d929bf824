"""A pod's security, printed from its run spec: the pod runs as the image's non-root user (runAsNonRoot,
runAsUser, runAsGroup) with that group owning its volumes (fsGroup: a model-cache claim an older root image
filled is handed over once, when the kubelet finds its root folder of another group), under the seccomp
profile its spec names (RuntimeDefault unless its vendor's security option says unconfined); each container
escalates no privilege, drops every capability and adds only the spec's, and runs on a read-only root where
the spec says so. The Pod Security level this admits is the plan's (factory.plan.pod_security)."""

from __future__ import annotations

from typing import Any

from factory.base.errors import InputError
from factory.plan.runspec import RunSpec

# Docker security options as Kubernetes fields: (where, field, value).
SECURITY_OPTIONS = {
    "seccomp=unconfined": ("pod", "seccompProfile", {"type": "Unconfined"}),
    "apparmor=unconfined": ("container", "appArmorProfile", {"type": "Unconfined"}),
}


def _options(spec: RunSpec, where: str) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for option in spec.security_opt:
        if option not in SECURITY_OPTIONS:
            raise InputError(
                "a security option with no Kubernetes field",
                field="security_opt",
                value=option,
                valid=sorted(SECURITY_OPTIONS),
            )
        place, key, value = SECURITY_OPTIONS[option]
        found |= {key: value} if place == where else {}
    return found


def pod_context(spec: RunSpec) -> dict[str, Any]:
    user = spec.user
    return {
        "runAsNonRoot": True,
        "runAsUser": user.uid,
        "runAsGroup": user.gid,
        "fsGroup": user.gid,
        # Only a volume whose root is not yet the group's is walked (a claim a root image filled, once):
        # the default walks every file of a model cache of hundreds of GB at every start.
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
    } | _options(spec, "pod")


def container_context(spec: RunSpec) -> dict[str, Any]:
    capabilities: dict[str, Any] = {"drop": ["ALL"]}
    capabilities |= {"add": list(spec.capabilities)} if spec.capabilities else {}
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": spec.read_only_root,
        "capabilities": capabilities,
    } | _options(spec, "container")
