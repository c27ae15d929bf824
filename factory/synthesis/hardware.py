"""Which hardware a variant runs on, and how recipes key values by hardware.

The upstream recipes site's rules (src/lib/command-synthesis.js), in Python: precision constraints
(NVFP4 and FP4 need Blackwell unless a variant says otherwise), `unsupported` opt-outs, variant
allowlists, single-node fit and non-scalable workstations, and hardware-keyed lookups.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from factory.recipes.schema import PrecisionHardware, Recipe, Variant
from factory.recipes.tree_schema import HardwareProfile

T = TypeVar("T")

# Precision -> the hardware it needs unless the variant's precision_hardware says otherwise.
PRECISION_HARDWARE = {
    "nvfp4": PrecisionHardware(brand="NVIDIA", generation="blackwell"),
    "fp4": PrecisionHardware(brand="NVIDIA", generation="blackwell"),
}


def keyed_value(mapping: Mapping[str, T] | None, profile: HardwareProfile, profile_id: str) -> T | None:
    """A hardware-keyed value: exact GPU id, else generation, else brand (lower case), else `default`."""
    if not mapping:
        return None
    for key in (profile_id, profile.gen, profile.brand.lower(), "default"):
        if mapping.get(key) is not None:
            return mapping[key]
    return None


def generation_block(mapping: Mapping[str, T], profile: HardwareProfile) -> T | None:
    """An override block for the hardware's generation, else the brand-wide `nvidia` one on NVIDIA."""
    block = mapping.get(profile.gen)
    if block is None and profile.brand == "NVIDIA":
        block = mapping.get("nvidia")
    return block


def precision_constraint(variant: Variant) -> PrecisionHardware | None:
    return variant.precision_hardware or PRECISION_HARDWARE.get(variant.precision)


def matches(profile: HardwareProfile, constraint: PrecisionHardware | None) -> bool:
    if constraint is None:
        return True
    if constraint.brand and profile.brand != constraint.brand:
        return False
    return not constraint.generation or constraint.generation in profile.generations


def runs_on(recipe: Recipe, variant: Variant, profile: HardwareProfile, profile_id: str) -> bool:
    """Precision fits, the recipe does not mark the hardware unsupported, the variant does not exclude it."""
    return (
        matches(profile, precision_constraint(variant))
        and recipe.meta.hardware.get(profile_id) != "unsupported"
        and (not variant.supported_hardware or profile_id in variant.supported_hardware)
    )


def fits_one_node(profile: HardwareProfile, variant: Variant) -> bool:
    """The variant's weights fit one node's memory (unknown sizes count as fitting)."""
    needed = variant.vram_minimum_gb or 0
    return needed <= 0 or profile.vram_gb <= 0 or needed <= profile.vram_gb


def fitting_variant(recipe: Recipe, profile: HardwareProfile, profile_id: str) -> str | None:
    """On hardware that cannot scale out: the largest variant that fits one node and may run there."""
    fitting = [
        (name, variant)
        for name, variant in recipe.variants.items()
        if matches(profile, precision_constraint(variant))
        and (not variant.supported_hardware or profile_id in variant.supported_hardware)
        and (profile.scalable or fits_one_node(profile, variant))
    ]
    if not fitting:
        return None
    # Largest footprint first; Python's sort is stable like the site's, so ties keep the recipe's order.
    fitting.sort(key=lambda item: -(item[1].vram_minimum_gb or 0))
    return fitting[0][0]


def pd_fits_one_node(profile: HardwareProfile, variant: Variant) -> bool:
    """Prefill and decode share one node half and half: it must hold the model twice, on 2+ GPUs."""
    return profile.gpu_count >= 2 and profile.vram_gb >= 2 * (variant.vram_minimum_gb or 0)
