"""The Mooncake layer of KV-store images, locked: for each locked vLLM set a KV-store image can run on, the
wheel its vendor takes (a kv_store file's install line for the vendor's brand) resolved with uv against that
set's pins, so that every package the two share keeps the vLLM set's version and the layer holds only what
the vLLM set lacks (the wheel, msgpack). Pins and hashes, like every set; kept while nothing it was resolved
from moved.

Which sets: every pip set of a hardware whose vendor has a Mooncake wheel (the catalog's `mooncake`) on a
vLLM release the kv_store files accept (their min_vllm_version), omni sets aside (no KV store renders for
them). A vendor image (ROCm) is not a locked set: its packages are the vendor's. Its layer is the wheel and
its dependencies resolved on their own for the images' platform and Python, one per vendor-image install;
the image's build installs only what the image lacks and checks the rest against what it holds
(factory/image_files/fit_layer.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from factory.base.reporter import Reporter
from factory.base.settings import BuildSettings
from factory.catalog.schema import Catalog, Install
from factory.lock import index
from factory.lock.resolve import install_sources
from factory.lockfile.model import (
    Lock,
    LockedSet,
    MooncakeSet,
    canonical_name,
    mooncake_key,
    requirement_blocks,
    vendor_image_key,
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


@dataclass(frozen=True)
class Wanted:
    """One Mooncake layer a KV-store image needs: resolved against a locked vLLM set's pins (`on` its key),
    or on its own for an install's vendor images (`on` their vendor_image_key)."""

    requirement: str
    on: str
    install: str
    platform: str
    python: str
    vllm: str | None = None  # the vLLM set's release (an index URL may name it); None for vendor images
    vendor_image: bool = False
    torch: str | None = None  # the set's torch release (where arm64's CUDA torch comes from depends on it)


def wanted(catalog: Catalog, stores: dict[str, KvStore], sets: dict[str, LockedSet]) -> dict[str, Wanted]:
    """mooncake_key -> the layer, for every Mooncake layer a KV-store image needs."""
    least = floor(stores.values())
    if least is None:
        return {}
    found: dict[str, Wanted] = {}
    for hardware in catalog.hardware.values():
        vendor = catalog.vendors[hardware.vendor]
        install = catalog.installs[hardware.install]
        if vendor.mooncake is None:
            continue
        requirement = wheel_requirement(stores.values(), vendor.mooncake.install)
        if requirement is None:
            continue
        if install.kind == "vendor-image":
            for python in vendor_pythons(install):
                on = vendor_image_key(hardware.install, hardware.platform, python)
                layer = Wanted(
                    requirement, on, hardware.install, hardware.platform, python, vendor_image=True
                )
                found[mooncake_key(_name(requirement), on)] = layer
            continue
        for key, locked in sets.items():
            same = (locked.package, locked.accelerator, locked.platform) == (
                install.package,
                install.accelerator,
                hardware.platform,
            )
            if same and locked.omni is None and locked.requirements and _runs_at_least(locked.vllm, least):
                layer = Wanted(
                    requirement,
                    key,
                    hardware.install,
                    locked.platform,
                    locked.python,
                    locked.vllm,
                    torch=locked.torch,
                )
                found[mooncake_key(_name(requirement), key)] = layer
    return dict(sorted(found.items()))


def vendor_pythons(install: Install) -> list[str]:
    """The Pythons an install's vendor images run vLLM on: each cited image's, and the install's own (what an
    image a recipe names is taken to run; its build checks it)."""
    found = {image.python for image in install.images}
    return sorted(found | ({install.python} if install.python else set()))


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
    todo: dict[str, tuple[Wanted, str | None]] = {}  # resolved all at once, after the loop
    old = previous.mooncake or {}
    for key, layer in wanted(catalog, stores, sets).items():
        vllm_text = None if layer.vendor_image else texts.get(f"{layer.on}.txt")
        if vllm_text is None and not layer.vendor_image:
            continue
        kept = old.get(key)
        if kept is not None and kept.requirement == layer.requirement and kept.on == layer.on:
            kept_text = _kept_text(lock_path, kept)
            if kept_text is not None or kept.unresolvable:
                layers[key] = kept
                if kept_text is not None:
                    files[f"{key}.txt"] = kept_text
                continue
        report(f"resolving {layer.requirement} for {layer.on} with uv")
        todo[key] = (layer, vllm_text)
        layers[key] = layer_base(layer)  # its place in the lock; the layer resolved replaces it below
    resolved = index.each_at_once(
        lambda job: _resolve(catalog, job[0], job[1], settings), list(todo.values())
    )
    for key, (layer_set, text) in zip(todo, resolved, strict=True):
        layers[key] = layer_set  # in the place the loop gave it
        if text is not None:
            files[f"{key}.txt"] = text
    return layers, files


def _kept_text(lock_path: Path, kept: MooncakeSet) -> str | None:
    """A kept layer's file as the previous lock wrote it; None when it is gone (then it is resolved again)."""
    if kept.requirements is None or not (lock_path.parent / kept.requirements).is_file():
        return None
    return set_text(lock_path, kept.requirements, kept.digest)


def layer_base(layer: Wanted) -> MooncakeSet:
    """What a layer's record holds before it is resolved."""
    return MooncakeSet(requirement=layer.requirement, on=layer.on, vendor_image=layer.vendor_image or None)


def _resolve(
    catalog: Catalog, layer: Wanted, vllm_text: str | None, settings: BuildSettings
) -> tuple[MooncakeSet, str | None]:
    """The layer resolved with uv: against the vLLM set's pins (`vllm_text`), keeping only what the set lacks;
    or, for vendor images (no `vllm_text`), the wheel and all it needs."""
    base = layer_base(layer)
    install = catalog.installs[layer.install]
    sources = install_sources(catalog, install, layer.platform, layer.vllm, settings, layer.torch)
    try:
        compiled = index.compile_set(
            [layer.requirement], layer.platform, layer.python, [], None, sources, pins=vllm_text
        )
    except (index.RequirementNotServed, index.IndexUnavailable) as exc:
        return base.model_copy(update={"unresolvable": str(exc)}), None
    present = {canonical_name(name) for name, _ in requirement_blocks(vllm_text or "")}
    blocks = requirement_blocks(compiled.text)
    kept = [block for name, block in blocks if canonical_name(name) not in present]
    wheel = _name(layer.requirement)
    pinned = [block.split("==", 1)[1].split()[0] for name, block in blocks if canonical_name(name) == wheel]
    how = (
        "resolved on its own: the build installs what the vendor image lacks and checks the rest against it"
        if layer.vendor_image
        else "resolved against that set's pins\n# (what it shares with the set keeps the set's version; only "
        "what the set lacks is here)"
    )
    text = f"# The Mooncake layer of KV-store images on {layer.on}: {layer.requirement}, {how}.\n"
    text += "\n".join(kept) + "\n"
    key = mooncake_key(wheel, layer.on)
    return base.model_copy(
        update={
            "version": pinned[0] if pinned else None,
            "requirements": f"sets/{key}.txt",
            "digest": hashlib.sha256(text.encode()).hexdigest(),
        }
    ), text
