"""The nox sessions a user is offered: each `build-<hw>` session builds something that can be built, the
hardware without one is named with the reason, and `nox -s conformance` fails below the committed floor."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from factory.base.errors import InputError
from factory.project import Project
from tests.conftest import ROOT, blueprint_of, run_factory

NOX = [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py")]


def nox(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*NOX, *args], capture_output=True, text=True, timeout=600, env={**os.environ, **(env or {})}
    )


def _buildable(project: Project, hardware: str) -> bool:
    try:
        image = blueprint_of(project, project.catalog.build_recipe(hardware), hardware).image
    except InputError:
        return False
    return image.unbuildable is None


def test_build_sessions_exist_exactly_where_the_catalog_recipe_can_be_built(project: Project) -> None:
    listing = nox("--list")
    assert listing.returncode == 0, listing.stderr
    offered = set(re.findall(r"^[*-] build-(\S+) ->", listing.stdout, re.MULTILINE)) - {"router"}
    assert "build-router" in listing.stdout, "the PD router's image has its own build session"
    validated = set(re.findall(r"^[*-] validate-(\S+) ->", listing.stdout, re.MULTILINE))
    buildable = {hw for hw in project.catalog.hardware if _buildable(project, hw)}
    assert {"cpu", "h200"} <= buildable
    assert offered == validated == buildable
    # Every catalog hardware left without a session is named in the listing, with why.
    for hardware in set(project.catalog.hardware) - buildable:
        assert re.search(rf"^  {hardware}: .*(renders nothing|not buildable)", listing.stdout, re.MULTILINE)


def test_a_hardware_without_a_session_is_one_factory_build_refuses(project: Project) -> None:
    listing = nox("--list")
    assert "build-rtx_5090 " not in listing.stdout and "  rtx_5090: " in listing.stdout
    refused = run_factory(ROOT, "build", "--hardware", "rtx_5090")
    assert refused.returncode != 0 and "renders nothing" in refused.stderr


def _fake_oracle(tmp_path: Path, alter: bool) -> Path:
    """A stand-in for the site's `build-api TREE OUT`: it writes the factory's own rendering of the tiny
    model as the site's answer, with one flag's value changed when `alter` (a rendering that differs)."""
    line = next(
        json.loads(text)
        for text in run_factory(ROOT, "renderings", "--json").stdout.splitlines()
        if json.loads(text).get("hardware") == "cpu" and json.loads(text).get("argv")
    )
    argv = list(line["argv"])
    for edit in (e for d in line["deviations"] for e in d.get("edits", []) if e["process"] == "argv"):
        after = edit["after"] or []  # undo the factory's recorded edit: the site's own command
        at = next(i for i in range(len(argv)) if argv[i : i + len(after)] == after)
        argv[at : at + len(after)] = edit["before"] or []
    line["argv"] = [*argv, "--max-num-seqs", "7"] if alter else argv
    script = tmp_path / "build-api"
    folder = "/".join(line["recipe"].split("/"))  # the site writes <org>/<name>/...json
    script.write_text(
        f"#!{sys.executable}\nimport json, pathlib, sys\n"
        f"out = pathlib.Path(sys.argv[2], {folder!r}); out.mkdir(parents=True, exist_ok=True)\n"
        f"(out / 'one.json').write_text(json.dumps({line!r}))\n"
    )
    script.chmod(0o755)
    return script


def test_conformance_session_fails_below_the_committed_floor(tmp_path: Path) -> None:
    def run(alter: bool) -> subprocess.CompletedProcess[str]:
        oracle = str(_fake_oracle(tmp_path, alter))
        tree = str(ROOT / "recipes")
        env = {"FACTORY_UPSTREAM_RECIPES": tree, "FACTORY_RECIPES_ORACLE": oracle}
        return nox("-s", "conformance", env=env)

    equal = run(alter=False)
    assert equal.returncode == 0, equal.stdout[-2000:] + equal.stderr[-2000:]
    differs = run(alter=True)
    assert differs.returncode != 0
    assert "below the floor" in differs.stdout + differs.stderr
