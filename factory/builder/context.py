"""Stage a build context: the generated image folder, plus local wheels and the secrets' files."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Protocol

from factory.base.errors import InputError
from factory.base.outputs import OutputFile, difference
from factory.base.settings import BuildSettings, Network


class BuildTarget(Protocol):
    """What a build needs to know of its image: a vLLM image's plan, or the PD router's image."""

    @property
    def slug(self) -> str: ...
    @property
    def directory(self) -> PurePosixPath: ...
    @property
    def base_image(self) -> str: ...
    @property
    def local_wheels(self) -> bool: ...
    @property
    def python_platform(self) -> str | None: ...
    @property
    def tag(self) -> str: ...
    @property
    def reference(self) -> str: ...
    @property
    def platform(self) -> str: ...
    @property
    def immutable_reference(self) -> str: ...
    @property
    def inputs_hash(self) -> str: ...


class Buildable(Protocol):
    """A blueprint the build stage reads: its image and the build context generate wrote for it."""

    @property
    def image(self) -> BuildTarget: ...
    @property
    def image_files(self) -> tuple[OutputFile, ...]: ...


@dataclass(frozen=True)
class StagedContext:
    image: BuildTarget
    directory: Path
    build_args: dict[str, str]  # never secrets: they are visible in the image's history
    secrets: dict[str, Path]  # id -> file; mounted only during RUN steps, never stored
    base_image: str
    network: Network  # the RUN steps' network: every backend writes it, or refuses (build/network.py)
    # The platform to ask BuildKit for when it is not the engine's own (emulated: QEMU); None: the engine's.
    cross_platform: str | None = None


def check_generated(root: Path, blueprint: Buildable) -> None:
    """Build only what the committed files say: refuse a stale or missing generated folder."""
    for file in blueprint.image_files:
        on_disk = root / file.path
        if difference(on_disk, file) is not None:  # compared in chunks: the model files may be large
            raise InputError(
                "the generated build files are stale or missing",
                file=on_disk,
                hint="run `factory generate` (or `nox -s generate`) and commit the result",
            )


def stage(
    root: Path, image: BuildTarget, settings: BuildSettings, workdir: Path, engine_platform: str | None = None
) -> StagedContext:
    directory = workdir / image.tag
    shutil.copytree(root / image.directory, directory)
    if settings.find_links and image.local_wheels:
        for wheel in sorted(settings.find_links.glob("*.whl")):
            _link_or_copy(wheel, directory / "wheels" / wheel.name)
    build_args = {}
    assert image.base_image, "the blueprint of an unbuildable image has no build context"
    chosen = settings.base_for(image.platform)
    base = chosen or image.base_image
    if chosen:
        build_args["BASE_IMAGE"] = chosen
    if image.python_platform is not None and settings.base_image:
        # The install stage runs on the build's own platform: on the base_image setting (this machine's
        # amd64 base), where arm64_base_image is the image's.
        build_args["BUILD_IMAGE"] = settings.base_image
    if settings.pip_extra_index_url is not None:
        build_args["PIP_EXTRA_INDEX_URL"] = settings.pip_extra_index_url
    secrets = stage_secrets(settings, workdir, image.tag)
    cross = image.platform if engine_platform is not None and image.platform != engine_platform else None
    return StagedContext(image, directory, build_args, secrets, base, settings.network, cross)


def stage_secrets(settings: BuildSettings, workdir: Path, name: str) -> dict[str, Path]:
    """The build's secrets as files in `workdir` (id -> file)."""
    secrets = {}
    sources = (("cabundle", settings.ca_bundle), ("pipconf", settings.pip_conf), ("uvenv", settings.uv_env))
    for secret_id, source in sources:
        # A declared secret must exist; an empty file means "none" (the Dockerfile checks -s).
        target = workdir / f"{name}.{secret_id}"
        if source:
            shutil.copyfile(source, target)
        else:
            target.write_bytes(b"")
        target.chmod(0o600)
        secrets[secret_id] = target
    return secrets


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)
