"""The Mooncake layer of KV-store images, locked: for each locked vLLM set a KV-store image can run on, the
wheel its vendor takes (a kv_store file's install line for the vendor's brand) resolved with uv against that
set's pins, so that every package the two share keeps the vLLM set's version and the layer holds only what
the vLLM set lacks (the wheel, msgpack). Pins and hashes, like every set; kept while nothing it was resolved
from moved.

Which sets: every pip set of a hardware whose vendor has a Mooncake wheel (the catalog's `mooncake`) on a
vLLM release the kv_store files accept (their min_vllm_version), omni sets aside (no KV store renders for
them). A vendor image (ROCm) is not a locked set, so its KV-store images are not buildable here.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from factory.base.reporter import Reporter
from factory.base.settings import BuildSettings
from factory.catalog.schema import Catalog
from factory.lock import index
from factory.lock.resolve import install_sources
from factory.lockfile.model import (
    Lock,
    LockedSet,
    MooncakeSet,
    canonical_name,
    mooncake_key,
    requirement_blocks,
)
from factory.lockfile.store import set_text
from factory.recipes.kv_checks import shell_words
from factory.recipes.tree_schema import KvStore


def install_requirements(line: str) -> list[str]:
    """The requirements a kv_store file's install line installs (`uv pip install 'mooncake...>=0.3.10'`):
    every word after `install` that is no option."""
    words = shell_words(line)
    after = words[words.index("install") + 1 :] if "install" in words else []
    return [word for word in after if not word.startswith("-")]


def wheel_requirement(stores: Iterable[KvStore], brand: str) -> str | None:
    """The Mooncake requirement the stores ask for on a brand (`nvidia`, `amd`); None when none asks, or when
    they ask for different ones (a KV-store image holds one wheel)."""
    found: set[str] = set()
    for store in stores:
        install = store.vllm.install
        line = install.get(brand) if isinstance(install, dict) else install
        if line:
            found.update(install_requirements(line))
    return found.pop() if len(found) == 1 else None


def floor(stores: Iterable[KvStore]) -> Version | None:
    """The oldest vLLM release a KV store accepts: the lowest of the kv_store files' min_vllm_version."""
    versions = []
    for store in stores:
        try:
            versions.append(Version(store.min_vllm_version or "0"))
        except InvalidVersion:
            continue
    return min(versions) if versions else None


def _runs_at_least(vllm: str, least: Version) -> bool:
    try:
        return Version(vllm) >= least
    except InvalidVersion:
        return False


def wanted(
    catalog: Catalog, stores: dict[str, KvStore], sets: dict[str, LockedSet]
) -> dict[str, tuple[str, str, str]]:
    """mooncake_key -> (requirement, the vLLM set's key, its install) for every Mooncake layer a KV-store
    image needs."""
    least = floor(stores.values())
    if least is None:
        return {}
    found: dict[str, tuple[str, str, str]] = {}
    for hardware in catalog.hardware.values():
        vendor = catalog.vendors[hardware.vendor]
        install = catalog.installs[hardware.install]
        if vendor.mooncake is None or install.kind != "pip":
            continue
        requirement = wheel_requirement(stores.values(), vendor.mooncake.install)
        if requirement is None:
            continue
        for key, locked in sets.items():
            same = (locked.package, locked.accelerator, locked.platform) == (
                install.package,
                install.accelerator,
                hardware.platform,
            )
            if same and locked.omni is None and locked.requirements and _runs_at_least(locked.vllm, least):
                found[mooncake_key(_name(requirement), key)] = (requirement, key, hardware.install)
    return dict(sorted(found.items()))


def _name(requirement: str) -> str:
    try:
        return canonical_name(Requirement(requirement).name)
    except InvalidRequirement:
        return canonical_name(requirement.split("=")[0].split(">")[0].split("<")[0])


def lock_mooncake(
    catalog: Catalog,
    stores: dict[str, KvStore],
    sets: dict[str, LockedSet],
    texts: dict[str, str],
    previous: Lock,
    lock_path: Path,
    settings: BuildSettings,
    report: Reporter,
) -> tuple[dict[str, MooncakeSet], dict[str, str]]:
    """Every Mooncake layer needed, kept from the previous lock when it was resolved for the same requirement
    on the same vLLM set, else resolved; and the files to write (under the lock's sets/)."""
    layers: dict[str, MooncakeSet] = {}
    files: dict[str, str] = {}
    old = previous.mooncake or {}
    for key, (requirement, on, install) in wanted(catalog, stores, sets).items():
        vllm_text = texts.get(f"{on}.txt")
        kept = old.get(key)
        if kept is not None and kept.requirement == requirement and kept.on == on and vllm_text is not None:
            kept_text = _kept_text(lock_path, kept)
            if kept_text is not None or kept.unresolvable:
                layers[key] = kept
                if kept_text is not None:
                    files[f"{key}.txt"] = kept_text
                continue
        if vllm_text is None:
            continue
        report(f"resolving {requirement} against {on} with uv")
        layers[key], text = _resolve(catalog, install, requirement, (on, sets[on], vllm_text), settings)
        if text is not None:
            files[f"{key}.txt"] = text
    return layers, files


def _kept_text(lock_path: Path, kept: MooncakeSet) -> str | None:
    """A kept layer's file as the previous lock wrote it; None when it is gone (then it is resolved again)."""
    if kept.requirements is None or not (lock_path.parent / kept.requirements).is_file():
        return None
    return set_text(lock_path, kept.requirements, kept.digest)


def _resolve(
    catalog: Catalog,
    install_name: str,
    requirement: str,
    vllm_set: tuple[str, LockedSet, str],  # its key, its record, its file
    settings: BuildSettings,
) -> tuple[MooncakeSet, str | None]:
    on, locked, vllm_text = vllm_set
    base = MooncakeSet(requirement=requirement, on=on)
    install = catalog.installs[install_name]
    sources = install_sources(catalog, install, locked.platform, locked.vllm, settings, locked.torch)
    try:
        compiled = index.compile_set(
            [requirement], locked.platform, locked.python, [], None, sources, pins=vllm_text
        )
    except (index.RequirementNotServed, index.IndexUnavailable) as exc:
        return base.model_copy(update={"unresolvable": str(exc)}), None
    present = {canonical_name(name) for name, _ in requirement_blocks(vllm_text)}
    blocks = requirement_blocks(compiled.text)
    layer = [block for name, block in blocks if canonical_name(name) not in present]
    wheel = _name(requirement)
    pinned = [block.split("==", 1)[1].split()[0] for name, block in blocks if canonical_name(name) == wheel]
    version = pinned[0] if pinned else None
    text = (
        f"# The Mooncake layer of KV-store images on {on}: {requirement}, resolved against that set's pins\n"
        "# (what it shares with the set keeps the set's version; only what the set lacks is here).\n"
        + "\n".join(layer)
        + "\n"
    )
    key = mooncake_key(wheel, on)
    return base.model_copy(
        update={
            "version": version,
            "requirements": f"sets/{key}.txt",
            "digest": hashlib.sha256(text.encode()).hexdigest(),
        }
    ), text
