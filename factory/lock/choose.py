"""Which vLLM release an install of a recipe's variant gets: an exact pin wins; else the release the recipe's
docker_image names; else the newest release that satisfies every minimum that applies and is not known to
break the model. A recipe that needs a nightly build gets none (the lock pins no nightly)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

from factory.catalog.schema import Catalog, Install
from factory.lock.pins import pinned_vllm
from factory.lockfile.model import NIGHTLY_ONLY, NO_CITED_SOURCE, NO_RELEASE, Release
from factory.recipes.loader import LoadedRecipe

# A tag that names a release: v0.22.1, 0.22.1, v0.22.1-cu130 (a tag such as latest or nightly names none).
_RELEASE_TAG = re.compile(r"^v?(?P<version>\d+\.\d+(?:\.\d+)*(?:\.post\d+)?)(?:[-_].*)?$")
BRAND_KEYS = {"NVIDIA": "nvidia", "AMD": "amd", "Intel": "intel", "Google": "tpu"}


@dataclass(frozen=True)
class Ask:
    """What a recipe asks of one install: the text recorded in the lock, and how to satisfy it."""

    constraint: str
    exact: Version | None = None
    minimum: Version | None = None
    image: str | None = None  # a vendor image the recipe names, when its tag names a release
    refused: str | None = None  # nothing can satisfy it (a nightly build)


def ask(loaded: LoadedRecipe, variant: str, catalog: Catalog, brand: str) -> Ask:
    recipe = loaded.recipe
    chosen = recipe.variants[variant]
    if recipe.model.nightly_required or chosen.nightly_required:
        return Ask("nightly", refused="the recipe needs a nightly build of vLLM; the lock pins releases only")
    pin = pinned_vllm(loaded, catalog, brand)
    if pin:
        return Ask(f"=={pin}, pinned in dependencies", exact=Version(pin))
    image = recipe_image(chosen.docker_image, brand) or recipe_image(recipe.model.docker_image, brand)
    release = release_of(image)
    if image and release:
        return Ask(f"=={release}, the release docker_image names ({image})", exact=release, image=image)
    minimums = [recipe.model.min_vllm_version, chosen.min_vllm_version]
    floor = max([Version(m) for m in minimums if m and _is_version(m)] or [Version("0")])
    return Ask(f">={floor}, min_vllm_version", minimum=floor)


def release_of(image: str | None) -> Version | None:
    """The vLLM release an image's tag names (vllm/vllm-openai:v0.22.1), or None (latest, nightly, ...)."""
    if not image or ":" not in image:
        return None
    found = _RELEASE_TAG.match(image.rsplit(":", 1)[-1])
    return Version(found["version"]) if found else None


def recipe_image(value: object, brand: str) -> str | None:
    """The image a docker_image value names for a brand: a string (NVIDIA's), a map by brand, or a map by
    CUDA flavour (the site's default, cu130, first)."""
    key = BRAND_KEYS.get(brand, brand.lower())
    if isinstance(value, str):
        return value if key == "nvidia" else None
    if not isinstance(value, dict):
        return None
    if any(k in value for k in BRAND_KEYS.values()):
        return recipe_image(value.get(key), brand) if not isinstance(value.get(key), str) else value[key]
    if key == "nvidia":
        for flavour in ("cu130", "cu129"):
            if isinstance(value.get(flavour), str):
                return str(value[flavour])
    return None


def choose(
    request: Ask, install: Install, available: list[Version], known_bad: list[str], images: dict[Version, str]
) -> Release:
    """The release for one install: from the index's releases of its package (pip installs) or from the
    vendor images known for it (vendor-image installs), newest first."""
    if request.refused:
        return Release(vllm=None, why=request.refused, constraint=request.constraint, cause=NIGHTLY_ONLY)
    bad = {Version(v) for v in known_bad}
    candidates = list(images) if install.kind == "vendor-image" else list(available)
    where = "known vendor images" if install.kind == "vendor-image" else f"releases of {install.package}"
    for version in sorted(candidates, reverse=True):
        if version in bad:
            continue
        if request.exact is not None and version != request.exact:
            continue
        if request.minimum is not None and version < request.minimum:
            continue
        image = images.get(version) if install.kind == "vendor-image" else None
        how = "as the recipe asks" if request.exact is not None else "the newest release that satisfies"
        return Release(
            vllm=str(version),
            why=f"{how}: {request.constraint}" + (f"; image {image}" if image else ""),
            constraint=request.constraint,
            base_image=image,
        )
    known = ", ".join(str(v) for v in sorted(candidates, reverse=True)[:8]) or "none"
    return Release(
        vllm=None,
        why=f"nothing satisfies {request.constraint} among the {where} (newest: {known})",
        constraint=request.constraint,
        cause=NO_CITED_SOURCE if install.kind == "vendor-image" else NO_RELEASE,
    )


def _is_version(text: str) -> bool:
    try:
        Version(text)
    except InvalidVersion:
        return False
    return True
