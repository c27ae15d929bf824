"""`factory check-args`: every `vllm serve` command of every image, on every hardware and every node, parsed
by the vLLM release it runs. A target that cannot be built here (no GPU, no ROCm base, an arm64 tray) is
checked in any built image of the same vLLM release: the parser is vLLM's, whatever the accelerator.
Targets with no built image of their release are listed as not parser-checked, never passed in silence."""

from __future__ import annotations

from dataclasses import dataclass

import docker

from factory.blueprint import Blueprint
from factory.validate.static import CheckResult, argv_sets, check_serve_args

VERSION_LABEL = "ai.vllm.factory.vllm-version"


@dataclass(frozen=True)
class ArgsCheck:
    image: str  # the target whose commands were checked
    version: str | None
    checked_in: str | None  # the built image whose vLLM parsed them; None: not parser-checked
    results: tuple[CheckResult, ...]

    @property
    def rejected(self) -> list[CheckResult]:
        return [result for result in self.results if not result.ok]


def built_image_of(client: docker.DockerClient, version: str) -> str | None:
    """A built factory image with this vLLM release (its own tag, or the first the engine lists)."""
    for image in client.images.list(filters={"label": f"{VERSION_LABEL}={version}"}):
        if image.tags:
            return str(image.tags[0])
    return None


def check_all(client: docker.DockerClient, blueprints: list[Blueprint]) -> list[ArgsCheck]:
    checks = []
    by_version: dict[str, str | None] = {}
    for blueprint in blueprints:
        image = blueprint.image
        version = image.vllm_version
        if version is None:
            checks.append(ArgsCheck(image.reference, None, None, ()))
            continue
        if version not in by_version:
            by_version[version] = built_image_of(client, version)
        parser = by_version[version]
        if parser is None:
            checks.append(ArgsCheck(image.reference, version, None, ()))
            continue
        results = check_serve_args(client, parser, argv_sets(image, list(blueprint.deployments)))
        checks.append(ArgsCheck(image.reference, version, parser, tuple(results)))
    return checks
