"""Prefill/decode as Kubernetes objects: a LeaderWorkerSet per pool (its nodes named by LWS's stable DNS
names), and the router as a Deployment with the Service in front of it."""

from __future__ import annotations

from typing import Any

from factory.base.errors import InputError
from factory.plan.deployment import Deployment
from factory.plan.runspec import ProcessGroup
from factory.render.kubernetes.config_map import config_map
from factory.render.kubernetes.names import (
    COMPONENT_LABEL,
    NAME_LABEL,
    ROUTER,
    object_name,
    require_deployable,
)
from factory.render.kubernetes.pods import pod_template
from factory.render.kubernetes.shapes import group_of, one_pod, service
from factory.render.kubernetes.values import pool_names, pool_sizes, table_of

Manifest = dict[str, Any]


def pd_objects(deployment: Deployment, name: str, labels: dict[str, str], where: str) -> list[Manifest]:
    require_deployable(deployment, where)
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
        # A one-node pool's leader is its only pod: the worker template is the same pod, never run, and
        # written so that every LWS has both (the model cache component patches both).
        worker = _pool_pod(deployment, workers[0], pool_labels, f"{where} {pool}") if workers else first
        specs = [group.spec for group in groups]
        found.append(group_of(lws, pool_labels, pool_sizes(deployment)[pool], (first, worker), specs))
    router = next(group for group in deployment.run if group.spec.program == "vllm-router")
    router_name = object_name(deployment, ROUTER)
    router_labels = {**labels, NAME_LABEL: router_name, COMPONENT_LABEL: ROUTER}
    table = table_of(deployment, router)
    pod = pod_template(deployment, router.spec, router_labels, f"{where} router", table)
    found.append(one_pod(router_name, router_labels, pod, router.spec))
    found.append(service(name, labels, {NAME_LABEL: router_name}, router.spec))
    return found


def _pool_pod(deployment: Deployment, group: ProcessGroup, labels: dict[str, str], where: str) -> Manifest:
    return pod_template(deployment, group.spec, labels, where, table_of(deployment, group))
