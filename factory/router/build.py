"""`factory build-router`: the router image through the same BuildKit path as every image (a temporary tag,
then the real tags once BuildKit succeeded), from its generated folder, with the same secrets."""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from pathlib import Path

from factory.base.errors import InputError
from factory.base.reporter import Reporter, silent
from factory.base.settings import BuildSettings
from factory.builder.backends import run_build
from factory.builder.builder import BuildResult, choose_backend, tag_built, untag
from factory.builder.context import StagedContext, stage_secrets
from factory.engine.connect import connect, engine_facts
from factory.project import Project
from factory.router.image import RouterImage, router_files, router_image


def locked_router(project: Project) -> RouterImage:
    image = router_image(project)
    if image is None:
        raise InputError(
            "the PD router is not locked", file=project.lock_path.parent / "router", hint="run `factory lock`"
        )
    return image


def build_router(
    project: Project,
    settings: BuildSettings,
    backend: str = "auto",
    echo: bool = False,
    report: Reporter = silent,
) -> BuildResult:
    """Build and tag the locked router image from images/vllm-router/<release>/ (refused when stale)."""
    image = locked_router(project)
    for file in router_files(project):
        on_disk = project.out / file.path
        if not on_disk.is_file() or on_disk.read_bytes() != file.content:
            raise InputError(
                "the generated build files are stale or missing",
                file=on_disk,
                hint="run `factory generate` (or `nox -s generate`) and commit the result",
            )
    client = connect()
    facts = engine_facts(client)
    chosen = choose_backend(backend, image, facts.platform, settings.network)
    temporary = f"factory-build-tmp/{image.slug}:{uuid.uuid4().hex[:12]}"
    started = time.monotonic()
    report(f"building {image.reference} with {chosen}")
    with tempfile.TemporaryDirectory(prefix="factory-build-") as workdir:
        directory = Path(workdir) / image.tag
        shutil.copytree(project.out / image.directory, directory)
        build_args = {"BASE_IMAGE": settings.base_image} if settings.base_image else {}
        secrets = stage_secrets(settings, Path(workdir), image.tag)
        base = settings.base_image or image.base_image
        staged = StagedContext(image, directory, build_args, secrets, base, settings.network)
        try:
            log = run_build(staged, temporary, chosen, echo)
            return tag_built(client, temporary, staged, log, chosen, started)
        finally:
            untag(client, temporary)
