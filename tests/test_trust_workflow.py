"""Keys, and the publishing workflow (issue 45): `factory keygen`; both workflows linted by actionlint (built
from its Go module, with Debian's shellcheck for their scripts); and the CPU path of publish.yml's steps run
as written against the loopback registry (the GitHub runners and the registry login are not run here)."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import MAIN_JOB, ROOT, go_tool, missing_tool, run_factory
from tests.trust_helpers import PASSWORD, REPOSITORY, Namespace, project_copy

WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
PUBLISH = ROOT / ".github" / "workflows" / "publish.yml"


def test_keygen_makes_an_encrypted_pair_outside_the_project_and_never_overwrites(tmp_path: Path) -> None:
    cosign = go_tool("cosign", "cosign")
    env = {"FACTORY_COSIGN": str(cosign), "COSIGN_PASSWORD": PASSWORD}
    made = run_factory(ROOT, "keygen", str(tmp_path / "keys"), env=env)
    assert made.returncode == 0, made.stderr
    key, public = tmp_path / "keys" / "cosign.key", tmp_path / "keys" / "cosign.pub"
    assert key.read_text().startswith("-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----")
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert public.read_text().startswith("-----BEGIN PUBLIC KEY-----")
    assert PASSWORD not in made.stdout + made.stderr and key.read_text() not in made.stdout
    again = run_factory(ROOT, "keygen", str(tmp_path / "keys"), env=env)
    assert again.returncode == 2 and "never overwrites" in again.stderr
    inside = run_factory(ROOT, "keygen", str(ROOT / "keys"), env=env)
    assert inside.returncode == 2 and "inside the project folder" in inside.stderr
    assert not (ROOT / "keys").exists()
    without = run_factory(
        ROOT, "keygen", str(tmp_path / "other"), env={"FACTORY_COSIGN": str(cosign)} | {"COSIGN_PASSWORD": ""}
    )
    assert without.returncode == 0, "an empty passphrase is a passphrase (cosign's own rule)"
    unset = {k: v for k, v in os.environ.items() if k != "COSIGN_PASSWORD"} | {"FACTORY_COSIGN": str(cosign)}
    refused = subprocess.run(
        [sys.executable, "-m", "factory", "--root", str(ROOT), "keygen", str(tmp_path / "x")],
        capture_output=True,
        text=True,
        env=unset,
        check=False,
    )
    assert refused.returncode == 2 and "COSIGN_PASSWORD is not set" in refused.stderr


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda path: path.name)
def test_actionlint_finds_nothing_in_the_workflow(workflow: Path) -> None:
    """actionlint v1.7.12 with shellcheck: the rules GitHub applies when it loads a workflow (a job-level
    `if:` reading `matrix` fails it), and the scripts of its `run:` steps."""
    if shutil.which("shellcheck") is None:
        missing_tool("shellcheck", "apt-get install shellcheck; testbench/up --tests installs it")
    actionlint = go_tool("actionlint", "actionlint")
    done = subprocess.run(
        [str(actionlint), "-shellcheck", "shellcheck", str(workflow)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _expression_values(key: str) -> dict[str, str | None]:
    """What each `${{ ... }}` of the publish steps is on a tag push here (None: not set, as the registry
    login is not run: the loopback registry takes anyone)."""
    return {
        "github.actor": None,
        "secrets.GITHUB_TOKEN": None,
        "secrets.COSIGN_PRIVATE_KEY": key,
        "secrets.COSIGN_PASSWORD": PASSWORD,
        "github.ref_name": "v9.9.9",
        "github.ref_type": "tag",
        "github.event.repository.default_branch": "main",
    }


def _step_env(step: dict[str, Any], values: dict[str, str | None]) -> dict[str, str]:
    env: dict[str, str] = {}
    for name, text in (step.get("env") or {}).items():
        expression = re.fullmatch(r"\$\{\{\s*(.+?)\s*\}\}", str(text))
        assert expression and expression[1] in values, f"no value for {text} here: the test needs one"
        value = values[expression[1]]
        if value is not None:
            env[name] = value
    return env


def test_the_cpu_path_of_the_publish_workflow_runs_as_written(
    tiny_validation: Any, tiny_built: Any, tmp_path: Path
) -> None:
    workflow = yaml.safe_load(PUBLISH.read_text())
    job = workflow["jobs"]["publish"]
    steps = {step.get("name"): step for step in job["steps"]}
    build = steps["Build and validate (live probes included)"]["run"].replace("${HARDWARE}", "cpu")
    assert MAIN_JOB.split("&& ")[-1].replace('"', "") in build.replace('"', ""), "the main job's build"
    cosign = go_tool("cosign", "cosign")
    key = tmp_path / "keys"
    assert (
        run_factory(
            ROOT, "keygen", str(key), env={"FACTORY_COSIGN": str(cosign), "COSIGN_PASSWORD": PASSWORD}
        ).returncode
        == 0
    )
    root = project_copy(ROOT, tmp_path / "checkout")
    shutil.copytree(tiny_validation[1], root / "reports")  # what the build and validate step left
    # ... and the build record `factory build` wrote (the main job's build of the image validated).
    record = tiny_built.image_id.replace(":", "-") + ".json"
    (root / "reports" / "built").mkdir()
    shutil.copy(ROOT / "reports" / "built" / record, root / "reports" / "built" / record)
    namespace = Namespace.fresh()
    namespace.repositories.add(REPOSITORY)
    venv = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "FACTORY_COSIGN": str(cosign),
        "GITHUB_SHA": "0123456789abcdef0123456789abcdef01234567",
        "HARDWARE": "cpu",
        "REGISTRY": namespace.name,
        "SIGNING": "key",
    }
    values = _expression_values((key / "cosign.key").read_text())
    try:
        for name in (
            "Publish, sign and attest by digest",
            "Verify what was published (signature, SBOM against the lock, provenance against this tree)",
        ):
            script = steps[name]["run"].replace(".venv/bin/", f"{venv}/")
            done = subprocess.run(
                ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
                cwd=root,
                env={**env, **_step_env(steps[name], values)},
                capture_output=True,
                text=True,
                timeout=1800,
                check=False,
            )
            assert done.returncode == 0, f"{name}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        tags = namespace.tags(REPOSITORY)
        assert {"vllm0.32.0-cpu-default-sha-0123456", "vllm0.32.0-cpu-default-9.9.9"} <= set(tags), tags
        assert any(tag.endswith(".sig") for tag in tags) and any(tag.endswith(".att") for tag in tags)
        verdict = yaml.safe_load((root / "reports" / "verify.json").read_text())
        assert verdict["verified"] is True, verdict
    finally:
        namespace.remove()


# Each command of docs/signing.md's bash blocks: the test module that runs it, and the words it runs it
# with there (with the test's own folders, registry and project name in place of the page's).
DOCS = ROOT / "docs" / "signing.md"
DOCS_COMMANDS = {
    "export COSIGN_PASSWORD=": ("trust_helpers.py", ('"COSIGN_PASSWORD": PASSWORD',)),
    ".venv/bin/factory keygen ": ("test_trust_workflow.py", ('"keygen"',)),
    ".venv/bin/factory build --hardware cpu": ("trust_helpers.py", ('"build"', '"--hardware"')),
    ".venv/bin/factory validate --hardware cpu": (
        "conftest.py",
        ('MAIN_JOB = ".venv/bin/nox -s build-cpu"',),
    ),
    ".venv/bin/factory publish --hardware cpu --registry ": ("trust_helpers.py", ('"publish"', '"--key"')),
    ".venv/bin/factory generate": ("trust_helpers.py", ('"generate"',)),
    ".venv/bin/factory verify --hardware cpu": ("test_signing.py", ('["--hardware", "cpu"]',)),
    ".venv/bin/factory verify registry.example.com/": (
        "test_signing.py",
        ('"verify"', '"--key"', '"--json"'),
    ),
    ".venv/bin/factory build-verifier": ("test_signing_compose_gate.py", ('"build-verifier"',)),
    "cd compose/tiny-random-llama/cpu-default/single_node_tp && docker compose up -d --wait": (
        "test_signing_compose_gate.py",
        ('"up", "-d", "--wait"', 'SINGLE = Path("compose/tiny-random-llama/cpu-default/single_node_tp")'),
    ),
    "docker compose logs verify": ("test_signing_compose_gate.py", ("com.docker.compose.service=verify",)),
}


def test_every_command_of_the_docs_page_is_run_by_a_test() -> None:
    """docs/signing.md shows what a user types; each of its commands is one a test here runs."""
    blocks = re.findall(r"^```bash\n(.*?)^```", DOCS.read_text(), flags=re.S | re.M)
    commands = [line.strip() for block in blocks for line in block.splitlines() if line.strip()]
    assert len(commands) == len(DOCS_COMMANDS), commands
    for command in commands:
        found = [key for key in DOCS_COMMANDS if command.startswith(key)]
        assert found, f"no test runs {command!r}"
        module, words = DOCS_COMMANDS[found[0]]
        text = (ROOT / "tests" / module).read_text()
        assert all(word in text for word in words), (command, module, words)


def test_a_record_whose_key_or_names_would_write_yaml_is_refused(tmp_path: Path) -> None:
    """The record's public key and names are printed into compose files: anything but a PEM key and plain
    names is refused by field, before a file is written."""
    root = project_copy(ROOT, tmp_path / "project")
    key = "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----\n"
    note = {"predicate_type": "https://cyclonedx.org/bom", "sha256": "a" * 64, "size": 1}
    signed = {
        "recipe": "factory/tiny-random-llama",
        "hardware": "cpu",
        "variant": "default",
        "public_key": key,
        "signature": f"sha256-{'b' * 64}.sig",
        "sbom": note,
        "provenance": note,
    }
    entry = {
        "repository": "127.0.0.1:5000/x/vllm-factory/tiny-random-llama",
        "digest": "sha256:" + "b" * 64,
        "immutable_tag": "vllm0.32.0-cpu-default-0123456789ab",
        "signed": signed,
    }
    for field, value in (("public_key", key + "services: {evil: {}}\n"), ("recipe", "factory/tiny\nevil: 1")):
        bad = {**entry, "signed": {**signed, field: value}}
        record = root / "recipes" / "lock" / "published.json"
        record.write_text(
            json.dumps({"images": {"vllm-factory/tiny-random-llama:vllm0.32.0-cpu-default": bad}})
        )
        done = run_factory(root, "generate")
        assert (
            done.returncode != 0 and f"signed.{field}" in done.stderr and "published.json" in done.stderr
        ), done.stderr
        assert not list((root / "compose").rglob("*.override.yaml"))
