"""The matrix's Kubernetes column: per row, the deployments whose manifests are generated and current, and
"checked" only where a recorded test run checked exactly the bytes on disk now (issue 29), its tooltip
citing the record: the check, the result, when, and which run."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from factory.blueprint import plan_project
from factory.project import Project, load_project
from factory.render import kubernetes
from factory.report.matrix import Matrix, coverage
from tests import kubernetes_checks as checks
from tests.conftest import FIXTURES, KIMI, ROOT, TINY, blueprint_of, run_factory
from tests.manifest_records import on_disk, recording, this_run

KIND_NAMES = {"Deployment": "Deployment", "LeaderWorkerSet": "LeaderWorkerSet"}
CHECK = f"Kubernetes {checks.KUBERNETES_VERSIONS[-1]} strict"


def _matrix(project: Project, reports: Path) -> Matrix:
    return coverage(plan_project(project), project.out, reports, None, lambda path: None)


def _kv_store(folder: Path) -> bool:
    """A KV-store deployment's folder (named by its kv_store file): its row is the model's KV-store row."""
    return folder.name in {path.stem for path in (ROOT / "recipes" / "kv_store").glob("*.yaml")}


def _on_disk(root: Path, slug: str) -> Counter[str]:
    """The workloads of one model's manifests on disk (its KV stores' apart: a row of their own), by kind,
    as a user counts them."""
    found: Counter[str] = Counter()
    for path in (root / "k8s" / slug).rglob("manifest.yaml"):
        if _kv_store(path.parent):
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc["kind"] in KIND_NAMES:
                found[doc["kind"]] += 1
    return found


def _counts(root: Path, slug: str, less: int = 0) -> str:
    counts = _on_disk(root, slug)
    return f"{counts['Deployment'] - less} Deployment, {counts['LeaderWorkerSet']} LeaderWorkerSet"


def _check_every_manifest(root: Path, reports: Path, test: str) -> None:
    """A real check on every manifest under root/k8s, recorded as the tests in test_kubernetes.py do."""
    manifests = sorted((root / "k8s").rglob("manifest.yaml"))
    with recording(test, CHECK, on_disk(root, [path.parent for path in manifests]), reports=reports):
        for path in manifests:
            for doc in (d for d in yaml.safe_load_all(path.read_text()) if d):
                assert checks.core_problems(doc, checks.KUBERNETES_VERSIONS[-1]) == [], path


def test_without_a_recorded_run_no_manifest_is_claimed_checked(tmp_path: Path) -> None:
    """The project's own manifests, with a reports folder no test wrote to: generated, never "checked"."""
    result = run_factory(ROOT, "matrix", "--reports", str(tmp_path))
    assert result.returncode == 0, result.stderr
    markdown = (tmp_path / "matrix.md").read_text()
    for model, slug in ((TINY, "tiny-random-llama"), (KIMI, "kimi-linear-48b-a3b-instruct")):
        row = next(line for line in markdown.splitlines() if line.startswith(f"| {model} (default)"))
        assert row.endswith(f"| generated, no test run recorded: {_counts(ROOT, slug)} |"), row
    assert "checked:" not in markdown
    assert "no test run is recorded there, so no manifest is claimed checked" in markdown


def test_a_recorded_run_makes_its_manifests_checked_and_the_tooltip_cites_it(
    scratch: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    project = load_project(scratch)
    before = _matrix(project, tmp_path).kubernetes[f"{KIMI} (default)"]
    assert (
        before.text == f"generated, no test run recorded: {_counts(scratch, 'kimi-linear-48b-a3b-instruct')}"
    )
    _check_every_manifest(scratch, tmp_path, request.node.nodeid)
    matrix = _matrix(project, tmp_path)
    for model, slug in ((TINY, "tiny-random-llama"), (KIMI, "kimi-linear-48b-a3b-instruct")):
        assert matrix.kubernetes[f"{model} (default)"].text == f"checked: {_counts(scratch, slug)}"
    detail = matrix.kubernetes[f"{TINY} (default)"].detail
    today = datetime.now(UTC).strftime("%Y-%m-%d")
    assert detail.startswith(f"checked (2 of them): {CHECK}: passed {today} ")
    assert this_run() in detail and request.node.nodeid in detail
    assert matrix.kubernetes_records == [next(line for line in detail.splitlines()).split(": ", 1)[1]]


def test_kv_store_deployments_are_counted_as_every_other_kind(
    scratch: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Issue 32: a model's KV-store row counts its KV-store deployments' manifests as every row counts its
    own, generated and then checked once a recorded run checked their bytes (it said "no manifest yet")."""
    project = load_project(scratch)
    folders = [p.parent for p in (scratch / "k8s" / "tiny-random-llama").rglob("manifest.yaml")]
    stores = sum(map(_kv_store, folders))
    assert stores == 2, "the tiny model's centralized and distributed KV stores"
    row = f"{TINY} (default, KV store)"
    before = _matrix(project, tmp_path).kubernetes[row]
    assert before.text == f"generated, no test run recorded: {stores} KV store", before.text
    _check_every_manifest(scratch, tmp_path, request.node.nodeid)
    after = _matrix(project, tmp_path).kubernetes[row]
    assert after.text == f"checked: {stores} KV store", after.text
    assert after.detail.startswith(f"checked ({stores} of them): {CHECK}: passed")


def test_a_manifest_changed_since_its_record_is_not_claimed_checked(
    scratch: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A recipe changes after the run and `factory generate` rewrites its manifests: current on disk, but
    not the bytes the record checked."""
    _check_every_manifest(scratch, tmp_path, request.node.nodeid)
    recipe = scratch / "recipes" / "models" / "moonshotai" / "Kimi-Linear-48B-A3B-Instruct.yaml"
    recipe.write_text(recipe.read_text().replace('- "1048576"', '- "524288"'))
    assert run_factory(scratch, "generate").returncode == 0
    matrix = _matrix(load_project(scratch), tmp_path)
    kimi = matrix.kubernetes[f"{KIMI} (default)"]
    slug = "kimi-linear-48b-a3b-instruct"
    assert kimi.text == f"generated, checked before it changed: {_counts(scratch, slug)}"
    assert "(last recorded: " + CHECK + ": passed" in kimi.detail
    changed = blueprint_of(load_project(scratch), KIMI, "h200").deployment("single_node_tp")
    assert kubernetes.directory(changed).as_posix() in kimi.detail
    assert matrix.kubernetes[f"{TINY} (default)"].text == f"checked: {_counts(scratch, 'tiny-random-llama')}"


def test_a_failed_run_is_cited_as_failed(
    scratch: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    tiny = scratch / "k8s" / "tiny-random-llama"
    folders = on_disk(scratch, [path.parent for path in tiny.rglob("manifest.yaml")])
    with pytest.raises(AssertionError), recording(request.node.nodeid, CHECK, folders, reports=tmp_path):
        raise AssertionError("a planted failure")
    cell = _matrix(load_project(scratch), tmp_path).kubernetes[f"{TINY} (default)"]
    assert cell.text == "generated, a recorded check failed: 1 Deployment, 1 LeaderWorkerSet"
    assert f"{CHECK}: failed (a planted failure)" in cell.detail


def test_a_stale_manifest_is_not_claimed_checked(
    scratch: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    _check_every_manifest(scratch, tmp_path, request.node.nodeid)
    project = load_project(scratch)
    deployment = blueprint_of(project, KIMI, "h200").deployment("single_node_tp")
    manifest = scratch / kubernetes.directory(deployment) / "manifest.yaml"
    manifest.write_text(manifest.read_text().replace("replicas: 1", "replicas: 2"))
    cell = _matrix(project, tmp_path).kubernetes[f"{KIMI} (default)"]
    assert cell.text == f"checked: {_counts(scratch, deployment.image.slug, less=1)}; 1 stale or missing"
    assert kubernetes.directory(deployment).as_posix() in cell.detail


def test_another_tree_is_claimed_checked_by_no_record_of_the_project_and_pd_waits(tmp_path: Path) -> None:
    """The upstream schema's fixture beside records of the project's own run: their folders are other
    bytes (or other folders), so nothing there is checked; its P/D deployments wait for the router."""
    tree, out, reports = FIXTURES / "upstream-schema", tmp_path / "out", tmp_path / "r"
    assert run_factory(ROOT, "generate", "--recipes", str(tree), "--out", str(out)).returncode == 0
    _check_every_manifest(ROOT, reports, "project-run")
    project = load_project(ROOT, tree, out)
    pd = sum(d.deploy_type == "pd_cluster" for b in plan_project(project).images for d in b.deployments)
    assert pd > 0
    result = run_factory(ROOT, "matrix", "--recipes", str(tree), "--out", str(out), "--reports", str(reports))
    assert result.returncode == 0, result.stderr
    lines = (reports / "matrix.md").read_text().splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| model"))
    assert lines[header].endswith("| Kubernetes manifests |")
    markdown, rows = "\n".join(lines), lines[header + 2 :]
    assert f"- {CHECK}: passed" in markdown, "the record read is listed above the table"
    assert all("checked:" not in row for row in rows)
    assert sum(int(row.rsplit("; ", 1)[1].split()[0]) for row in rows if "prefill/decode" in row) == pd
    assert "prefill/decode: no manifest, the router is not locked" in markdown


def test_the_page_shows_the_column_and_the_records_read(tmp_path: Path) -> None:
    _check_every_manifest(ROOT, tmp_path, "project-run")
    result = run_factory(ROOT, "matrix", "--reports", str(tmp_path))
    assert result.returncode == 0, result.stderr
    html = (tmp_path / "matrix.html").read_text()
    assert "<th>Kubernetes manifests</th>" in html
    assert f'<ul id="kubernetes-records"><li>{CHECK}: passed' in html
    assert f'<td class="kubernetes" title="checked (2 of them): {CHECK}: passed' in html
