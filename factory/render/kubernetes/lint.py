"""The checks of kube-score (the cluster linter run over every manifest in the tests) that an object opts out
of, with kube-score's own annotation, and why, in an annotation of ours beside it (the docs page lists the
same reasons). Every other check passes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from factory.plan.runspec import RunSpec

IGNORE = "kube-score/ignore"
WHY = "ai.vllm.factory.kube-score-ignored"

PULL_POLICY = "container-image-pull-policy"
PULL_POLICY_WHY = (
    "IfNotPresent, Kubernetes' default for a tag: the tag names the image's inputs (and once published the "
    "digest pins it), so Always would only make every start of a multi-GB image wait on the registry; a "
    "cluster that must check pull credentials per pod enables the AlwaysPullImages admission plugin"
)
RESOURCES = "container-resources"
PROBES_IDENTICAL = "pod-probes-identical"
SERVICE_TARGETS_POD = "service-targets-pod"
POLICY_TARGETS_POD = "networkpolicy-targets-pod"
LWS_SERVICE_WHY = (
    "its pods are a LeaderWorkerSet's, whose pod templates kube-score does not read (the control plane "
    "test finds a ready endpoint behind it)"
)
LWS_POLICY_WHY = (
    "the pods it selects are LeaderWorkerSets', whose pod templates kube-score does not read (the tests "
    "match its selector against every pod template)"
)


def ignoring(ignored: Mapping[str, str]) -> dict[str, str]:
    """kube-score's ignore annotation and ours with the reasons (none when nothing is ignored)."""
    if not ignored:
        return {}
    checks = sorted(ignored)
    return {IGNORE: ",".join(checks), WHY: "; ".join(f"{check}: {ignored[check]}" for check in checks)}


def workload(specs: Iterable[RunSpec]) -> dict[str, str]:
    """A workload's: the pull policy always; the CPU limit where its pods run without one (GPU servers), with
    the catalog's why."""
    ignored = {PULL_POLICY: PULL_POLICY_WHY}
    for spec in specs:
        if spec.requests is not None and not spec.requests.cpu_limit:
            ignored[RESOURCES] = f"no CPU limit: {spec.requests.why_no_cpu_limit}"
        if spec.probe is not None and spec.liveness is not None:
            ignored[PROBES_IDENTICAL] = _probes_why(spec)
    return ignoring(ignored)


def _probes_why(spec: RunSpec) -> str:
    probe, live = spec.probe, spec.liveness
    assert probe is not None and live is not None
    return (
        f"kube-score compares a probe's path and port only; the two ask {probe.path}, the server's one "
        f"health handler, with other thresholds: readiness every {probe.interval_s} s, "
        f"{probe.timeout_s} s timeout, {probe.retries} failures; liveness every {live.interval_s} s, "
        f"{live.timeout_s} s timeout, {live.failures} failures"
    )


def lws_service() -> dict[str, str]:
    return ignoring({SERVICE_TARGETS_POD: LWS_SERVICE_WHY})


def _selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether a label selector (matchLabels, matchExpressions with In or Exists) selects these labels."""
    if not selector.get("matchLabels", {}).items() <= labels.items():
        return False
    for expression in selector.get("matchExpressions", []):
        value = labels.get(expression["key"])
        if value is None or (expression["operator"] == "In" and value not in expression["values"]):
            return False
    return True


def policy(selector: Mapping[str, Any], documents: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """A NetworkPolicy's: none where a Deployment's pods match it; else kube-score sees no pod it selects."""
    deployments = [doc for doc in documents if doc["kind"] == "Deployment"]
    seen = any(_selects(selector, doc["spec"]["template"]["metadata"]["labels"]) for doc in deployments)
    return {} if seen else ignoring({POLICY_TARGETS_POD: LWS_POLICY_WHY})
