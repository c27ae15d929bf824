"""Compatibility preflight: what the catalog knows about an image's install on its hardware, said before
anyone builds. Hard impossibilities are refused while planning (factory.plan.images); these are warnings."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from factory.plan.deployment import NodeRole
from factory.plan.models import ImageSpec
from factory.project import Project


@dataclass(frozen=True)
class Finding:
    level: str  # "warning" or "note"
    message: str
    source: str

    def __str__(self) -> str:
        return f"{self.level}: {self.message}\n  source: {self.source}"


def preflight(project: Project, image: ImageSpec, roles: Sequence[NodeRole] = ()) -> list[Finding]:
    hardware = project.catalog.hardware[image.hardware]
    install = project.catalog.installs[hardware.install]
    findings = []
    for coverage in install.arch_coverage:
        if (
            hardware.gpu_arch
            and image.vllm_version
            and coverage.covers_version(image.vllm_version)
            and (hardware.gpu_arch not in coverage.archs)
        ):
            findings.append(
                Finding(
                    "warning",
                    f"{image.hardware} is {hardware.gpu_arch}, but vLLM {image.vllm_version}'s "
                    f"{install.accelerator} "
                    f"build covers only {', '.join(coverage.archs)}: its kernels may fail on this GPU",
                    coverage.source,
                )
            )
    findings += [Finding("note", note.source, "catalog/hardware.yaml") for note in hardware.notes]
    trusts_code = any("--trust-remote-code" in role.words for role in roles)
    if (
        trusts_code
        and "--code-revision" not in " ".join(arg for role in roles for arg in role.words)
        and not image.bundled_model_src
    ):
        findings.append(
            Finding(
                "warning",
                f"--trust-remote-code runs code from {image.model_id} at whatever revision is current; "
                "the recipe pins none (model.revision)",
                image.recipe_file,
            )
        )
    return findings
