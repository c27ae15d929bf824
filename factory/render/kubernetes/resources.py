"""What a process's pod asks its node for and may use, printed from its run spec: GPUs by the vendor's device
plugin; CPU and memory requests, with limits equal to them (memory always, CPU where the spec's requests
allow a CPU quota); and the disk it writes (its disk-backed emptyDirs and its logs) as ephemeral storage,
requested and limited alike. Also the sizes of its emptyDirs."""

from __future__ import annotations

import math
import re
from typing import Any

from factory.base.errors import InputError
from factory.plan.cache import cache_limit_gib
from factory.plan.runspec import RunSpec


def _shm_size(size: str) -> tuple[int, str]:
    """Docker's size (`2g`) as a number and a Kubernetes binary unit (2, "Gi"; Docker's units are binary)."""
    match = re.fullmatch(r"(\d+)([kmgt]?)b?", size.lower())
    if match is None:
        raise InputError("a shared memory size Kubernetes cannot read", field="shm_size", value=size)
    number, unit = match.groups()
    return int(number), {"": "", "k": "Ki", "m": "Mi", "g": "Gi", "t": "Ti"}[unit]


def shm_limit(size: str) -> str:
    """Docker's 2g as Kubernetes' 2Gi."""
    number, unit = _shm_size(size)
    return f"{number}{unit}"


def shm_mebibytes(size: str) -> int:
    """Docker's size in MiB, rounded up."""
    number, unit = _shm_size(size)
    return math.ceil(number * {"": 2**-20, "Ki": 2**-10, "Mi": 1, "Gi": 2**10, "Ti": 2**20}[unit])


def cache_limit(spec: RunSpec) -> str | None:
    """The model cache emptyDir's sizeLimit: what it holds (the run spec's, with its basis) with room."""
    return f"{cache_limit_gib(spec.cache_gb)}Gi" if spec.cache_gb is not None else None


def gpu_limits(spec: RunSpec) -> dict[str, Any]:
    resource = spec.gpu_resource  # the vendor's device plugin's, from the catalog
    if resource is None:  # the CPU backend (the pod's annotation still says how many GPUs it uses)
        return {}
    # A quantity as the API server stores it, a string: an LWS keeps its pod templates as sent (a custom
    # resource), and each `kubectl apply` of the number 8 over the stored "8" moved its generation.
    return {resource: str(spec.gpus)}


def resources(spec: RunSpec, gpus: bool = True) -> dict[str, Any]:
    """The container's requests and limits: CPU (the catalog's floor plus one per GPU the process drives),
    memory (the floor plus /dev/shm, a memory-backed emptyDir the pod's memory counts), its disk; limits equal
    to the requests (no CPU limit where the spec's requests say why not), and its GPUs (none for a container
    that only waits: `gpus` false)."""
    asked: dict[str, str] = {}
    limits: dict[str, str] = {}
    if spec.requests is not None:
        shm = shm_mebibytes(spec.shm_size) if spec.shm_size else 0
        memory = spec.requests.memory_gib * 1024 + shm
        asked["cpu"] = str(spec.requests.cpu + spec.gpus)
        asked["memory"] = f"{memory // 1024}Gi" if memory % 1024 == 0 else f"{memory}Mi"
        limits |= {"cpu": asked["cpu"]} if spec.requests.cpu_limit else {}
        limits["memory"] = asked["memory"]
    asked["ephemeral-storage"] = limits["ephemeral-storage"] = f"{spec.disk_gib}Gi"
    return {"limits": (gpu_limits(spec) if gpus else {}) | limits, "requests": asked}


def replacement(spec: RunSpec) -> dict[str, Any]:
    """A pod that holds GPUs is replaced, not rolled: a rolling update starts the new pod first, which asks
    for a second node's worth of GPUs while the old pod holds them (Pending, where there is none)."""
    return {"strategy": {"type": "Recreate"}} if gpu_limits(spec) else {}
