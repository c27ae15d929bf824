"""Prefill/decode as Kubernetes objects: a LeaderWorkerSet per pool (its nodes named by LWS's stable DNS
names), and the router as a Deployment with the Service in front of it."""

from __future__ import annotations

from typing import Any

from factory.base.errors import InputError
from factory.plan.models import Deployment
from factory.plan.runspec import ProcessGroup
from factory.render.kubernetes.config_map import config_map
from factory.render.kubernetes.names import (
    COMPONENT_LABEL,
    LWS_API,
    NAME_LABEL,
    ROUTER,
    deployable,
    object_name,
)
from factory.render.kubernetes.pods import pod_template
from factory.render.kubernetes.values import pool_names, pool_sizes, table_of

Manifest = dict[str, Any]


def pd_objects(deployment: Deployment, name: str, labels: dict[str, str], where: str) -> list[Manifest]:
    if not deployable(deployment):
        raise InputError(
            f"{where}: the router is not locked, and a pod needs its image (compose takes it from "
            "$VLLM_ROUTER_IMAGE)",
            field="router",
            hint="run `factory lock` (it locks vllm-router beside vLLM)",
        )
    found: list[Manifest] = []
    config = config_map(deployment, name, labels)
    found += [config] if config else []
    for pool, lws in pool_names(deployment).items():
        groups = [group for group in deployment.run if group.pool == pool]
        leader, workers = groups[0], groups[1:]
        if len(workers) > 1 or leader.indices != (0,):
            raise InputError(
                f"{where}: {pool} nodes that do not share one spec", field="run", value=len(workers)
            )
        pool_labels = {**labels, NAME_LABEL: lws}
        first = _pool_pod(deployment, leader, pool_labels, f"{where} {pool}")
        template: Manifest = {
            "size": pool_sizes(deployment)[pool],
            "restartPolicy": "RecreateGroupOnPodRestart",
        }
        # A one-node pool's leader is its only pod: the worker template is the same pod, never run, and
        # written so that every LWS has both (the model cache component patches both).
        template["leaderTemplate"] = first
        template["workerTemplate"] = (
            _pool_pod(deployment, workers[0], pool_labels, f"{where} {pool}") if workers else first
        )
        found.append(
            {
                "apiVersion": LWS_API,
                "kind": "LeaderWorkerSet",
                "metadata": {"name": lws, "labels": pool_labels},
                "spec": {"replicas": 1, "startupPolicy": "LeaderCreated", "leaderWorkerTemplate": template},
            }
        )
    router = next(group for group in deployment.run if group.spec.program == "vllm-router")
    router_name = object_name(deployment, ROUTER)
    router_labels = {**labels, NAME_LABEL: router_name, COMPONENT_LABEL: ROUTER}
    table = table_of(deployment, router)
    pod = pod_template(deployment, router.spec, router_labels, f"{where} router", table)
    found.append(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": router_name, "labels": router_labels},
            "spec": {"replicas": 1, "selector": {"matchLabels": {NAME_LABEL: router_name}}, "template": pod},
        }
    )
    found.append(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "selector": {NAME_LABEL: router_name},
                "ports": [{"name": "http", "port": router.spec.port, "targetPort": "http"}],
            },
        }
    )
    return found


def _pool_pod(deployment: Deployment, group: ProcessGroup, labels: dict[str, str], where: str) -> Manifest:
    return pod_template(deployment, group.spec, labels, where, table_of(deployment, group))
