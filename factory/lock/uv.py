"""uv itself, hash-locked per platform: what every image's install step bootstraps before it installs the
locked set."""

from __future__ import annotations

import hashlib

from factory.base.reporter import Reporter
from factory.base.settings import BuildSettings
from factory.lock import index
from factory.lock.sets import LockPlace, readable, record_indexes
from factory.lockfile.model import UV_PYTHON, Lock, LockedSet, uv_key
from factory.lockfile.store import set_text


def uv_sets(
    place: LockPlace, previous: Lock, settings: BuildSettings, report: Reporter
) -> tuple[dict[str, LockedSet], dict[str, str]]:
    """uv itself, hash-locked per platform: what an image's install step bootstraps."""
    sets, texts = {}, {}
    platforms = {hardware.platform for hardware in place.catalog.hardware.values()}
    todo = []  # the platforms whose uv set is resolved, all at once
    for platform in sorted(platforms):
        key = uv_key(place.catalog.uv, platform)
        kept = previous.sets.get(key)
        if kept is not None and readable(place, kept) and kept.served:
            sets[key], texts[f"{key}.txt"] = kept, set_text(place.lock_path, str(kept.requirements))
            continue
        if kept is not None and readable(place, kept):
            report(f"recording the index of each file of {key}")
            sets[key] = record_indexes(place, kept, None, settings)
            texts[f"{key}.txt"] = set_text(place.lock_path, str(kept.requirements))
            continue
        report(f"resolving {key} with uv")
        todo.append(platform)
    resolved = index.each_at_once(lambda platform: _resolved(place, platform), todo)
    for platform, (locked, text) in zip(todo, resolved, strict=True):
        key = uv_key(place.catalog.uv, platform)
        sets[key], texts[f"{key}.txt"] = locked, text
    order = [uv_key(place.catalog.uv, platform) for platform in sorted(platforms)]  # as the lock had them
    return {key: sets[key] for key in order}, texts  # (the files' order is nobody's)


def _resolved(place: LockPlace, platform: str) -> tuple[LockedSet, str]:
    """uv's own set for one platform, resolved with uv."""
    compiled = index.compile_set(
        [f"uv=={place.catalog.uv}"],
        platform,
        UV_PYTHON,
        [],
        None,
        index.Sources(default=place.catalog.default_index),
    )
    text = compiled.text
    locked = LockedSet(package="uv", vllm=place.catalog.uv, platform=platform, accelerator="tool",
                       python=UV_PYTHON, requirements=f"sets/{uv_key(place.catalog.uv, platform)}.txt",
                       served=compiled.served, digest=hashlib.sha256(text.encode()).hexdigest())  # fmt: skip
    return locked, text
