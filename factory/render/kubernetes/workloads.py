"""A deployment's objects: one node, a Deployment and a Service; multi-node, a LeaderWorkerSet (its leader the
head's spec, its workers the one worker spec) and a Service over the pods that serve HTTP; prefill/decode,
the pools and the router (pd.py); a KV store, its processes (kv.py). The ConfigMap of settings first, when
the deployment uses one."""

from __future__ import annotations

from typing import Any

from factory.base.errors import InputError
from factory.plan.deployment import Deployment
from factory.render.kubernetes.config_map import config_map
from factory.render.kubernetes.kv import kv_objects
from factory.render.kubernetes.names import (
    COMPONENT_LABEL,
    INSTANCE_LABEL,
    LWS_INDEX_LABEL,
    LWS_NAME_LABEL,
    MANAGED_BY,
    NAME_LABEL,
    SERVER_COMPONENT,
    SERVICE_SUFFIX,
    object_name,
)
from factory.render.kubernetes.pd import pd_objects
from factory.render.kubernetes.pods import pod_template
from factory.render.kubernetes.shapes import group_of, one_pod, service

Manifest = dict[str, Any]


def objects(deployment: Deployment) -> list[Manifest]:
    """The deployment's objects: its ConfigMap (when it uses a setting), the workload, the Service."""
    name = object_name(deployment)
    where = f"{deployment.image.reference} {deployment.layout}"
    labels = {
        NAME_LABEL: name,
        INSTANCE_LABEL: name,  # every object and pod of the deployment (its NetworkPolicy selects by it)
        COMPONENT_LABEL: SERVER_COMPONENT,
        **MANAGED_BY,
    }
    if deployment.deploy_type == "pd_cluster":
        return pd_objects(deployment, name, labels, where)
    if deployment.deploy_type == "kv_store_lb":
        return kv_objects(deployment, name, labels, where)
    if deployment.deploy_type == "single_node":
        spec = deployment.run[0].spec
        workload = one_pod(name, labels, pod_template(deployment, spec, labels, where), spec)
        serving, selector = spec, {NAME_LABEL: name}
    else:
        head, workers = deployment.run[0], deployment.run[1:]
        if len(workers) != 1 or len(deployment.run[0].names) != 1:
            raise InputError(f"{where}: workers that do not share one spec", field="run", value=len(workers))
        leader = pod_template(deployment, head.spec, labels, where)
        worker = pod_template(deployment, workers[0].spec, labels, where)
        workload = group_of(name, labels, deployment.nodes, (leader, worker), [head.spec, workers[0].spec])
        serving = head.spec
        selector = {LWS_NAME_LABEL: name}
        if workers[0].spec.probe is None:  # only the leader serves; with hybrid load balancing every rank
            selector[LWS_INDEX_LABEL] = "0"
    found: list[Manifest] = []
    config = config_map(deployment, name, labels)
    found += [config] if config else []
    # The LWS's own headless Service has the LWS's name: the Service in front of it may not.
    service_name = f"{name}-{SERVICE_SUFFIX}" if workload["kind"] == "LeaderWorkerSet" else name
    grouped = workload["kind"] == "LeaderWorkerSet"
    return [*found, workload, service(service_name, labels, selector, serving, grouped)]
