"""`factory check-args`: every `vllm serve` command of every image, on every hardware and every node, parsed
by the vLLM release it runs. A target that cannot be built here (no GPU, no ROCm base, an arm64 tray) is
checked in any built image of the same vLLM release: the parser is vLLM's, whatever the accelerator.
Targets with no built image of their release are listed as not parser-checked, never passed in silence."""

from __future__ import annotations

from dataclasses import dataclass, replace

import docker

from factory.blueprint import Blueprint
from factory.plan.models import OMNI_VERSION_LABEL
from factory.validate.static import CheckResult, argv_sets, check_serve_args

VERSION_LABEL = "ai.vllm.factory.vllm-version"


@dataclass(frozen=True)
class ArgsCheck:
    image: str  # the target whose commands were checked
    version: str | None
    checked_in: str | None  # the built image whose vLLM parsed them; None: not parser-checked
    results: tuple[CheckResult, ...]
    unbuildable: str | None = None  # why no image and no vLLM release exist (an omni image on AMD)

    @property
    def rejected(self) -> list[CheckResult]:
        return [result for result in self.results if not result.ok]


def built_image_of(client: docker.DockerClient, version: str, omni: str | None = None) -> str | None:
    """A built factory image with this vLLM release (its own tag, or the first the engine lists); for omni
    commands, one with this vllm-omni release too: its parser is vllm-omni's."""
    labels = [f"{VERSION_LABEL}={version}"] + ([f"{OMNI_VERSION_LABEL}={omni}"] if omni else [])
    # The engine's list as it answers it (images.list() asks for each image again: see engine_images).
    for image in client.api.images(filters={"label": labels}):
        tags = [tag for tag in image.get("RepoTags") or [] if tag != "<none>:<none>"]
        if tags:
            return str(tags[0])
    return None


def check_all(client: docker.DockerClient, blueprints: list[Blueprint]) -> list[ArgsCheck]:
    """Every image's commands, one container per vLLM (and vllm-omni) release (importing vLLM to build its
    parser takes most of the time: a container per image would take minutes)."""
    by_version: dict[tuple[str, str | None], list[Blueprint]] = {}
    order = [blueprint.image.reference for blueprint in blueprints]
    # No vLLM release at all (an omni image on AMD): no parser can be chosen, and the reason is known.
    unbuildable = {
        b.image.reference: b.image.unbuildable
        for b in blueprints
        if b.image.unbuildable and not b.image.vllm_version
    }
    for blueprint in blueprints:
        if blueprint.image.reference in unbuildable:
            continue
        install = blueprint.image.install
        key = (blueprint.image.vllm_version or "", install.omni if install else None)
        by_version.setdefault(key, []).append(blueprint)
    checks: dict[str, ArgsCheck] = {}
    for (version, omni), group in by_version.items():
        parser = built_image_of(client, version, omni) if version else None
        if parser is None:
            for blueprint in group:
                checks[blueprint.image.reference] = ArgsCheck(
                    blueprint.image.reference, version or None, None, ()
                )
            continue
        sets = {
            f"{blueprint.image.reference}|{name}": argv
            for blueprint in group
            for name, argv in argv_sets(blueprint.image, list(blueprint.deployments)).items()
        }
        results = check_serve_args(client, parser, sets)
        for blueprint in group:
            prefix = f"serve-args:{blueprint.image.reference}|"
            own = tuple(
                replace(result, name="serve-args:" + result.name.removeprefix(prefix))
                for result in results
                if result.name.startswith(prefix)
            )
            checks[blueprint.image.reference] = ArgsCheck(blueprint.image.reference, version, parser, own)
    for reference, why in unbuildable.items():
        checks[reference] = ArgsCheck(reference, None, None, (), why)
    return [checks[reference] for reference in order]
