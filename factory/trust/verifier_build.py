"""`factory build-verifier`: the verifier image (factory.trust.verifier) through the same BuildKit path as
every image: its context staged from the package and this machine's cosign, a temporary tag, then its tags."""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from pathlib import Path

from factory.base.reporter import Reporter, silent
from factory.base.settings import BuildSettings
from factory.builder.backends import run_build
from factory.builder.builder import BuildResult, choose_backend, tag_built, untag
from factory.builder.context import StagedContext
from factory.engine.connect import connect, engine_facts
from factory.trust.cosign import cosign_binary
from factory.trust.verifier import BASE_IMAGE, dockerfile, gate_source, verifier_image


def build_verifier(settings: BuildSettings, report: Reporter = silent) -> BuildResult:
    """Build and tag the verifier image through the same BuildKit path as every image."""
    image = verifier_image()
    cosign = cosign_binary()
    client = connect()
    backend = choose_backend("compose", image, engine_facts(client).platform, settings.network)
    temporary = f"factory-build-tmp/verify:{uuid.uuid4().hex[:12]}"
    started = time.monotonic()
    report(f"building {image.immutable_reference} with cosign from {cosign}")
    with tempfile.TemporaryDirectory(prefix="factory-build-") as workdir:
        directory = Path(workdir) / "verify"
        directory.mkdir()
        (directory / "Dockerfile").write_bytes(dockerfile(image))
        (directory / "gate.py").write_bytes(gate_source())
        shutil.copy2(cosign, directory / "cosign")
        build_args = {"BASE_IMAGE": settings.base_image} if settings.base_image else {}
        base = settings.base_image or BASE_IMAGE
        staged = StagedContext(image, directory, build_args, {}, base, settings.network)
        try:
            log = run_build(staged, temporary, backend, echo=False)
            return tag_built(client, temporary, staged, log, backend, started)
        finally:
            untag(client, temporary)
