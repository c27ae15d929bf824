"""What a fleet of servers needs around them, as catalog data: which metric series say how busy a server is
(and where they are read), how a deployment scales on them, the endpoint picker an inference pool names, and
which clients besides a deployment's own pods may reach its servers. The plan turns these into each
deployment's decisions (factory.plan.fleet); the Kubernetes components print them."""

from __future__ import annotations

from typing import Literal

from factory.base.models import Count, Port, Strict


class MetricSeries(Strict):
    """The series the autoscaler and the endpoint picker read, by what they mean: the names the vLLM release
    serves (read from the running server by validation, which fails when one is missing)."""

    waiting: str  # requests queued, not yet scheduled: what a replica more would take
    running: str  # requests being decoded
    kv_cache_usage: str  # the share of the KV cache in use (0 to 1): what a KV-aware picker weighs


class Metrics(Strict):
    path: str = "/metrics"  # on the API port
    interval_s: Count = 15  # how often the scraper reads it
    series: MetricSeries


class Autoscale(Strict):
    """How a deployment scales on its waiting queue: between the bounds, one replica (one group of nodes) per
    `waiting_per_replica` queued requests, and no sooner down than `cooldown_s` after the queue emptied."""

    min_replicas: Count = 1
    max_replicas: Count = 4
    waiting_per_replica: Count = 5
    cooldown_s: Count = 300
    polling_s: Count = 30
    # Where KEDA's prometheus trigger asks (the Prometheus a user runs; patch it to yours).
    prometheus: str = "http://prometheus-operated.monitoring.svc:9090"
    why: str = ""


class Picker(Strict):
    """The endpoint picker an InferencePool names (the user runs it): `{name}` is the pool's name."""

    service: str = "{name}-epp"
    port: Port = 9002
    failure_mode: Literal["FailOpen", "FailClose"] = "FailClose"
    why: str = ""


class Client(Strict):
    """Pods outside a deployment that may reach its servers' API port, in any namespace: by labels
    (`{name}`: the deployment's name) and by label keys that must exist."""

    name: str
    labels: dict[str, str] = {}
    keys: list[str] = []
    why: str


class Fleet(Strict):
    metrics: Metrics
    autoscale: Autoscale = Autoscale()
    picker: Picker = Picker()
    clients: list[Client] = []
