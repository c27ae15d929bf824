"""The deployment's ConfigMap `<name>-settings`: every setting a pod names that a user changes with a patch
(a rendezvous port, the network interface), with the host default or the pod's own."""

from __future__ import annotations

from typing import Any

from factory.plan.deployment import Deployment
from factory.plan.settings import setting
from factory.render.kubernetes.values import CONFIG_DEFAULTS, env_value, pod_command, table_of

Manifest = dict[str, Any]


# The last deployments asked about, with their answer: a deployment's manifest and its kustomization both
# ask (a tenth of the corpus's manifests' time, computed twice). Kept with the deployment itself, so an
# answer is reused for that very object only.
_RECENT: list[tuple[Deployment, list[str]]] = []


def settings_used(deployment: Deployment) -> list[str]:
    """The ConfigMap's settings: every config setting a pod of the deployment names."""
    for known, names in _RECENT:
        if known is deployment:
            return list(names)
    names = _settings_used(deployment)
    _RECENT[:] = [(deployment, names), *_RECENT[:3]]
    return list(names)


def _settings_used(deployment: Deployment) -> list[str]:
    where = deployment.layout
    names: list[str] = []
    config: set[str] = set()
    for group in deployment.run:
        table = table_of(deployment, group)
        used = pod_command(group.spec, where, table)[2]
        used += [n for k, v in group.spec.env for n in env_value(k, v, where, table)[1]]
        names += used
        config |= {n for n in used if table.values[n].config}
    return [n for n in dict.fromkeys(names) if n in config]


def config_map(deployment: Deployment, name: str, labels: dict[str, str]) -> Manifest | None:
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
