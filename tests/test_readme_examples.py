"""The fenced shell commands of the README and of every page of docs/, run as written: each one is run here,
or listed below with the reason it is not and the test that covers what it does. A command added to a page
and not classified here fails the first test, naming the page. Also the pages' links: every page of docs/ is
linked from the README, and every relative link of these pages reaches a file (and a heading it names)."""

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
DOCS = ROOT / "docs"
VENV_BIN = Path(sys.executable).parent
UPSTREAM_TREE = "~/recipes"  # where the pages' examples clone the upstream recipes repository

# Commands no test here runs, with why and the test that does the same thing for real (None: nothing can).
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
    "docker compose -f compose/tiny-random-llama/cpu-default/single_node_tp/compose.yaml up -d --wait": (
        "starts vLLM on the engine: the same committed file is started with `docker compose up -d` and its"
        " container compared with the one validation starts",
        "tests/test_run_spec.py::test_validation_starts_the_container_the_compose_file_ships",
    ),
    "curl -s http://127.0.0.1:8000/v1/models": (
        "needs the server the command before starts: validation asks /v1/models of the same image",
        "tests/test_validate.py::test_the_cpu_image_serves_a_real_chat_completion",
    ),
    "kubectl apply -k k8s/tiny-random-llama/cpu-default/single_node_tp/": (
        "no cluster here: every project kustomization is applied server-side to a real API server",
        "tests/test_control_plane.py::test_every_project_kustomization_reconciles_and_a_second_apply_changes_nothing",
    ),
    "kubectl apply -k k8s/kimi-linear-48b-a3b-instruct/h200-default/multi_node_tp/2-nodes/": (
        "no cluster here: every project kustomization is applied server-side to a real API server",
        "tests/test_control_plane.py::test_every_project_kustomization_reconciles_and_a_second_apply_changes_nothing",
    ),
    "kubectl apply --server-side -f "
    "https://github.com/kubernetes-sigs/lws/releases/download/v0.10.0/manifests.yaml": (
        "no cluster and no GitHub here: the control plane runs LWS v0.9.0 built from its pinned Go module,"
        " and v0.10.0's CRD checks every LeaderWorkerSet offline",
        "tests/test_control_plane.py::test_every_project_kustomization_reconciles_and_a_second_apply_changes_nothing",
    ),
    "kubectl create secret generic hf-token --from-literal=HF_TOKEN=...": (
        "no cluster and no token here: the manifests name the Secret by reference only, as optional",
        "tests/test_kubernetes.py::test_no_manifest_sets_an_lws_variable_and_every_secret_is_a_reference",
    ),
    ".venv/bin/factory build --hardware cpu": (
        "a build on the engine: the README's main job (`nox -s build-cpu`) runs it",
        "tests/test_readme_examples.py::test_the_main_job_builds_and_serves_the_default_on_the_cpu",
    ),
    ".venv/bin/factory validate --hardware cpu": (
        "serves vLLM on the engine: the README's main job runs it (with --allow-no-gpu, which a CPU image"
        " does not need)",
        "tests/test_readme_examples.py::test_the_main_job_builds_and_serves_the_default_on_the_cpu",
    ),
    ".venv/bin/factory check-args": (
        "needs a built image of each vLLM release: run over the project in the images the tests built",
        "tests/test_cuda_image.py::test_check_args_parses_every_target_of_the_release_in_one_built_image",
    ),
    ".venv/bin/factory sbom factory/tiny-random-llama --hardware cpu": (
        "reads a built image: the same command runs on the image the tests built, into a folder of its own",
        "tests/test_publish.py::test_sbom_lists_what_is_really_in_the_image",
    ),
}
# Commands that only read the project (no engine, no network, nothing written), run here as written.
RUN_HERE = {
    ".venv/bin/nox --list",
    ".venv/bin/factory list",
    ".venv/bin/factory show factory/tiny-random-llama --hardware cpu",
    ".venv/bin/factory show factory/tiny-random-llama --hardware cpu"
    " --strategy kv_store_centralized_mooncake",
    ".venv/bin/factory show factory/tiny-random-llama --hardware cpu --strategy kv_store_distributed_mooncake"
    " --instances 2",
    ".venv/bin/factory show moonshotai/Kimi-Linear-48B-A3B-Instruct --hardware h200 --strategy multi_node_tp",
    ".venv/bin/factory show moonshotai/Kimi-Linear-48B-A3B-Instruct --hardware h200 --strategy multi_node_tp"
    " --format k8s",
    "kubectl kustomize k8s/tiny-random-llama/cpu-default/single_node_tp/",
}
BUILD_CPU = "testbench/up && .venv/bin/nox -s build-cpu"
# Pages whose commands a test of their own runs (registry, cosign, policy webhook, control plane, QEMU):
# the page and that test. signing.md's and fleet.md's tests also check that each of their commands is one a
# test runs; grace.md's and admission.md's run the same steps with the tests' own names and folders.
PAGES_RUN_BY_THEIR_TESTS = {
    "docs/signing.md": "tests/test_trust_workflow.py::test_every_command_of_the_docs_page_is_run_by_a_test",
    "docs/fleet.md": "tests/test_fleet_manifests.py::test_every_command_of_the_docs_page_is_run_by_a_test",
    "docs/grace.md": "tests/test_grace.py, tests/test_grace_plan.py, tests/test_grace_platforms.py",
    "docs/admission.md": "tests/test_admission.py (trusting and retiring a key: tests/trust.py)",
}

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _prose(text: str) -> str:
    """A page without its fenced blocks (a `#` there is a shell comment, a `[x](y)` no link)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def pages() -> list[Path]:
    """The README, then the pages of docs/ in the order the README links them, then any it does not."""
    linked = [ROOT / target for target in LINK.findall(_prose(README.read_text()))]
    docs = [path for path in linked if path.parent == DOCS and path.suffix == ".md" and path.is_file()]
    rest = sorted(set(DOCS.glob("*.md")) - set(docs))
    return [README, *dict.fromkeys(docs), *rest]


def page_commands() -> list[tuple[str, str]]:
    """Each command of every page's ```bash blocks, with its page: continuation lines joined, comments
    dropped."""
    commands: list[tuple[str, str]] = []
    for page in pages():
        name = page.relative_to(ROOT).as_posix()
        for block in re.findall(r"^```bash\n(.*?)^```", page.read_text(), flags=re.S | re.M):
            for command in block.replace("\\\n", " ").splitlines():
                command = re.sub(r"\s+#.*$", "", command).strip()
                if command and not command.startswith("#"):
                    commands.append((name, " ".join(command.split())))
    return commands


def upstream_commands() -> list[str]:
    return [c for _, c in page_commands() if UPSTREAM_TREE in c and c not in NOT_RUN]


def test_every_readme_command_is_run_here_or_says_why_not() -> None:
    commands = page_commands()
    pages_read = {page for page, _ in commands}
    assert {"README.md", "docs/recipes-and-lock.md"} <= pages_read, pages_read
    known = set(NOT_RUN) | RUN_HERE | {BUILD_CPU}
    unclassified = [
        f"{page}: {c}"
        for page, c in commands
        if c not in known and UPSTREAM_TREE not in c and page not in PAGES_RUN_BY_THEIR_TESTS
    ]
    for tests in PAGES_RUN_BY_THEIR_TESTS.values():  # each named test module exists
        assert all((ROOT / name.split("::")[0].split(" ")[0]).is_file() for name in tests.split(", ")), tests
    assert not unclassified, "commands no test runs or excuses:\n" + "\n".join(unclassified)
    shown = {c for _, c in commands}
    stale = sorted((set(NOT_RUN) | RUN_HERE | {BUILD_CPU}) - shown)
    assert not stale, f"classified here, shown on no page: {stale}"
    assert len(upstream_commands()) >= 4
    for _why, covering in NOT_RUN.values():
        if covering:
            path, name = covering.split("::")
            assert f"def {name}(" in (ROOT / path).read_text(), f"{covering} does not exist"


def _run(command: str, home: Path | None = None) -> subprocess.CompletedProcess[str]:
    """A page's command in bash from the project folder, `.venv/bin/` being this test's venv (first on the
    PATH, for kubectl) and `~` a scratch home; the project's code first on the path, as from a clone."""
    command = command.replace(".venv/bin/", f"{VENV_BIN}/")
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    } | ({"HOME": str(home)} if home else {})
    return subprocess.run(
        ["bash", "-c", command], cwd=ROOT, capture_output=True, text=True, env=env, timeout=1800
    )


@pytest.mark.parametrize("command", sorted(RUN_HERE))
def test_every_readme_command_that_reads_the_project_runs_as_written(command: str) -> None:
    where = [page for page, c in page_commands() if c == command]
    result = _run(command)
    assert result.returncode == 0, f"{where}: {command}\n{result.stderr[-3000:]}"
    assert "Traceback" not in result.stderr, f"{where}: {command}\n{result.stderr[-3000:]}"
    assert result.stdout.strip(), f"{where}: {command} printed nothing"


def test_the_upstream_recipes_example_runs_as_written(tmp_path: Path, upstream_lock: Path) -> None:
    """Lock, generate, renderings and show on a checkout of the upstream recipes, exactly as the pages say
    them: a Dockerfile per buildable image, a version in every rendering, a show with its install, an
    offload option composed."""
    upstream = os.environ.get("FACTORY_UPSTREAM_RECIPES")
    if not upstream or not Path(upstream).is_dir():
        if os.environ.get("FACTORY_REQUIRE_UPSTREAM"):
            pytest.fail("FACTORY_UPSTREAM_RECIPES is not set to the upstream recipes tree")
        pytest.skip("FACTORY_UPSTREAM_RECIPES is not set: the upstream recipes are not here")
    (tmp_path / "recipes").symlink_to(Path(upstream).resolve())  # what `git clone ... ~/recipes` makes
    # The run's corpus lock, made once for this test and tests/test_corpus.py: the pages' `factory lock`
    # then finds every set locked and asks no index (the first lock itself is timed in docs/figures.md).
    shutil.copytree(upstream_lock, tmp_path / "recipes-images" / "lock")
    outputs: dict[str, subprocess.CompletedProcess[str]] = {}
    by_command: dict[str, subprocess.CompletedProcess[str]] = {}
    for command in upstream_commands():
        result = _run(command, tmp_path)
        where = [page for page, c in page_commands() if c == command]
        assert result.returncode == 0, f"{where}: {command}\n{result.stderr[-3000:]}"
        assert "Traceback" not in result.stderr, f"{where}: {command}\n{result.stderr[-3000:]}"
        outputs.setdefault(command.split()[1], result)
        by_command[command] = result
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
    offloads = [result for command, result in by_command.items() if "--kv-offload" in command]
    assert offloads, "the KV-offload example"
    for result in offloads:
        assert "--kv-transfer-config" in result.stdout and "generate` writes no file" in result.stdout


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


# ---- links ----


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    for heading in re.findall(r"^#{1,6} (.+)$", _prose(page.read_text()), flags=re.M):
        slug = _slug(heading)
        n = 0
        while (candidate := slug if n == 0 else f"{slug}-{n}") in found:
            n += 1
        found.add(candidate)
    return found


def link_problems(page: Path) -> list[str]:
    """Each relative link of a page that reaches no file, or names a heading its file does not have."""
    problems = []
    name = page.relative_to(ROOT).as_posix()
    for target in LINK.findall(_prose(page.read_text())):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            problems.append(f"{name}: {target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            problems.append(f"{name}: {target}: no heading #{anchor} in {file.relative_to(ROOT).as_posix()}")
    return problems


def test_every_docs_page_is_linked_from_the_readme_and_all_links_reach_their_files() -> None:
    targets = LINK.findall(_prose(README.read_text()))
    linked = {(README.parent / target.partition("#")[0]).resolve() for target in targets}
    unlinked = [
        p.relative_to(ROOT).as_posix() for p in sorted(DOCS.glob("*.md")) if p.resolve() not in linked
    ]
    assert not unlinked, f"docs pages the README does not link: {unlinked}"
    problems = [problem for page in pages() for problem in link_problems(page)]
    assert not problems, "\n".join(problems)


def test_broken_links_and_anchors_are_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check itself: a link to a missing page, and one to a heading its page lacks, are both named."""
    page = DOCS / "figures.md"
    broken = tmp_path / "docs" / "broken.md"
    broken.parent.mkdir()
    shutil.copy(page, broken.parent / "figures.md")
    links = "[gone](gone.md), [no heading](figures.md#no-such-heading), [ok](figures.md#ci-budget)"
    broken.write_text(f"# Broken\n\n{links}\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert link_problems(broken) == [
        "docs/broken.md: gone.md: no such file",
        "docs/broken.md: figures.md#no-such-heading: no heading #no-such-heading in docs/figures.md",
    ]
