"""The matrix's Kubernetes column: per row, the deployments whose manifests are generated and current, and
the checks CI runs on them, claimed only for a tree a test checks (the same constants the tests use)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import yaml

from factory.blueprint import plan_project
from factory.matrix import Matrix, coverage
from factory.matrix_kubernetes import NEWEST_LWS, ci_checks
from factory.project import Project, load_project
from factory.render import kubernetes
from tests import kubernetes_checks as checks
from tests.conftest import FIXTURES, KIMI, ROOT, TINY, blueprint_of, run_factory

KIND_NAMES = {"Deployment": "Deployment", "LeaderWorkerSet": "LeaderWorkerSet"}


def _matrix(project: Project, reports: Path) -> Matrix:
    return coverage(
        plan_project(project),
        project.out,
        reports,
        None,
        lambda path: None,
        kubernetes_checks=ci_checks(project),
    )


def _on_disk(root: Path, slug: str) -> Counter[str]:
    """The workloads of one model's committed manifests, by kind, as a user counts them."""
    found: Counter[str] = Counter()
    for path in (root / "k8s" / slug).rglob("manifest.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc["kind"] in KIND_NAMES:
                found[doc["kind"]] += 1
    return found


def test_the_claimed_releases_are_the_ones_the_tests_check() -> None:
    assert (checks.LWS_RELEASES[0], checks.LWS_RELEASES[-1]) == (kubernetes.MIN_LWS, NEWEST_LWS)
    assert (
        checks.KUBERNETES_VERSIONS[0].rsplit(".", 1)[0],
        checks.KUBERNETES_VERSIONS[-1].rsplit(".", 1)[0],
    ) == kubernetes.KUBERNETES_VERSIONS


def test_each_row_of_the_project_counts_its_checked_manifests_and_names_the_checks(
    project: Project, tmp_path: Path
) -> None:
    matrix = _matrix(project, tmp_path)
    for model, slug in ((TINY, "tiny-random-llama"), (KIMI, "kimi-linear-48b-a3b-instruct")):
        cell = matrix.kubernetes[f"{model} (default)"]
        counts = _on_disk(ROOT, slug)
        assert (
            cell.text
            == f"checked: {counts['Deployment']} Deployment, {counts['LeaderWorkerSet']} LeaderWorkerSet"
        )
    detail = matrix.kubernetes[f"{TINY} (default)"].detail
    first, last = checks.KUBERNETES_VERSIONS[0][:4], checks.KUBERNETES_VERSIONS[-1][:4]
    assert f"LeaderWorkerSet: LWS {checks.LWS_RELEASES[0]} to {checks.LWS_RELEASES[-1]} CRD strict" in detail
    assert f"Kubernetes {first} to {last} strict, kubectl kustomize, argv parity with compose" in detail


def test_a_stale_manifest_is_not_claimed_checked(scratch: Path, tmp_path: Path) -> None:
    project = load_project(scratch)
    deployment = blueprint_of(project, KIMI, "h200").deployment("single_node_tp")
    manifest = scratch / kubernetes.directory(deployment) / "manifest.yaml"
    manifest.write_text(manifest.read_text().replace("replicas: 1", "replicas: 2"))
    cell = _matrix(project, tmp_path).kubernetes[f"{KIMI} (default)"]
    counts = _on_disk(scratch, deployment.image.slug)
    assert cell.text == (
        f"checked: {counts['Deployment'] - 1} Deployment, {counts['LeaderWorkerSet']} LeaderWorkerSet;"
        " 1 stale or missing"
    )
    assert kubernetes.directory(deployment).as_posix() in cell.detail


def test_a_tree_no_test_checks_claims_no_check_and_prefill_decode_has_no_manifest_yet(
    tmp_path: Path,
) -> None:
    """The upstream schema's fixture: generated elsewhere, checked by no test; its P/D deployments wait."""
    tree, out = FIXTURES / "upstream-schema", tmp_path / "out"
    assert run_factory(ROOT, "generate", "--recipes", str(tree), "--out", str(out)).returncode == 0
    project = load_project(ROOT, tree, out)
    assert ci_checks(project) == {}
    pd = sum(d.deploy_type == "pd_cluster" for b in plan_project(project).images for d in b.deployments)
    assert pd > 0
    result = run_factory(
        ROOT, "matrix", "--recipes", str(tree), "--out", str(out), "--reports", str(tmp_path / "r")
    )
    assert result.returncode == 0, result.stderr
    lines = (tmp_path / "r" / "matrix.md").read_text().splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| model"))
    assert lines[header].endswith("| Kubernetes manifests |")
    markdown, rows = "\n".join(lines), lines[header + 2 :]
    assert "(no test checks this tree's manifests)" in markdown
    assert all("generated, no test checks them:" in row and "checked:" not in row for row in rows)
    assert sum(int(row.rsplit("; ", 1)[1].split()[0]) for row in rows if "prefill/decode" in row) == pd
    assert "prefill/decode: no manifest, the router is not locked" in markdown


def test_the_page_shows_the_column_with_its_checks(tmp_path: Path) -> None:
    result = run_factory(ROOT, "matrix", "--reports", str(tmp_path))
    assert result.returncode == 0, result.stderr
    html = (tmp_path / "matrix.html").read_text()
    assert "<th>Kubernetes manifests</th>" in html
    assert f"LWS {kubernetes.MIN_LWS} to {NEWEST_LWS} CRD strict and webhook rules" in html
    assert '<td class="kubernetes" title="Deployment: Kubernetes' in html
