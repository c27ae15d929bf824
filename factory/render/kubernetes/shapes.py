"""The objects every kind of deployment is built of: a Deployment of one pod, a LeaderWorkerSet of a group of
nodes (its leader the head's pod, its workers the one worker pod), and a Service in front of either."""

from __future__ import annotations

from typing import Any

from factory.plan.runspec import RunSpec
from factory.render.kubernetes import lint
from factory.render.kubernetes.names import LWS_API, NAME_LABEL
from factory.render.kubernetes.resources import replacement

Manifest = dict[str, Any]


def _metadata(name: str, labels: dict[str, str], annotations: dict[str, str]) -> Manifest:
    return {"name": name, "labels": labels} | ({"annotations": annotations} if annotations else {})


def one_pod(name: str, labels: dict[str, str], template: Manifest, spec: RunSpec) -> Manifest:
    """A Deployment of one pod, selected by its name label (a pod that holds GPUs replaced, not rolled)."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(name, labels, lint.workload([spec])),
        "spec": {
            "replicas": 1,
            **replacement(spec),
            "selector": {"matchLabels": {NAME_LABEL: name}},
            "template": template,
        },
    }


def group_of(
    name: str, labels: dict[str, str], size: int, pods: tuple[Manifest, Manifest], specs: list[RunSpec]
) -> Manifest:
    """A LeaderWorkerSet of one group of `size` nodes (its leader's pod, its workers'), created leader first
    and recreated as a whole."""
    leader, worker = pods
    return {
        "apiVersion": LWS_API,
        "kind": "LeaderWorkerSet",
        "metadata": _metadata(name, labels, lint.workload(specs)),
        "spec": {
            "replicas": 1,
            "startupPolicy": "LeaderCreated",
            "leaderWorkerTemplate": {
                "size": size,
                # one rank lost stops the group: recreate all of it
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": leader,
                "workerTemplate": worker,
            },
        },
    }


def service(
    name: str, labels: dict[str, str], selector: dict[str, str], spec: RunSpec, groups: bool = False
) -> Manifest:
    """The Service in front of a process's pods (`groups`: a LeaderWorkerSet's): its HTTP port, and its RPC
    port where it has one."""
    ports: list[dict[str, Any]] = [{"name": "http", "port": spec.port, "targetPort": "http"}]
    ports += [{"name": "rpc", "port": spec.rpc_port, "targetPort": "rpc"}] if spec.rpc_port else []
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(name, labels, lint.lws_service() if groups else {}),
        "spec": {"selector": selector, "ports": ports},
    }
