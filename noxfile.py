"""Sessions: `nox --list`. Every session runs in the project's own virtualenv (.venv, made by
testbench/up), which already holds the package and its tools: no per-session installs, so sessions
start in a second and work with no index reachable."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import nox

from factory.blueprint import plan_recipe
from factory.project import load_project

nox.options.default_venv_backend = "none"
# check-args is not in the default set: tests/test_cuda_image.py runs the same `factory check-args` over the
# project, with stricter assertions, in the images the tests built.
nox.options.sessions = ["lint", "check-generated", "tests"]

ROOT = Path(__file__).parent
PY = sys.executable
PROBES = {"cpu": "end to end: real vLLM serving, /health and a chat completion"}


def factory(session: nox.Session, *args: str) -> None:
    session.run(PY, "-m", "factory", *args)


@contextlib.contextmanager
def ci_part(name: str) -> Iterator[None]:
    """Time a session as one part of a CI run (.ci/parts.toml; recorded where $FACTORY_CI_TIMES is set)."""
    start = time.monotonic()
    try:
        yield
    finally:
        seconds = f"{time.monotonic() - start:.1f}"
        subprocess.run([PY, str(ROOT / ".ci" / "times.py"), "record", name, seconds], check=False)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff and strict mypy on the package; hadolint runs inside the tests."""
    paths = ["factory", "tests", "benchmarks", "noxfile.py", "testbench", ".ci"]
    with ci_part("lint"):
        session.run(PY, "-m", "ruff", "check", *paths)
        session.run(PY, "-m", "ruff", "format", "--check", *paths)
        session.run(PY, "-m", "mypy")


@nox.session
def generate(session: nox.Session) -> None:
    """Rewrite images/ and compose/ from recipes/ and catalog/ (removes what no longer exists)."""
    factory(session, "generate")


@nox.session(name="check-generated")
def check_generated(session: nox.Session) -> None:
    """Fail when the committed images/ and compose/ are stale, or a recipe has a key the site would ignore."""
    with ci_part("generated"):
        factory(session, "generate", "--check", "--strict")


@nox.session
def tests(session: nox.Session) -> None:
    """The whole test suite, Docker and the CPU end-to-end included (testbench/up first)."""
    session.run(PY, "-m", "pytest", *(session.posargs or ["-ra", "--durations=25"]))


@nox.session(default=False)
def publish(session: nox.Session) -> None:
    """Push validated images: nox -s publish -- MODEL --hardware H --registry HOST[/NAMESPACE]."""
    if not session.posargs:
        session.error(
            "usage: nox -s publish -- MODEL --hardware H --registry HOST[:PORT][/NAMESPACE] [--tag T]"
        )
    factory(session, "publish", *session.posargs)


@nox.session(name="check-args", default=False)
def check_args(session: nox.Session) -> None:
    """Parse every image's serve commands with its vLLM release, in an image built here."""
    factory(session, "check-args")


@nox.session(default=False)
def matrix(session: nox.Session) -> None:
    """reports/matrix.html and .md: how far each model and variant got on each hardware (after builds)."""
    factory(session, "matrix", *session.posargs)


# The rate below which conformance fails: the floor tests/test_corpus.py holds the corpus to.
FLOOR = json.loads((ROOT / "tests" / "data" / "conformance-floor.json").read_text())["rate"]


@nox.session(default=False)
def conformance(session: nox.Session) -> None:
    """Compare every upstream rendering with the site's JSON API, exactly (the committed floor)."""
    tree, oracle = os.environ.get("FACTORY_UPSTREAM_RECIPES"), os.environ.get("FACTORY_RECIPES_ORACLE")
    if not tree or not oracle:
        session.error(
            "set FACTORY_UPSTREAM_RECIPES (a recipes tree) and FACTORY_RECIPES_ORACLE (its build-api)"
        )
    with tempfile.TemporaryDirectory(prefix="factory-oracle-") as out:
        session.run(oracle, tree, out, external=True, silent=True)
        factory(
            session,
            "conformance",
            "--recipes",
            tree,
            "--oracle",
            out,
            "--floor",
            str(FLOOR),
            *session.posargs,
        )


@nox.session(default=False)
def bench(session: nox.Session) -> None:
    """Benchmarks: corpus lock and generate, builds against pip, rebuilds, sizes, the CPU image's start."""
    session.run(PY, str(ROOT / "benchmarks" / "bench.py"), *session.posargs)


@nox.session(name="build-router", default=False)
def build_router(session: nox.Session) -> None:
    """Build the PD router's image (vllm-router, hash-locked); tests/test_router_image.py validates it."""
    factory(session, "build", "vllm-router", *session.posargs)
    factory(session, "validate", "vllm-router")


def _build_targets() -> tuple[dict[str, str], dict[str, str]]:
    """Per hardware, the recipe its `build-<hw>` session builds (the catalog's build_recipes), or why it
    gets no session: that recipe renders nothing there, or renders an image that cannot be built."""
    project = load_project(ROOT)
    buildable: dict[str, str] = {}
    without: dict[str, str] = {}
    plans = {}
    for hardware in project.catalog.hardware:
        model = project.catalog.build_recipe(hardware)
        if model not in plans:
            plans[model] = plan_recipe(project, project.tree.recipe(model))
        images = [b.image for b in plans[model].images if b.image.hardware == hardware]
        skipped = [s.reason for s in plans[model].skipped if s.hardware == hardware]
        if not images:
            without[hardware] = f"{model} renders nothing on it" + (f" ({skipped[0]})" if skipped else "")
        elif all(image.unbuildable for image in images):
            without[hardware] = f"{model} is not buildable on it ({images[0].unbuildable})"
        else:
            buildable[hardware] = model
    return buildable, without


def _make_build_session(hardware: str, recipe: str) -> None:
    @nox.session(name=f"build-{hardware}", default=False)
    def build(session: nox.Session) -> None:
        factory(session, "build", "--hardware", hardware, *session.posargs)
        factory(session, "validate", "--hardware", hardware, "--allow-no-gpu")

    probes = PROBES.get(hardware, "static checks; GPU probes need the GPU")
    build.__doc__ = f"Build the {recipe} image for {hardware}, then validate it ({probes})."

    @nox.session(name=f"validate-{hardware}", default=False)
    def validate(session: nox.Session) -> None:
        factory(session, "validate", "--hardware", hardware, *session.posargs)

    fails = "" if hardware in PROBES else "; fails where its GPU is absent"
    validate.__doc__ = f"Validate the built {recipe} image for {hardware}{fails}."


BUILDABLE, WITHOUT_SESSION = _build_targets()
for _hardware, _recipe in BUILDABLE.items():
    _make_build_session(_hardware, _recipe)
# `nox --list` prints this docstring: it names the catalog hardware that gets no build-<hw> session, and why.
__doc__ = (
    (__doc__ or "")
    + "\n\nNo build-<hw>/validate-<hw> session for:\n"
    + "\n".join(f"  {hardware}: {why}" for hardware, why in WITHOUT_SESSION.items())
)
