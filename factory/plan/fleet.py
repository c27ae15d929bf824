"""What a deployment offers a fleet, decided once from the catalog's fleet data and the deployment's shape:
where its servers' metrics are read and which series say how busy they are, whether and how it scales (by
pods, or by whole groups of nodes through the LeaderWorkerSet's scale subresource), whether an inference pool
can front it and which picker that pool names, and which clients may reach its servers. The Kubernetes
components print it (factory.render.components); none decides."""

from __future__ import annotations

from typing import Literal

from factory.catalog.fleet import Autoscale, Client, Metrics, Picker
from factory.catalog.fleet import Fleet as FleetCatalog
from factory.plan.health import Frozen

DeployType = Literal["single_node", "multi_node", "pd_cluster", "kv_store_lb"]

# Why a deployment of these kinds is not scaled or pooled: its router names each process it sends to when it
# starts, so a replica more would get no request (and a pool would bypass the router that makes it work).
ROUTER_NAMES_ITS_WORKERS = (
    "its router is given each {what} by name when it starts (--worker-urls): a replica added later would "
    "get no request"
)
POOL_HAS_NO_ROLES = (
    "an InferencePool (inference.networking.k8s.io/v1) selects one set of interchangeable servers: it has no "
    "prefill and decode roles, and a request the gateway sent to a pool of both could land on a prefill "
    "server whole. Disaggregated picking is the picker's (llm-d's inference scheduler pairs a prefill and a "
    "decode server, with its routing sidecar beside each decode server), which the factory does not ship: "
    "the deployment's entry point stays its router's Service"
)


class Scaling(Frozen):
    """How the deployment scales: its unit (a pod, or a LeaderWorkerSet group of `nodes` pods), the bounds,
    the waiting requests per replica it aims at, and the cooldown, from the catalog."""

    unit: Literal["pods", "groups"]
    nodes: int  # pods per replica (a group's size)
    settings: Autoscale


class Fleet(Frozen):
    metrics: Metrics
    scaling: Scaling | None  # None: not scaled, for `scaling_why_not`
    scaling_why_not: str = ""
    picker: Picker | None  # None: no inference pool, for `pool_why_not`
    pool_why_not: str = ""
    clients: tuple[Client, ...]


def plan_fleet(catalog: FleetCatalog, deploy_type: DeployType, nodes: int) -> Fleet:
    """The deployment's fleet decisions: every kind is scraped and admits the catalog's clients; a one-node or
    multi-node deployment scales (by pods, or by groups) and can be an inference pool; prefill/decode and KV
    stores have a router that names its workers, so they do neither (a KV store's instances are pooled:
    each is a whole server the picker may choose)."""
    scaling: Scaling | None = None
    why_not = ""
    if deploy_type in ("single_node", "multi_node"):
        unit: Literal["pods", "groups"] = "pods" if deploy_type == "single_node" else "groups"
        scaling = Scaling(unit=unit, nodes=nodes, settings=catalog.autoscale)
    else:
        what = "pool node" if deploy_type == "pd_cluster" else "instance"
        why_not = ROUTER_NAMES_ITS_WORKERS.format(what=what)
    pooled = deploy_type != "pd_cluster"
    return Fleet(
        metrics=catalog.metrics,
        scaling=scaling,
        scaling_why_not=why_not,
        picker=catalog.picker if pooled else None,
        pool_why_not="" if pooled else POOL_HAS_NO_ROLES,
        clients=tuple(catalog.clients),
    )
