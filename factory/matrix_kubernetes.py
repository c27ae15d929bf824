"""The matrix's Kubernetes column: per row, whether each deployment's manifests were generated (and are
current on disk) and which checks CI runs on them.

A claim is made only where a test makes it, for the tree it makes it on: tests/test_kubernetes.py checks
the project's committed manifests (every object against each Kubernetes release claimed, every LWS against
the CRD of each LWS release vendored and the webhook's rules, every kustomization rendered, every pod's
command against its compose file); with FACTORY_UPSTREAM_RECIPES it checks the upstream corpus, fewer
ways (the minimum LWS release and the newest Kubernetes one, argv parity, no kustomize). Any other tree's
manifests are generated but checked by no test, and the column says so.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from factory.blueprint import Blueprint
from factory.project import Project
from factory.render import kubernetes
from factory.writer import difference

# The newest LWS release whose CRD the tests vendor (tests/data/lws/); kubernetes.MIN_LWS is the oldest.
# A test holds both ends to the releases tests/kubernetes_checks.py validates against.
NEWEST_LWS = "v0.10.0"
CORPUS_VARIABLE = "FACTORY_UPSTREAM_RECIPES"  # the tree the corpus tests check, where CI has it
# What tests/kubernetes_checks.address_problems holds prefill/decode manifests to, beyond the rest.
PD = "the router on stable pool names, every process on its pod address"
KINDS = {"single_node": "Deployment", "multi_node": "LeaderWorkerSet", "pd_cluster": "prefill/decode"}


def _project_checks() -> dict[str, str]:
    first, last = kubernetes.KUBERNETES_VERSIONS
    common = f"Kubernetes {first} to {last} strict, kubectl kustomize, argv parity with compose"
    lws = f"LWS {kubernetes.MIN_LWS} to {NEWEST_LWS} CRD strict and webhook rules"
    return {"single_node": common, "multi_node": f"{lws}, {common}", "pd_cluster": f"{lws}, {common}, {PD}"}


def _corpus_checks() -> dict[str, str]:
    common = f"Kubernetes {kubernetes.KUBERNETES_VERSIONS[-1]} strict, argv parity with compose"
    lws = f"LWS {kubernetes.MIN_LWS} CRD strict and webhook rules"
    return {"single_node": common, "multi_node": f"{lws}, {common}", "pd_cluster": f"{lws}, {common}, {PD}"}


def ci_checks(project: Project) -> dict[str, str]:
    """What CI checks on this tree's manifests, per deploy type (empty: a tree no test checks)."""
    tree = project.tree.root.resolve()
    if tree == (project.root / "recipes").resolve():
        return _project_checks()
    corpus = os.environ.get(CORPUS_VARIABLE)
    if corpus and Path(corpus).resolve() == tree:
        return _corpus_checks()
    return {}


@dataclass(frozen=True)
class KubernetesCell:
    text: str  # what the table shows
    detail: str  # the tooltip: the checks, per kind of object, and what is missing


def kubernetes_cell(blueprints: list[Blueprint], out: Path, checks: dict[str, str]) -> KubernetesCell:
    """The column for one row (a model's variant on every hardware it was planned for)."""
    current: Counter[str] = Counter()
    stale: list[str] = []
    waiting = 0
    for blueprint in blueprints:
        files = {file.path: file for file in blueprint.k8s_files}
        for deployment in blueprint.deployments:
            if not kubernetes.deployable(deployment):
                waiting += 1
                continue
            folder = kubernetes.directory(deployment)
            mine = [file for path, file in files.items() if path.parent == folder]
            if any(difference(out / file.path, file) is not None for file in mine):
                stale.append(folder.as_posix())
            else:
                current[deployment.deploy_type] += 1
    if not (current or stale or waiting):
        return KubernetesCell("", "no deployment planned")
    kinds = [kind for kind in KINDS if kind in current]  # one-node first, as the table's legend
    counts = ", ".join(f"{current[kind]} {KINDS[kind]}" for kind in kinds)
    checked = bool(current) and all(kind in checks for kind in current)
    parts = [f"{'checked' if checked else 'generated, no test checks them'}: {counts}"] if current else []
    parts += [f"{len(stale)} stale or missing"] if stale else []
    parts += [f"{waiting} prefill/decode: no manifest, the router is not locked"] if waiting else []
    detail = [f"{KINDS[kind]}: {checks.get(kind, 'no test checks them')}" for kind in kinds]
    detail += [f"stale or missing (run `factory generate`): {', '.join(sorted(stale))}"] if stale else []
    detail += (
        ["prefill/decode: no manifest until `factory lock` locks the router (a pod needs its image)"]
        if waiting
        else []
    )
    return KubernetesCell("; ".join(parts), "\n".join(detail))
