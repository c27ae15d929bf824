"""The vLLM version a version-gated deviation rule is judged by: the one the image would run.

With a lock, the locked release. With none, the recipe's `vllm==X` pin, else its own floor: the versioned
`docker_image` tag the site would run on this brand, else the highest `min_vllm_version` of recipe and
variant. A recipe that needs nightly, or an image tagged `latest`, `nightly` or a name (`qwen38`), has no
readable version: the rules then leave the recipe's own flags alone, and the rendering says
`vllm_version: unknown`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from packaging.version import InvalidVersion, Version

from factory.recipes.loader import LoadedRecipe

# `vllm/vllm-openai:v0.22.1`, `rocm/vllm:0.20.0`: a tag that is a release (a suffix such as -cu130 aside).
_TAG = re.compile(r":v?(?P<version>\d+\.\d+(?:\.\d+)?)(?:$|[-_+])")


@dataclass(frozen=True)
class JudgedVersion:
    version: str | None  # None: no readable version
    source: str  # where it was read: lock, docker_image, min_vllm_version, or why there is none

    @property
    def text(self) -> str:
        return self.version or "unknown"


def judged_version(
    loaded: LoadedRecipe, variant: str, hardware: str, brand: str, locked: str | None, pinned: str | None
) -> JudgedVersion:
    """`locked`: the lock's release for the image; `pinned`: the recipe's own `vllm==X` dependency."""
    if locked is not None:
        return JudgedVersion(locked, "lock")
    if pinned is not None:
        return JudgedVersion(pinned, "dependencies")
    recipe = loaded.recipe
    chosen = recipe.variants[variant]
    if recipe.model.nightly_required or chosen.nightly_required:
        return JudgedVersion(None, "nightly_required: a nightly build has no release number")
    override = chosen.hardware_overrides.get(hardware)
    image = _for_brand(override.docker_image if override else None, brand)
    image = image or _for_brand(chosen.docker_image, brand) or _for_brand(recipe.model.docker_image, brand)
    if image is not None:
        match = _TAG.search(image)
        if match is None:
            return JudgedVersion(None, f"docker_image {image} names no release")
        return JudgedVersion(match.group("version"), "docker_image")
    floors = [recipe.model.min_vllm_version, chosen.min_vllm_version]
    versions = [_version(text) for text in floors if text]
    readable = [v for v in versions if v is not None]
    if not readable:
        return JudgedVersion(None, "min_vllm_version is not a version number")
    return JudgedVersion(str(max(readable)), "min_vllm_version")


def _for_brand(image: Any, brand: str) -> str | None:
    """A docker_image given as a tag, or the entry of a map by brand (a map by CUDA flavour names none)."""
    if isinstance(image, str):
        return image
    if isinstance(image, dict):
        found = image.get(brand.lower())
        return found if isinstance(found, str) else None
    return None


def _version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None
