"""Typed hardware catalog: per target its vendor, platform, GPU architecture, base image and install."""

from __future__ import annotations

from typing import Literal

from packaging.specifiers import SpecifierSet

from factory.models_base import Strict

Vendor = Literal["nvidia", "amd", "cpu"]
Platform = Literal["linux/amd64", "linux/arm64"]


class Sourced(Strict):
    """A fact that could not be checked here carries where it was read."""

    source: str


class ArchCoverage(Sourced):
    """Which GPU architectures the vLLM builds in a version range were compiled for."""

    vllm: str  # a PEP 440 specifier, e.g. "<0.13"
    archs: list[str]

    def covers_version(self, version: str) -> bool:
        return SpecifierSet(self.vllm).contains(version, prereleases=True)


class PublishedImage(Sourced):
    """A vendor-published image that already contains vLLM at exactly `vllm`."""

    vllm: str
    image: str
    python: str


class WheelsFrom(Sourced):
    """The first vLLM version a wheel index serves for this install."""

    version: str


class TorchPin(Sourced):
    vllm: str
    requirement: str  # e.g. "torch==2.13.0+cpu"


class Install(Strict):
    """How vLLM gets into an image: pip into a venv, or preinstalled in a vendor image."""

    kind: Literal["pip", "vendor-image"]
    description: str
    package: str = "vllm"
    torch_backend: str  # cu128, rocm7.0, cpu: what the torch build targets
    python: str | None = None  # the interpreter the install needs, when it is stricter than the base
    system_packages: list[str] = []
    extra_index_url: str | None = None
    torch: list[TorchPin] = []
    remove_packages: list[str] = []  # wheels that clash with the torch build and must go (with why)
    remove_packages_reason: str | None = None
    images: list[PublishedImage] = []
    arch_coverage: list[ArchCoverage] = []
    wheels_from: WheelsFrom | None = None
    notes: list[Sourced] = []


class Hardware(Strict):
    vendor: Vendor
    display_name: str
    taxonomy_profile: str | None = None  # the recipes taxonomy's name for it, when it has one
    platform: Platform
    gpu_arch: str | None  # sm_90, gfx942, ...; None for the CPU target
    gpus_per_node: int
    install: str
    base_image: str | None = None  # None when the install brings its own (a vendor image)
    sources: list[str] = []
    notes: list[Sourced] = []


class KnownBadPin(Sourced):
    vllm: str
    reason: str


class Catalog(Strict):
    installs: dict[str, Install]
    hardware: dict[str, Hardware]
    known_bad: dict[str, list[KnownBadPin]] = {}  # model_id -> versions that break it
    # model_id -> the only hardware to build it for (the tiny self-test model is for the CPU target)
    only_hardware: dict[str, list[str]] = {}
    # The recipe built for a hardware when none is named (nox -s build-<hw>, CI, the benchmark):
    # `default`, or the hardware's own entry.
    build_recipes: dict[str, str]

    def build_recipe(self, hardware: str) -> str:
        return self.build_recipes.get(hardware) or self.build_recipes["default"]
