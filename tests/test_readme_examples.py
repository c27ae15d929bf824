"""The README's fenced shell commands, run as written: each one is run here, or listed below with the
reason it is not and the test that covers what it does. A command added to the README and not classified
here fails the first test."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import MAIN_JOB, ROOT

README = ROOT / "README.md"
VENV_BIN = Path(sys.executable).parent
UPSTREAM_TREE = "~/recipes"  # where the README's example clones the upstream recipes repository

# Commands this file does not run, with why and the test that does the same thing for real.
NOT_RUN = {
    "testbench/up --tests && .venv/bin/nox": (
        "the whole suite, which this test is part of (`.ci/run` runs it)",
        None,
    ),
    "git clone <the upstream recipes repository> ~/recipes": (
        "no network to GitHub here: FACTORY_UPSTREAM_RECIPES stands in for the clone",
        None,
    ),
    "FACTORY_REGISTRY_USER=me FACTORY_REGISTRY_PASSWORD=... .venv/bin/nox -s publish -- "
    "factory/tiny-random-llama --hardware cpu --registry registry.example.com/team": (
        "registry.example.com is not reachable here: the same publish runs against a local registry",
        "tests/test_publish.py::test_publish_pushes_both_tags_and_the_registry_serves_that_digest",
    ),
}
BUILD_CPU = "testbench/up && .venv/bin/nox -s build-cpu"


def readme_commands() -> list[str]:
    """Each command of the README's ```bash blocks: continuation lines joined, comments dropped."""
    commands: list[str] = []
    for block in re.findall(r"^```bash\n(.*?)^```", README.read_text(), flags=re.S | re.M):
        for command in block.replace("\\\n", " ").splitlines():
            command = re.sub(r"\s+#.*$", "", command).strip()
            if command and not command.startswith("#"):
                commands.append(" ".join(command.split()))
    return commands


def upstream_commands() -> list[str]:
    return [c for c in readme_commands() if UPSTREAM_TREE in c and c not in NOT_RUN]


def test_every_readme_command_is_run_here_or_says_why_not() -> None:
    commands = readme_commands()
    unclassified = [c for c in commands if c not in NOT_RUN and c != BUILD_CPU and UPSTREAM_TREE not in c]
    assert not unclassified, f"README commands no test runs or excuses: {unclassified}"
    assert len(upstream_commands()) >= 3
    for _why, covering in NOT_RUN.values():
        if covering:
            path, name = covering.split("::")
            assert f"def {name}(" in (ROOT / path).read_text(), f"{covering} does not exist"


def _run(command: str, home: Path | None = None) -> subprocess.CompletedProcess[str]:
    """A README command in bash from the project folder, `.venv/bin/` being this test's venv and `~` a
    scratch home; the project's code first on the path, as from a clone."""
    command = command.replace(".venv/bin/", f"{VENV_BIN}/")
    env = {**os.environ, "PYTHONPATH": str(ROOT)} | ({"HOME": str(home)} if home else {})
    return subprocess.run(
        ["bash", "-c", command], cwd=ROOT, capture_output=True, text=True, env=env, timeout=1800
    )


def test_the_upstream_recipes_example_runs_as_written(tmp_path: Path, upstream_lock: Path) -> None:
    """Lock, generate, renderings and show on a checkout of the upstream recipes, exactly as the README
    says them: a Dockerfile per buildable image, a version in every rendering, a show with its install."""
    upstream = os.environ.get("FACTORY_UPSTREAM_RECIPES")
    if not upstream or not Path(upstream).is_dir():
        if os.environ.get("FACTORY_REQUIRE_UPSTREAM"):
            pytest.fail("FACTORY_UPSTREAM_RECIPES is not set to the upstream recipes tree")
        pytest.skip("FACTORY_UPSTREAM_RECIPES is not set: the upstream recipes are not here")
    (tmp_path / "recipes").symlink_to(Path(upstream).resolve())  # what `git clone ... ~/recipes` makes
    # The run's corpus lock, made once for this test and tests/test_corpus.py: the README's `factory lock`
    # then finds every set locked and asks no index (the first lock itself is timed in Benchmarks).
    shutil.copytree(upstream_lock, tmp_path / "recipes-images" / "lock")
    outputs: dict[str, subprocess.CompletedProcess[str]] = {}
    for command in upstream_commands():
        result = _run(command, tmp_path)
        assert result.returncode == 0, f"{command}\n{result.stderr[-3000:]}"
        assert "Traceback" not in result.stderr, f"{command}\n{result.stderr[-3000:]}"
        outputs[command.split()[1]] = result
    assert {"lock", "generate", "renderings", "show"} <= set(outputs), list(outputs)
    out = tmp_path / "recipes-images"
    dockerfiles = list(out.glob("images/*/*/Dockerfile"))
    assert len(dockerfiles) > 1000, "generate wrote the images of a locked corpus"
    first = json.loads(outputs["renderings"].stdout.splitlines()[0])
    assert first["vllm_version"] is not None and first["image"], first
    shown = outputs["show"].stdout
    assert "no lock yet" not in shown + outputs["show"].stderr
    assert "## Install (what the image runs)" in shown and "vllm serve moonshotai/Kimi-K2.6" in shown
    assert "requirements/requirements.txt" in shown, "the install names the locked set's files"


@pytest.mark.docker
def test_the_main_job_builds_and_serves_the_default_on_the_cpu(
    main_job: subprocess.CompletedProcess[str],
) -> None:
    """`nox -s build-cpu` as the README's first command runs it (testbench/up has run: the suite needs it):
    the tiny model built, then validated end to end. The run is the session's (conftest.main_job), whose
    validation the other tests of a validated image read."""
    assert BUILD_CPU.removeprefix("testbench/up && ") == MAIN_JOB, "the README's main job is the one run"
    result = main_job
    assert re.search(r"^validated vllm-factory/tiny-random-llama:\S+ \(sha256:", result.stdout, re.M), (
        result.stdout[-3000:]
    )
