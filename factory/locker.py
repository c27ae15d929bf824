"""`factory lock`: choose a vLLM release for every recipe, variant and install, and resolve the complete
hash-locked dependency set of every (release, platform, accelerator, Python) an image of them installs.

Existing choices are kept while what the recipe asks is unchanged; `--upgrade` (all, or one recipe) moves
them on purpose, and the lock file's diff shows what moved. The index is asked only here.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from packaging.version import Version

from factory.catalog.schema import Install
from factory.lock import index
from factory.lock.choose import ask, choose, recipe_image, release_of
from factory.lock.model import (
    UV_PYTHON,
    Lock,
    LockedSet,
    Release,
    cuda_version,
    heavy_packages,
    set_key,
    uv_key,
)
from factory.lock.store import inputs_digest, set_text, write_lock
from factory.project import Project
from factory.recipes.loader import LoadedRecipe
from factory.reporter import Reporter, silent
from factory.settings import BuildSettings
from factory.synthesis.matrix import hardware_for


@dataclass
class LockReport:
    releases: int = 0
    kept: int = 0
    moved: list[str] = field(default_factory=list)  # "recipe variant install: old -> new"
    none: list[str] = field(default_factory=list)  # "recipe variant install: why"
    sets_resolved: int = 0
    sets_kept: int = 0
    unresolvable: list[str] = field(default_factory=list)


def lock(
    project: Project, settings: BuildSettings, upgrade: str | None = None, report: Reporter = silent
) -> LockReport:
    """Write the project's lock (project.lock_path). `upgrade`: "*" for every recipe, else one recipe id."""
    previous = project.lock or Lock(inputs="")
    catalog = project.catalog
    result = LockReport()
    available: dict[str, list[Version]] = {}
    releases: dict[str, dict[str, dict[str, Release]]] = {}
    for recipe_id, loaded in sorted(project.tree.recipes.items()):
        if loaded.recipe.is_omni:
            continue
        moving = upgrade == "*" or (upgrade is not None and project.tree.recipe(upgrade) is loaded)
        for variant, installs in _installs_needed(project, loaded).items():
            for install_name, brand in sorted(installs.items()):
                install = catalog.installs[install_name]
                request = ask(loaded, variant, catalog, brand)
                old = previous.releases.get(recipe_id, {}).get(variant, {}).get(install_name)
                if old is not None and old.constraint == request.constraint and not moving:
                    chosen = old
                    result.kept += 1
                else:
                    if install.kind == "pip" and install.package not in available:
                        report(f"asking the index for the releases of {install.package}")
                        available[install.package] = index.releases(install.package)
                    images = _vendor_images(install, loaded, variant, brand)
                    bad = [b.vllm for b in catalog.known_bad.get(loaded.model_id, [])]
                    chosen = choose(request, install, available.get(install.package, []), bad, images)
                    if old is not None and old.vllm != chosen.vllm:
                        result.moved.append(
                            f"{recipe_id} {variant} {install_name}: {old.vllm} -> {chosen.vllm}"
                        )
                releases.setdefault(recipe_id, {}).setdefault(variant, {})[install_name] = chosen
                result.releases += 1
                if chosen.vllm is None:
                    result.none.append(f"{recipe_id} {variant} {install_name}: {chosen.why}")
    sets, texts = _lock_sets(project, releases, previous, settings, upgrade == "*", result, report)
    uv_sets, uv_texts = _uv_sets(project, previous, settings, report)
    new = Lock(inputs=inputs_digest(project.tree.root, project.catalog_path.parent), uv=catalog.uv,
               releases=releases, sets={**sets, **uv_sets})  # fmt: skip
    write_lock(project.lock_path, new, {**texts, **uv_texts})
    return result


def _installs_needed(project: Project, loaded: LoadedRecipe) -> dict[str, dict[str, str]]:
    """variant -> install -> the brand of the hardware it serves, for every catalog hardware it renders on."""
    needed: dict[str, dict[str, str]] = {}
    only = project.catalog.only_hardware.get(loaded.recipe_id)
    for variant in loaded.recipe.variants:
        for hardware in hardware_for(loaded.recipe, variant, project.tree.taxonomy):
            if hardware not in project.catalog.hardware or (only is not None and hardware not in only):
                continue
            brand = project.tree.taxonomy.hardware_profiles[hardware].brand
            needed.setdefault(variant, {})[project.catalog.hardware[hardware].install] = brand
    return needed


def _vendor_images(install: Install, loaded: LoadedRecipe, variant: str, brand: str) -> dict[Version, str]:
    """The vendor images known for an install: the catalog's, and the one the recipe names for its brand."""
    if install.kind != "vendor-image":
        return {}
    images = {Version(published.vllm): published.image for published in install.images}
    named = recipe_image(loaded.recipe.variants[variant].docker_image, brand) or recipe_image(
        loaded.recipe.model.docker_image, brand
    )
    release = release_of(named)
    if named and release:
        images[release] = named
    return images


def _lock_sets(
    project: Project,
    releases: dict[str, dict[str, dict[str, Release]]],
    previous: Lock,
    settings: BuildSettings,
    upgrading: bool,
    result: LockReport,
    report: Reporter,
) -> tuple[dict[str, LockedSet], dict[str, str]]:
    """Every locked set the releases need, resolved once (kept from the previous lock unless upgrading)."""
    needed: dict[str, tuple[Install, str, str]] = {}
    for recipe_id, variants in releases.items():
        loaded = project.tree.recipes[recipe_id]
        for variant, installs in variants.items():
            for install_name, release in installs.items():
                install = project.catalog.installs[install_name]
                if install.kind != "pip" or release.vllm is None or install.python is None:
                    continue
                for platform in _platforms(project, loaded, variant, install_name):
                    key = set_key(
                        install.package, release.vllm, platform, install.accelerator, install.python
                    )
                    needed[key] = (install, release.vllm, platform)
    sets: dict[str, LockedSet] = {}
    texts: dict[str, str] = {}
    for key, (install, version, platform) in sorted(needed.items()):
        kept = previous.sets.get(key)
        if kept is not None and not upgrading and (kept.unresolvable or _readable(project, kept)):
            sets[key] = kept
            if kept.requirements:
                texts[f"{key}.txt"] = set_text(project.lock_path, kept.requirements)
            result.sets_kept += 1
            continue
        report(f"resolving {key} with uv")
        sets[key], text = _resolve_set(install, version, platform, settings)
        if text:
            texts[f"{key}.txt"] = text
        if sets[key].unresolvable:
            result.unresolvable.append(f"{key}: {sets[key].unresolvable}")
        result.sets_resolved += 1
    return sets, texts


def _readable(project: Project, kept: LockedSet) -> bool:
    return bool(kept.requirements) and (project.lock_path.parent / str(kept.requirements)).is_file()


def _platforms(project: Project, loaded: LoadedRecipe, variant: str, install_name: str) -> set[str]:
    platforms: set[str] = set()
    for hardware in hardware_for(loaded.recipe, variant, project.tree.taxonomy):
        entry = project.catalog.hardware.get(hardware)
        if entry is not None and entry.install == install_name:
            platforms.add(entry.platform)
    return platforms


def _resolve_set(
    install: Install, version: str, platform: str, settings: BuildSettings
) -> tuple[LockedSet, str | None]:
    base = LockedSet(
        package=install.package,
        vllm=version,
        platform=platform,
        accelerator=install.accelerator,
        python=install.python or "",
    )
    extra = (
        settings.pip_extra_index_url if settings.pip_extra_index_url is not None else install.extra_index_url
    )
    try:
        text = index.compile_set(
            [f"{install.package}=={version}"], platform, install.python or "", install.remove_packages,
            settings.find_links if install.local_wheels else None, extra or None,
        )  # fmt: skip
    except index.IndexUnavailable as exc:
        return base.model_copy(update={"unresolvable": str(exc)}), None
    cuda = cuda_version(text) if install.accelerator == "cuda" else None
    torch = next(
        (line.split("==")[1].split()[0] for line in text.splitlines() if line.startswith("torch==")), None
    )
    if install.accelerator == "cuda" and cuda is None:
        why = (
            f"torch {torch} for {platform} on the package index has no CUDA build (no nvidia-cuda-runtime in "
            "its set): CUDA wheels for this platform live on the PyTorch index, which the lock does not use"
        )
        return base.model_copy(update={"unresolvable": why, "torch": torch}), None
    if install.accelerator == "cuda" and cuda not in install.base_images:
        why = f"torch {torch} is built for CUDA {cuda}, and the catalog has no base image for it"
        return base.model_copy(update={"unresolvable": why, "torch": torch, "cuda": cuda}), None
    key = set_key(install.package, version, platform, install.accelerator, install.python or "")
    locked = base.model_copy(
        update={
            "requirements": f"sets/{key}.txt",
            "digest": hashlib.sha256(text.encode()).hexdigest(),
            "torch": torch,
            "cuda": cuda,
            "heavy": heavy_packages(text),
        }
    )
    return locked, text


def _uv_sets(
    project: Project, previous: Lock, settings: BuildSettings, report: Reporter
) -> tuple[dict[str, LockedSet], dict[str, str]]:
    """uv itself, hash-locked per platform: what an image's install step bootstraps."""
    sets, texts = {}, {}
    platforms = {hardware.platform for hardware in project.catalog.hardware.values()}
    for platform in sorted(platforms):
        key = uv_key(project.catalog.uv, platform)
        kept = previous.sets.get(key)
        if kept is not None and _readable(project, kept):
            sets[key], texts[f"{key}.txt"] = kept, set_text(project.lock_path, str(kept.requirements))
            continue
        report(f"resolving {key} with uv")
        text = index.compile_set([f"uv=={project.catalog.uv}"], platform, UV_PYTHON, [], None, None)
        sets[key] = LockedSet(package="uv", vllm=project.catalog.uv, platform=platform, accelerator="tool",
                              python=UV_PYTHON, requirements=f"sets/{key}.txt",
                              digest=hashlib.sha256(text.encode()).hexdigest())  # fmt: skip
        texts[f"{key}.txt"] = text
    return sets, texts
