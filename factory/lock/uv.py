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
    default = place.catalog.default_index
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
        compiled = index.compile_set(
            [f"uv=={place.catalog.uv}"], platform, UV_PYTHON, [], None, index.Sources(default=default)
        )
        text = compiled.text
        sets[key] = LockedSet(package="uv", vllm=place.catalog.uv, platform=platform, accelerator="tool",
                              python=UV_PYTHON, requirements=f"sets/{key}.txt", served=compiled.served,
                              digest=hashlib.sha256(text.encode()).hexdigest())  # fmt: skip
        texts[f"{key}.txt"] = text
    return sets, texts
