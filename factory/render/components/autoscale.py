"""The kustomize components `autoscale` (a KEDA ScaledObject, keda.sh/v1alpha1) and `autoscale-hpa` (a plain
HorizontalPodAutoscaler, autoscaling/v2, for clusters without KEDA) of each deployment the plan scales: on
the waiting queue per replica, within the plan's bounds and cooldown. A one-node deployment scales its
Deployment's pods; a multi-node one whole groups, through its LeaderWorkerSet's scale subresource (the LWS's
`replicas` are groups; LWS reports its leaders as the pods the metric is averaged over). Each also removes
the workload's fixed `replicas`, so that applying the deployment again does not undo the autoscaler.

The series come from the `monitoring` component's PodMonitor (labelled with the deployment's name). The HPA
reads them through the custom metrics API, which an adapter serves (prometheus-adapter, with a rule the docs
page gives); neither KEDA nor the adapter is part of the factory."""

from __future__ import annotations

import json
import re
from typing import Any

from factory.base.outputs import OutputFile
from factory.plan.deployment import Deployment
from factory.plan.fleet import Scaling
from factory.render.kubernetes import INSTANCE_LABEL, LWS_API, deployable, object_name
from factory.render.kubernetes.files import component, of_deployment

KEDA, HPA = "autoscale", "autoscale-hpa"
# How Prometheus names a pod label it copies onto a series (prometheus-operator's podTargetLabels).
SERIES_LABEL = re.sub(r"[^a-zA-Z0-9_]", "_", INSTANCE_LABEL)


def _target(deployment: Deployment, scaling: Scaling) -> dict[str, str]:
    name = object_name(deployment)
    if scaling.unit == "groups":
        return {"apiVersion": LWS_API, "kind": "LeaderWorkerSet", "name": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}


def _scale_down(scaling: Scaling) -> dict[str, Any]:
    return {"scaleDown": {"stabilizationWindowSeconds": scaling.settings.cooldown_s}}


def scaled_object(deployment: Deployment, scaling: Scaling) -> dict[str, Any]:
    name = object_name(deployment)
    settings, series = scaling.settings, deployment.fleet.metrics.series
    return of_deployment(
        deployment,
        "keda.sh/v1alpha1",
        "ScaledObject",
        {
            "scaleTargetRef": _target(deployment, scaling),
            "minReplicaCount": settings.min_replicas,
            "maxReplicaCount": settings.max_replicas,
            "pollingInterval": settings.polling_s,
            # KEDA's cooldown covers scaling to zero only: the HPA it makes waits the same before scaling down
            "cooldownPeriod": settings.cooldown_s,
            "advanced": {"horizontalPodAutoscalerConfig": {"behavior": _scale_down(scaling)}},
            "triggers": [
                {
                    "type": "prometheus",
                    "metricType": "AverageValue",  # the query's sum divided by the replicas
                    "metadata": {
                        "serverAddress": settings.prometheus,
                        "query": f'sum({series.waiting}{{{SERIES_LABEL}="{name}"}})',
                        "threshold": str(settings.waiting_per_replica),
                    },
                }
            ],
        },
    )


def autoscaler(deployment: Deployment, scaling: Scaling) -> dict[str, Any]:
    settings = scaling.settings
    metric = {"name": deployment.fleet.metrics.series.waiting}
    target = {"type": "AverageValue", "averageValue": str(settings.waiting_per_replica)}
    return of_deployment(
        deployment,
        "autoscaling/v2",
        "HorizontalPodAutoscaler",
        {
            "scaleTargetRef": _target(deployment, scaling),
            "minReplicas": settings.min_replicas,
            "maxReplicas": settings.max_replicas,
            "metrics": [{"type": "Pods", "pods": {"metric": metric, "target": target}}],
            "behavior": _scale_down(scaling),
        },
    )


def _unpinned(deployment: Deployment, scaling: Scaling) -> dict[str, Any]:
    """The patch that leaves the workload's replicas to the autoscaler."""
    target = _target(deployment, scaling)
    group, _, version = target["apiVersion"].rpartition("/")
    return {
        "target": {"group": group, "version": version, "kind": target["kind"], "name": target["name"]},
        "patch": json.dumps([{"op": "remove", "path": "/spec/replicas"}]),
    }


def files(deployment: Deployment) -> list[OutputFile]:
    scaling = deployment.fleet.scaling
    if scaling is None or not deployable(deployment):
        return []
    settings = scaling.settings
    unit = "pod" if scaling.unit == "pods" else f"group of {scaling.nodes} pods (its LeaderWorkerSet's)"
    notes = [
        f"Scales by one {unit} per {settings.waiting_per_replica} requests waiting, between "
        f"{settings.min_replicas} and {settings.max_replicas}; down {settings.cooldown_s} s after the queue "
        "eased.",
        "Needs the monitoring component's series in the Prometheus the trigger names (patch serverAddress).",
    ]
    patches = [_unpinned(deployment, scaling)]
    return [
        *component(deployment, KEDA, [scaled_object(deployment, scaling)], notes, patches),
        *component(
            deployment,
            HPA,
            [autoscaler(deployment, scaling)],
            [*notes[:1], "Needs a custom metrics adapter serving the series per pod (prometheus-adapter)."],
            patches,
        ),
    ]
