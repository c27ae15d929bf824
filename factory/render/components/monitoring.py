"""The kustomize component `monitoring` of each deployment (`<its folder>/monitoring/`): a PodMonitor
(prometheus-operator's monitoring.coreos.com/v1) that scrapes every pod of it that serves the API at the
fleet's metrics path on the API port, every fleet interval, and labels each series with the deployment's
name (`app_kubernetes_io_instance`), which the autoscaler's query selects by."""

from __future__ import annotations

from typing import Any

from factory.base.outputs import OutputFile
from factory.plan.deployment import Deployment
from factory.render.kubernetes import INSTANCE_LABEL, SERVES_API, SERVES_LABEL, deployable, object_name
from factory.render.kubernetes.files import component, of_deployment

PART = "monitoring"
NOTES = [
    "The PodMonitor a Prometheus of prometheus-operator (v0.93.0's CRD, or any monitoring.coreos.com/v1)",
    "scrapes when its podMonitorSelector selects it: add the label your Prometheus selects by with a patch.",
]


def pod_monitor(deployment: Deployment) -> dict[str, Any]:
    name = object_name(deployment)
    metrics = deployment.fleet.metrics
    return of_deployment(
        deployment,
        "monitoring.coreos.com/v1",
        "PodMonitor",
        {
            "selector": {"matchLabels": {INSTANCE_LABEL: name, SERVES_LABEL: SERVES_API}},
            # the series carry the deployment's name, as the autoscaler's query asks
            "podTargetLabels": [INSTANCE_LABEL],
            "podMetricsEndpoints": [
                {"port": "http", "path": metrics.path, "interval": f"{metrics.interval_s}s"}
            ],
        },
    )


def files(deployment: Deployment) -> list[OutputFile]:
    if not deployable(deployment):
        return []
    return component(deployment, PART, [pod_monitor(deployment)], NOTES, [])
