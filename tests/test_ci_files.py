"""The publishing workflow and the buildx bake file: checked statically (neither can run here)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT

WORKFLOW = ROOT / ".github" / "workflows" / "publish.yml"
PULL_REQUESTS = ROOT / ".github" / "workflows" / "ci.yml"
BAKE = ROOT / "images" / "docker-bake.hcl"


@pytest.mark.parametrize("workflow", [WORKFLOW, PULL_REQUESTS], ids=lambda p: p.name)
def test_zizmor_finds_nothing_in_the_workflow(workflow: Path) -> None:
    zizmor = Path(sys.executable).parent / "zizmor"
    result = subprocess.run(
        [str(zizmor), "--offline", "--persona", "pedantic", str(workflow)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("workflow", [WORKFLOW, PULL_REQUESTS], ids=lambda p: p.name)
def test_every_action_is_pinned_by_commit(workflow: Path) -> None:
    uses = re.findall(r"uses:\s*(\S+)", workflow.read_text())
    assert uses
    for action in uses:
        assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", action), f"not pinned by SHA: {action}"


def test_pull_requests_run_the_readme_test_command() -> None:
    """ci.yml runs .ci/run, and .ci/run runs the command the README gives for running the tests."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("# Run the tests", 1)[1]
    command = section.split("\n", 2)[1].strip()
    assert command.startswith("testbench/up --tests &&"), command
    ci_run = (ROOT / ".ci" / "run").read_text()
    assert ci_run.rstrip().splitlines()[-1] == command
    workflow = yaml.safe_load(PULL_REQUESTS.read_text())
    assert set(workflow[True]) >= {"pull_request"}, "yaml reads `on:` as True"
    steps = [step.get("run", "") for step in workflow["jobs"]["tests"]["steps"]]
    assert any(step.endswith(".ci/run") for step in steps), steps


def _run_lines(steps: list[dict[str, object]]) -> list[str]:
    """The shell lines the steps run, in order (comments dropped: a comment runs nothing)."""
    lines = []
    for step in steps:
        for line in str(step.get("run", "")).splitlines():
            if line.strip() and not line.strip().startswith("#"):
                lines.append(line.strip())
    return lines


def test_workflow_publishes_through_the_factory_and_signs_by_digest() -> None:
    workflow = yaml.safe_load(WORKFLOW.read_text())
    job = workflow["jobs"]["publish"]
    lines = _run_lines(job["steps"])

    def first(command: str) -> int:
        found = [index for index, line in enumerate(lines) if command in line]
        assert found, f"no step runs {command!r}"
        return found[0]

    order = [
        first("nox -s check-generated"),
        first('nox -s "build-${HARDWARE}"'),
        first('nox -s "validate-${HARDWARE}"'),
        first("factory publish"),
        first("factory verify"),
    ]
    assert order == sorted(order), "check, build, validate, publish (sign, attest), verify: in that order"
    assert not any("cosign " in line for line in lines), "signing is factory publish's, by digest"
    publish = lines[first("factory publish") - 5 : first("factory publish") + 1]
    assert any("{tag}-sha-" in line for line in publish)
    assert any("latest-{hardware}-{variant}" in line for line in publish)
    assert any("--keyless" in line for line in publish), "keyless stays an option"
    # Each hardware of the workflow's matrix has the nox sessions the steps call.
    listing = subprocess.run(
        [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "--list"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    chosen = workflow["jobs"]["targets"]["steps"][0]["run"]
    for entry in json.loads(re.search(r"all='(.+?)'", chosen)[1]):
        for session in (f"build-{entry['hardware']}", f"validate-{entry['hardware']}"):
            assert re.search(rf"^[*-] {session} ->", listing, re.M), f"no nox session {session}"


def _targets() -> dict[str, dict[str, str]]:
    targets = {}
    for name, body in re.findall(r'target "([^"]+)" \{(.*?)\n\}', BAKE.read_text(), re.S):
        targets[name] = dict(re.findall(r"(\w+)\s*=\s*(.+)", body))
    return targets


def test_bake_file_builds_grace_trays_for_arm64_and_the_rest_for_amd64() -> None:
    targets = _targets()
    dockerfiles = sorted(ROOT.glob("images/**/Dockerfile"))
    assert len(targets) == len(dockerfiles)
    for dockerfile in dockerfiles:
        context = dockerfile.parent.relative_to(ROOT).as_posix()
        target = next(t for t in targets.values() if t["context"] == f'"{context}"')
        arm = "-gb200-" in context or "-gb300-" in context
        assert target["platforms"] == ('["linux/arm64"]' if arm else '["linux/amd64"]'), context
        assert context.split("/")[-1] in target["tags"]


def test_every_test_module_counts_to_one_ci_part() -> None:
    """.ci/run prints each part's time against its budget: a test module listed in no part, or in two,
    would hide its cost (.ci/parts.toml)."""
    import tomllib

    parts = tomllib.loads((ROOT / ".ci" / "parts.toml").read_text())["part"]
    listed = [module for part in parts for module in part.get("modules", [])]
    modules = sorted(path.name for path in (ROOT / "tests").glob("test_*.py"))
    assert sorted(set(listed)) == sorted(listed), "a module listed in two parts"
    assert sorted(listed) == modules, {
        "not in any part": sorted(set(modules) - set(listed)),
        "listed but missing": sorted(set(listed) - set(modules)),
    }
    go_listed = [module for part in parts for module in part.get("go_modules", [])]
    go_modules = {path.name for path in (ROOT / "testbench" / "go").iterdir() if path.is_dir()}
    assert len(go_listed) == len(set(go_listed)) and set(go_listed) <= go_modules, go_listed
    limits = tomllib.loads((ROOT / ".ci" / "parts.toml").read_text())["limits"]
    for kind in ("warm", "cold"):
        assert sum(part[kind] for part in parts) <= limits[kind], f"the {kind} budgets exceed the limit"


def test_the_figures_page_shows_the_ci_budget_as_the_parts_file_sets_it() -> None:
    """docs/figures.md's "CI budget" table is .ci/parts.toml's parts, in order, with their warm and cold
    minutes, and its text states the file's limits."""
    import tomllib

    budget = tomllib.loads((ROOT / ".ci" / "parts.toml").read_text())
    page = (ROOT / "docs" / "figures.md").read_text()
    assert "\n## CI budget\n" in page, "docs/figures.md has no `## CI budget` section"
    section = page.split("\n## CI budget\n", 1)[1].split("\n## ", 1)[0]
    rows = [
        [cell.strip() for cell in line.strip().strip("|").split(" | ")]
        for line in section.splitlines()
        if line.startswith("|")
    ][2:]
    assert rows == [[p["name"], p["what"], str(p["warm"]), str(p["cold"])] for p in budget["part"]]
    limits = budget["limits"]
    assert f"within {limits['warm']} min warm and {limits['cold']} min cold" in " ".join(section.split())
