"""`factory lock`: choose a vLLM release for every recipe, variant and install, and resolve the complete
hash-locked dependency set of every (release, platform, accelerator, Python) an image of them installs.

Existing choices are kept while what the recipe asks is unchanged; `--upgrade` (all, or one recipe) moves
them on purpose, and the lock file's diff shows what moved. The index is asked only here.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from packaging.version import Version

from factory.catalog.schema import Catalog, Install
from factory.lock import index
from factory.lock.choose import ask, choose, recipe_image, release_of
from factory.lock.model import (
    OMNI,
    UV_PYTHON,
    Lock,
    LockedSet,
    Release,
    cuda_version,
    heavy_packages,
    set_key,
    uv_key,
)
from factory.lock.omni import choose_omni, omni_refusal
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
    inputs = inputs_digest(project.tree.root, project.catalog_path.parent)
    # Unchanged recipes and catalog: what found no release or set stays as it was (a lock run twice is
    # byte-identical, and quick); changed ones are chosen and resolved again.
    same_inputs = previous.inputs == inputs
    catalog = project.catalog
    result = LockReport()
    available: dict[str, list[Version]] = {}
    releases: dict[str, dict[str, dict[str, Release]]] = {}
    for recipe_id, loaded in sorted(project.tree.recipes.items()):
        moving = upgrade == "*" or (upgrade is not None and project.tree.recipe(upgrade) is loaded)
        for variant, installs in _installs_needed(project, loaded).items():
            for install_name, brand in sorted(installs.items()):
                install = catalog.installs[install_name]
                request = ask(loaded, variant, catalog, brand)
                old = previous.releases.get(recipe_id, {}).get(variant, {}).get(install_name)
                keep = old is not None and (old.vllm is not None or same_inputs)
                if old is not None and keep and old.constraint == request.constraint and not moving:
                    chosen = old
                    result.kept += 1
                else:
                    listing = install.kind == "pip" and request.refused is None
                    if listing and install.package not in available:
                        report(f"asking the index for the releases of {install.package}")
                        every = _sources(catalog, install, None, None, settings)
                        available[install.package] = index.releases(install.package, every)
                    images = _vendor_images(install, loaded, variant, brand)
                    bad = [b.vllm for b in catalog.known_bad.get(loaded.model_id, [])]
                    listed = available.get(install.package, [])
                    if loaded.recipe.is_omni:
                        chosen = choose_omni(catalog, request, install, listed, bad)
                    else:
                        chosen = choose(request, install, listed, bad, images)
                    if old is not None and old.vllm != chosen.vllm:
                        result.moved.append(
                            f"{recipe_id} {variant} {install_name}: {old.vllm} -> {chosen.vllm}"
                        )
                releases.setdefault(recipe_id, {}).setdefault(variant, {})[install_name] = chosen
                result.releases += 1
                if chosen.vllm is None:
                    result.none.append(f"{recipe_id} {variant} {install_name}: {chosen.why}")
    sets, texts = _lock_sets(
        project, releases, previous, settings, upgrade == "*", result, report, same_inputs
    )
    uv_sets, uv_texts = _uv_sets(project, previous, settings, report)
    new = Lock(inputs=inputs, uv=catalog.uv,
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
    same_inputs: bool,
) -> tuple[dict[str, LockedSet], dict[str, str]]:
    """Every locked set the releases need, resolved once (kept from the previous lock unless upgrading)."""
    needed: dict[str, tuple[Install, str, str, str | None]] = {}
    for recipe_id, variants in releases.items():
        loaded = project.tree.recipes[recipe_id]
        for variant, installs in variants.items():
            for install_name, release in installs.items():
                install = project.catalog.installs[install_name]
                if install.kind != "pip" or release.vllm is None or install.python is None:
                    continue
                for platform in _platforms(project, loaded, variant, install_name):
                    key = set_key(
                        install.package, release.vllm, platform, install.accelerator, install.python,
                        release.omni,
                    )  # fmt: skip
                    needed[key] = (install, release.vllm, platform, release.omni)
    sets: dict[str, LockedSet] = {}
    texts: dict[str, str] = {}
    for key, (install, version, platform, omni) in sorted(needed.items()):
        refused = omni_refusal(project.catalog, install, platform, omni) if omni else None
        if refused is not None:  # no omni set can exist there: say why with the evidence, resolve nothing
            sets[key] = LockedSet(
                package=install.package, vllm=version, omni=omni, platform=platform, cause=OMNI,
                accelerator=install.accelerator, python=install.python or "", unresolvable=refused,
            )  # fmt: skip
            continue
        kept = previous.sets.get(key)
        if kept is not None and not upgrading and _keep(project, kept, same_inputs):
            sets[key] = kept
            if kept.requirements:
                texts[f"{key}.txt"] = set_text(project.lock_path, kept.requirements)
            result.sets_kept += 1
            continue
        if kept is not None and not upgrading and kept.requirements and _readable(project, kept):
            report(f"recording the index of each file of {key}")
            sets[key] = _record_indexes(project, kept, install, settings)
            texts[f"{key}.txt"] = set_text(project.lock_path, kept.requirements)
            result.sets_kept += 1
            continue
        report(f"resolving {key} with uv")
        sets[key], text = _resolve_set(project.catalog, install, version, platform, settings, omni)
        if text:
            texts[f"{key}.txt"] = text
        if sets[key].unresolvable:
            result.unresolvable.append(f"{key}: {sets[key].unresolvable}")
        result.sets_resolved += 1
    return sets, texts


def _record_indexes(
    project: Project, kept: LockedSet, install: Install | None, settings: BuildSettings
) -> LockedSet:
    """A set locked before the lock recorded indexes keeps its file: uv resolves it once more with its own
    pins as constraints, and only which index served each package is taken from that."""
    if install is None:
        sources = index.Sources(default=project.catalog.default_index)
    else:
        sources = _sources(project.catalog, install, kept.platform, kept.vllm, settings)
    text = set_text(project.lock_path, str(kept.requirements))
    exclude = install.remove_packages if install else []
    compiled = index.compile_set(
        _wanted(project.catalog, kept.package, kept.vllm, kept.omni), kept.platform, kept.python, exclude,
        settings.find_links if install and install.local_wheels else None, sources, pins=text,
    )  # fmt: skip
    return kept.model_copy(update={"served": compiled.served, "indexes": sources.urls})


def _keep(project: Project, kept: LockedSet, same_inputs: bool) -> bool:
    """A resolved set stays while its file is there and it records its indexes. One whose index could not
    be reached is tried again once that index answers here (an unreachable one fails in milliseconds);
    one that could not be resolved otherwise, when the recipes or the catalog changed."""
    if kept.unreachable_index is not None:
        return any(index.unreachable(url) for url in kept.indexes.values())
    if kept.unresolvable:
        return same_inputs
    return _readable(project, kept) and bool(kept.served)


def _sources(
    catalog: Catalog, install: Install, platform: str | None, version: str | None, settings: BuildSettings
) -> index.Sources:
    """The indexes an install's set is resolved against on a platform (None: the ones every platform
    uses, for listing releases). The pip_extra_index_url setting replaces every index but the default."""
    uses = [u for u in install.indexes if (u.applies_to(platform) if platform else not u.platforms)]
    named = [(u.index, catalog.indexes[u.index]) for u in uses]
    default = next((name for name, entry in named if entry.default), None)
    if not install.indexes:  # an install that names none takes what the machine is configured for
        default = catalog.default_index
    urls = {name: entry.url_for(version or "") for name, entry in named if not entry.default}
    if version is None:  # a URL per release cannot list releases
        urls = {name: url for name, url in urls.items() if "{vllm}" not in catalog.indexes[name].url}
    if settings.pip_extra_index_url is not None:
        given = settings.pip_extra_index_url.split()
        urls = {f"pip_extra_index_url[{n}]": url for n, url in enumerate(given)}
    return index.Sources(urls, default)


def _wanted(catalog: Catalog, package: str, vllm: str, omni: str | None) -> list[str]:
    """What a set is resolved from: vLLM, and vllm-omni with it for an omni recipe's image."""
    wanted = [f"{package}=={vllm}"]
    if omni is not None and catalog.omni is not None:
        wanted.append(f"{catalog.omni.package}=={omni}")
    return wanted


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
    catalog: Catalog,
    install: Install,
    version: str,
    platform: str,
    settings: BuildSettings,
    omni: str | None = None,
) -> tuple[LockedSet, str | None]:
    sources = _sources(catalog, install, platform, version, settings)
    base = LockedSet(
        package=install.package,
        vllm=version,
        omni=omni,
        platform=platform,
        accelerator=install.accelerator,
        python=install.python or "",
        indexes=sources.urls,
    )
    for name, url in sources.urls.items():
        why = index.unreachable(url)
        if why is not None:
            entry = catalog.indexes.get(name)
            unreachable = (
                f"not resolvable here: the index {name} ({url}) cannot be reached from this machine ({why}); "
                f"a machine that reaches it gets this set from `factory lock`"
                + (f" (source: {entry.source})" if entry else "")
            )
            return base.model_copy(update={"unresolvable": unreachable, "unreachable_index": name}), None
    try:
        compiled = index.compile_set(
            _wanted(catalog, install.package, version, omni), platform, install.python or "",
            install.remove_packages, settings.find_links if install.local_wheels else None, sources,
        )  # fmt: skip
    except index.IndexUnavailable as exc:
        return base.model_copy(update={"unresolvable": str(exc)}), None
    text = compiled.text
    base = base.model_copy(update={"served": compiled.served})
    cuda = cuda_version(text) if install.accelerator == "cuda" else None
    torch = next(
        (line.split("==")[1].split()[0] for line in text.splitlines() if line.startswith("torch==")), None
    )
    set_aside = [u.index for u in install.indexes if u.applies_to(platform)]
    set_aside = [n for n in set_aside if not catalog.indexes[n].default and n not in sources.urls]
    if install.accelerator == "cuda" and cuda is None:
        why = (
            f"torch {torch} for {platform} from {', '.join(sorted(set(compiled.served.values())))} "
            "has no CUDA build (no nvidia-cuda-runtime in its set): name PyTorch's CUDA index for this "
            "platform in the install's indexes"
            + (
                f" (it names {', '.join(set_aside)}, which the pip_extra_index_url setting replaced here)"
                if set_aside
                else ""
            )
        )
        return base.model_copy(update={"unresolvable": why, "torch": torch}), None
    if install.accelerator == "cuda" and cuda not in install.base_images:
        why = f"torch {torch} is built for CUDA {cuda}, and the catalog has no base image for it"
        return base.model_copy(update={"unresolvable": why, "torch": torch, "cuda": cuda}), None
    key = set_key(install.package, version, platform, install.accelerator, install.python or "", omni)
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
    default = project.catalog.default_index
    for platform in sorted(platforms):
        key = uv_key(project.catalog.uv, platform)
        kept = previous.sets.get(key)
        if kept is not None and _readable(project, kept) and kept.served:
            sets[key], texts[f"{key}.txt"] = kept, set_text(project.lock_path, str(kept.requirements))
            continue
        if kept is not None and _readable(project, kept):
            report(f"recording the index of each file of {key}")
            sets[key] = _record_indexes(project, kept, None, settings)
            texts[f"{key}.txt"] = set_text(project.lock_path, str(kept.requirements))
            continue
        report(f"resolving {key} with uv")
        compiled = index.compile_set(
            [f"uv=={project.catalog.uv}"], platform, UV_PYTHON, [], None, index.Sources(default=default)
        )
        text = compiled.text
        sets[key] = LockedSet(package="uv", vllm=project.catalog.uv, platform=platform, accelerator="tool",
                              python=UV_PYTHON, requirements=f"sets/{key}.txt", served=compiled.served,
                              digest=hashlib.sha256(text.encode()).hexdigest())  # fmt: skip
        texts[f"{key}.txt"] = text
    return sets, texts
