"""A Mooncake KV-store deployment as Kubernetes objects: its settings and its generated configs as ConfigMaps,
then one workload per unit, each with its Service: the master (its Service also the RPC port every instance
and the store service register at), the store service, each instance (a Deployment, or a LeaderWorkerSet for
a multi-node instance), the router (behind the Service named as the deployment, its entry point; with one
instance and no router, that instance's Service is).

The start order is the run spec's (`after`): each pod whose process starts after others waits in an init
container until their Services answer their health checks (pods.py), because vLLM with an unreachable
Mooncake master hangs instead of exiting. Addresses are the table's (values.py): the master by its Service's
name, the store's and each instance's own address its pod's."""

from __future__ import annotations

from typing import Any

from factory.base.errors import InputError
from factory.plan.deployment import Deployment
from factory.render.kubernetes.config_map import config_map
from factory.render.kubernetes.names import (
    COMPONENT_LABEL,
    LWS_INDEX_LABEL,
    LWS_NAME_LABEL,
    NAME_LABEL,
    ROUTER,
    SERVER_COMPONENT,
    require_deployable,
    unit,
    unit_services,
    units_of,
)
from factory.render.kubernetes.pods import Answer, pod_template
from factory.render.kubernetes.shapes import group_of, one_pod, service
from factory.render.kubernetes.values import table_of

Manifest = dict[str, Any]


def answers(deployment: Deployment) -> dict[str, Answer]:
    """Where each process that serves HTTP answers its health check, by process: its unit's Service, at the
    port the Service forwards to it, within its own probe's timeout and interval."""
    services = unit_services(deployment)
    found: dict[str, Answer] = {}
    for group in deployment.run:
        probe = group.spec.probe
        if probe is None or group.indices != (0,):  # a headless rank; the Service fronts a group's head
            continue
        url = f"http://{services[unit(group)]}:{group.spec.port}{probe.path}"
        found[group.names[0]] = Answer(url, probe.timeout_s, probe.interval_s)
    return found


def configs(deployment: Deployment, name: str, labels: dict[str, str]) -> Manifest:
    """The ConfigMap `<name>-configs`: each generated config template, a key named as its file (each pod
    mounts its own with a subPath)."""
    mounts = {config.file: config.content for group in deployment.run for config in group.spec.configs}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{name}-configs", "labels": labels},
        "data": dict(sorted(mounts.items())),
    }


def kv_objects(deployment: Deployment, name: str, labels: dict[str, str], where: str) -> list[Manifest]:
    require_deployable(deployment, where)
    settings = config_map(deployment, name, labels)
    found = [*([settings] if settings else []), configs(deployment, name, labels)]
    services = unit_services(deployment)
    waits = answers(deployment)
    units = units_of(deployment)
    for part, workload in units.names.items():
        groups = units.groups[part]
        head = groups[0]
        program = head.spec.program
        # vLLM's pods carry the server component (the model cache claim patches them), the others their own
        component = {"vllm": SERVER_COMPONENT, "vllm-router": ROUTER}.get(program, program)
        part_labels = {**labels, NAME_LABEL: workload, COMPONENT_LABEL: component}
        at = f"{where} {part}"
        pods = [
            pod_template(deployment, g.spec, part_labels, at, table_of(deployment, g), waits) for g in groups
        ]
        nodes = sum(len(group.names) for group in groups)
        if nodes == 1:
            found.append(one_pod(workload, part_labels, pods[0], head.spec))
            selector = {NAME_LABEL: workload}
        elif len(groups) == 2 and head.indices == (0,):
            specs = [group.spec for group in groups]
            found.append(group_of(workload, part_labels, nodes, (pods[0], pods[1]), specs))
            selector = {LWS_NAME_LABEL: workload}
            if groups[1].spec.probe is None:  # only the leader serves; with hybrid load balancing every rank
                selector[LWS_INDEX_LABEL] = "0"
        else:
            raise InputError(f"{at}: ranks that do not share one spec", field="run", value=len(groups))
        service_labels = labels if services[part] == name else part_labels
        grouped = LWS_NAME_LABEL in selector
        found.append(service(services[part], service_labels, selector, head.spec, grouped))
    return found
