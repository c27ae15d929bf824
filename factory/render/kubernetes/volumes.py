"""A pod's volumes and its container's mounts, printed from its run spec: the catalog's volumes first, in its
order (the model cache component patches them by index), then every folder the process writes on its
read-only root, the generated configs and /dev/shm. Every emptyDir has a size limit: the model cache's from
what it holds (the run spec says from where), a writable folder's from the catalog, /dev/shm the vendor's."""

from __future__ import annotations

from typing import Any

from factory.plan.runspec import RunSpec
from factory.render.kubernetes.resources import cache_limit, shm_limit

Mounts = list[dict[str, Any]]


def volumes(spec: RunSpec, name: str) -> tuple[Mounts, Mounts]:
    """(mounts, volumes)."""
    mounts: Mounts = [{"name": v.name, "mountPath": v.target} for v in spec.volumes]
    cache = cache_limit(spec)
    found: Mounts = [
        {"name": volume.name, "emptyDir": {"sizeLimit": cache} if cache else {}} for volume in spec.volumes
    ]
    mounts += [{"name": folder.name, "mountPath": folder.target} for folder in spec.writable]
    found += [{"name": f.name, "emptyDir": {"sizeLimit": f"{f.size_gib}Gi"}} for f in spec.writable]
    # Generated configs, from the deployment's ConfigMap <name>-configs (one key per file).
    mounts += [
        {"name": "configs", "mountPath": config.template, "subPath": config.file, "readOnly": True}
        for config in spec.configs
    ]
    if spec.configs:
        found.append({"name": "configs", "configMap": {"name": f"{name}-configs"}})
    if spec.shm_size:
        mounts.append({"name": "dshm", "mountPath": "/dev/shm"})
        shm = {"medium": "Memory", "sizeLimit": shm_limit(spec.shm_size)}
        found.append({"name": "dshm", "emptyDir": shm})
    return mounts, found
