"""`factory build`: stage, build through BuildKit into a temporary tag, then tag for real.

A failed build never moves a tag: the real tags are set only after BuildKit succeeded, from the
image it produced, and the temporary tag is removed either way."""

from __future__ import annotations

import contextlib
import json
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TextIO

import docker
from docker.errors import ImageNotFound

from factory.base.errors import DockerError
from factory.base.files import write_text_atomic
from factory.base.reporter import Reporter, silent
from factory.base.settings import BuildSettings, Network
from factory.builder import network
from factory.builder.backends import buildx_version, run_build
from factory.builder.context import Buildable, BuildTarget, StagedContext, check_generated, stage
from factory.builder.display import BuildProgress
from factory.builder.progress import BuildLog
from factory.engine import emulation
from factory.engine.connect import connect, engine_facts


@dataclass(frozen=True)
class BuildResult:
    image: str
    tags: list[str]
    image_id: str
    size_bytes: int
    duration_s: float
    cached_steps: int
    total_steps: int
    base_image: str
    backend: str
    network: str  # the RUN steps' network: "default" (BuildKit's own) or "host"
    platform: str
    inputs_hash: str


def choose_backend(requested: str, image: BuildTarget, engine_platform: str, build_network: Network) -> str:
    """The BuildKit front end for this build: bake where buildx is, else Compose (its `platforms:` reach the
    engine's own BuildKit); refused where the one chosen cannot build it (the build network), or where the
    image is for another platform and the host cannot run that platform's programs (QEMU)."""
    asked = requested in ("auto", "bake") or build_network != network.DEFAULT
    buildx = buildx_version() if asked else None
    if requested == "bake" and buildx is None:
        raise DockerError("--backend bake needs the docker buildx plugin, which this machine lacks")
    backend = "bake" if buildx is not None and requested != "compose" else "compose"
    network.check_backend(build_network, backend, buildx)
    if image.platform != engine_platform:
        why = emulation.missing(image.platform)
        if why is not None:
            raise DockerError(
                f"{image.reference} is {image.platform}, this engine builds {engine_platform}: {why}"
            )
    return backend


def build_image(
    root: Path,
    blueprint: Buildable,
    settings: BuildSettings,
    backend: str = "auto",
    echo: bool = False,
    no_cache: bool = False,
    report: Reporter = silent,
    show_progress: TextIO | None = None,
) -> BuildResult:
    """Build the blueprint's image from its generated folder under `root`, then tag it."""
    image = blueprint.image
    check_generated(root, blueprint)
    client = connect()
    facts = engine_facts(client)
    gpu = "NVIDIA runtime" if facts.has_nvidia_runtime else "no GPU runtime"
    report(f"engine {facts.version} (API {facts.api_version}), {facts.platform}, {gpu}")
    chosen = choose_backend(backend, image, facts.platform, settings.network)
    temporary = f"factory-build-tmp/{image.slug}:{uuid.uuid4().hex[:12]}"
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="factory-build-") as workdir:
        staged = stage(root, image, settings, Path(workdir), facts.platform)
        check_base(client, staged, report)
        try:
            progress = (
                BuildProgress(image.reference, show_progress, show_progress.isatty())
                if show_progress
                else None
            )
            try:
                log = run_build(staged, temporary, chosen, echo, no_cache, progress)
            finally:
                if progress is not None:
                    progress.close()
            return tag_built(client, temporary, staged, log, chosen, started)
        finally:
            untag(client, temporary)


def tag_built(
    client: docker.DockerClient,
    temporary: str,
    staged: StagedContext,
    log: BuildLog,
    backend: str,
    started: float,
) -> BuildResult:
    """Give the image BuildKit wrote under `temporary` its real tags (only now: a failed build moves none),
    and say what was built."""
    image = staged.image
    built = client.images.get(temporary)
    tags = [image.reference, image.immutable_reference]
    for tag in tags:
        repository, _, name = tag.rpartition(":")
        built.tag(repository, name)
    built.reload()
    return BuildResult(
        image=image.reference,
        tags=tags,
        image_id=str(built.id),
        size_bytes=int(built.attrs.get("Size", 0)),
        duration_s=round(time.monotonic() - started, 2),
        cached_steps=log.cached_steps,
        total_steps=log.total_steps,
        base_image=staged.base_image,
        backend=backend,
        network=staged.network,
        platform=image.platform,
        inputs_hash=image.inputs_hash,
    )


def check_base(client: docker.DockerClient, staged: StagedContext, report: Reporter) -> None:
    """Say before a long build that the base must be pulled; refuse a local base of another platform than
    the image's (BuildKit would look for the image's platform in a registry, and fail there)."""
    try:
        base = client.images.get(staged.base_image)
    except ImageNotFound:
        report(f"note: base image {staged.base_image} is not in the engine; BuildKit will try to pull it")
        return
    held = f"{base.attrs.get('Os', 'linux')}/{base.attrs.get('Architecture', '?')}"
    if held != staged.image.platform:
        setting = "arm64_base_image" if staged.image.platform == "linux/arm64" else "base_image"
        raise DockerError(
            f"the base image {staged.base_image} is {held}, and {staged.image.reference} is"
            f" {staged.image.platform}\n  hint: set {setting} (.factory.local.toml, or"
            f" FACTORY_{setting.upper()}) to a {staged.image.platform} base; testbench/up-tests makes"
            " factory-local/debian:bookworm-arm64"
        )


def untag(client: docker.DockerClient, reference: str) -> None:
    with contextlib.suppress(ImageNotFound):
        client.images.remove(reference, noprune=True)


def write_report(results: list[BuildResult], path: Path) -> None:
    write_text_atomic(path, json.dumps([asdict(result) for result in results], indent=2) + "\n")


def summary(result: BuildResult) -> str:
    on = "" if result.network == network.DEFAULT else f" on the {result.network} network"
    return (
        f"built {result.image} ({result.platform}) in {result.duration_s:.1f} s with {result.backend}{on}: "
        f"{result.cached_steps}/{result.total_steps} steps cached, {result.size_bytes / 1e9:.2f} GB, "
        f"{result.image_id[:19]}\n  tags: {', '.join(result.tags)}"
    )
