"""The locked sets of one `factory lock` run: each (package, release, platform, accelerator, Python) resolved
once with hashes, kept from the previous lock while nothing asks to move it, or recorded with why it
cannot be resolved here. Choosing a release asks for its sets here, so a release that cannot be installed
is known before it is chosen, and every set is resolved at most once per run."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from factory.base.reporter import Reporter
from factory.base.settings import BuildSettings
from factory.catalog.schema import Catalog, Install
from factory.lock import index
from factory.lock.omni import omni_refusal
from factory.lockfile.model import (
    OMNI,
    UV_PYTHON,
    Lock,
    LockedSet,
    cuda_version,
    heavy_packages,
    set_key,
    uv_key,
)
from factory.lockfile.store import set_text


@dataclass
class SetCounts:
    resolved: int = 0
    kept: int = 0
    unresolvable: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class LockPlace:
    """What locking reads besides the recipes: the catalog (installs, indexes) and where the lock lives."""

    catalog: Catalog
    lock_path: Path


@dataclass
class SetBook:
    """Every set this run has settled, by key, with its requirements file's text (None: no file)."""

    place: LockPlace
    previous: Lock
    settings: BuildSettings
    upgrading: bool  # `--upgrade` of everything: no set is kept
    same_inputs: bool  # the recipes and the catalog are those the previous lock was made from
    report: Reporter
    counts: SetCounts = field(default_factory=SetCounts)
    settled: dict[str, tuple[LockedSet, str | None]] = field(default_factory=dict)

    def get(
        self, install: Install, version: str, platform: str, omni: str | None, fresh: bool = False
    ) -> LockedSet:
        """The set, settled once per run; `fresh`: resolved again rather than kept from the previous lock."""
        key = set_key(install.package, version, platform, install.accelerator, install.python or "", omni)
        if key not in self.settled:
            self.settled[key] = self._settle(key, install, version, platform, omni, fresh)
        return self.settled[key][0]

    def text(self, key: str) -> str | None:
        return self.settled[key][1]

    def _settle(
        self, key: str, install: Install, version: str, platform: str, omni: str | None, fresh: bool
    ) -> tuple[LockedSet, str | None]:
        place = self.place
        refused = omni_refusal(place.catalog, install, platform, omni) if omni else None
        if refused is not None:  # no omni set can exist there: say why with the evidence, resolve nothing
            return LockedSet(
                package=install.package, vllm=version, omni=omni, platform=platform, cause=OMNI,
                accelerator=install.accelerator, python=install.python or "", unresolvable=refused,
            ), None  # fmt: skip
        kept = None if fresh or self.upgrading else self.previous.sets.get(key)
        local = self.settings.find_links if install.local_wheels else None
        if kept is not None and _local_wheels_gone(kept, local):
            self.report(f"{key}: a wheel the find_links folder served is no longer there: resolving it again")
            kept = None
        if kept is not None and _keep(place, kept, self.same_inputs):
            self.counts.kept += 1
            if kept.missing is None and missing_of(kept) is not None:  # recorded before `missing` existed
                kept = kept.model_copy(update={"missing": missing_of(kept)})
            return kept, set_text(place.lock_path, kept.requirements) if kept.requirements else None
        if kept is not None and kept.requirements and _readable(place, kept):
            self.report(f"recording the index of each file of {key}")
            self.counts.kept += 1
            return _record_indexes(place, kept, install, self.settings), set_text(
                place.lock_path, kept.requirements
            )
        self.report(f"resolving {key} with uv")
        locked, text = _resolve_set(place.catalog, install, version, platform, self.settings, omni)
        if locked.unresolvable:
            self.counts.unresolvable.append(f"{key}: {locked.unresolvable}")
        self.counts.resolved += 1
        return locked, text


def _local_wheels_gone(kept: LockedSet, find_links: Path | None) -> bool:
    """Whether a package the set took from the find_links folder has no wheel there any more (a machine
    without the +cpu torch): its file would fail every build, so the set is resolved again."""
    local = [package for package, where in kept.served.items() if where == index.FIND_LINKS]
    if not local:
        return False
    wheels = find_links.glob("*.whl") if find_links else []
    there = {canonicalize_name(wheel.name.split("-")[0]) for wheel in wheels}
    return any(canonicalize_name(package) not in there for package in local)


def missing_of(locked: LockedSet) -> str | None:
    """The requirement no index serves, when that is why the set cannot be resolved."""
    return locked.missing or (index.not_served(locked.unresolvable) if locked.unresolvable else None)


def _record_indexes(
    place: LockPlace, kept: LockedSet, install: Install | None, settings: BuildSettings
) -> LockedSet:
    """A set locked before the lock recorded indexes keeps its file: uv resolves it once more with its own
    pins as constraints, and only which index served each package is taken from that."""
    if install is None:
        sources = index.Sources(default=place.catalog.default_index)
    else:
        sources = install_sources(place.catalog, install, kept.platform, kept.vllm, settings)
    text = set_text(place.lock_path, str(kept.requirements))
    exclude = install.remove_packages if install else []
    compiled = index.compile_set(
        _wanted(place.catalog, kept.package, kept.vllm, kept.omni), kept.platform, kept.python, exclude,
        settings.find_links if install and install.local_wheels else None, sources, pins=text,
    )  # fmt: skip
    return kept.model_copy(update={"served": compiled.served, "indexes": sources.urls})


def _keep(place: LockPlace, kept: LockedSet, same_inputs: bool) -> bool:
    """A resolved set stays while its file is there and it records its indexes. One whose index could not
    be reached is tried again once that index answers here (an unreachable one fails in milliseconds);
    one that could not be resolved otherwise, when the recipes or the catalog changed."""
    if kept.unreachable_index is not None:
        return any(index.unreachable(url) for url in kept.indexes.values())
    if kept.unresolvable:
        return same_inputs
    return _readable(place, kept) and bool(kept.served)


def install_sources(
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


def _readable(place: LockPlace, kept: LockedSet) -> bool:
    return bool(kept.requirements) and (place.lock_path.parent / str(kept.requirements)).is_file()


def _resolve_set(
    catalog: Catalog,
    install: Install,
    version: str,
    platform: str,
    settings: BuildSettings,
    omni: str | None = None,
) -> tuple[LockedSet, str | None]:
    sources = install_sources(catalog, install, platform, version, settings)
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
    wanted = _wanted(catalog, install.package, version, omni)
    find_links = settings.find_links if install.local_wheels else None
    try:
        try:
            compiled = index.compile_set(
                wanted, platform, install.python or "", install.remove_packages, find_links, sources
            )
        except index.RequirementNotServed as exc:
            stand_in = _stand_in(install, exc.requirement)
            if stand_in is None:
                raise
            compiled = index.compile_set(
                wanted, platform, install.python or "", install.remove_packages, find_links, sources,
                overrides=[stand_in],
            )  # fmt: skip
            base = base.model_copy(update={"stand_in": f"{stand_in} for {exc.requirement}"})
    except index.RequirementNotServed as exc:
        return base.model_copy(update={"unresolvable": str(exc), "missing": exc.requirement}), None
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


def _stand_in(install: Install, missing: str) -> str | None:
    """The requirement that stands in for a missing local build (`torch==2.13.0+cpu` -> `torch==2.13.0`):
    the same release's index build, when the catalog allows it for that package."""
    try:
        requirement = Requirement(missing)
    except InvalidRequirement:
        return None
    pins = [spec.version for spec in requirement.specifier if spec.operator == "=="]
    allowed = {canonicalize_name(s.package) for s in install.stand_ins}
    if canonicalize_name(requirement.name) not in allowed or len(pins) != 1 or "+" not in pins[0]:
        return None
    return f"{requirement.name}=={pins[0].split('+')[0]}"


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
        if kept is not None and _readable(place, kept) and kept.served:
            sets[key], texts[f"{key}.txt"] = kept, set_text(place.lock_path, str(kept.requirements))
            continue
        if kept is not None and _readable(place, kept):
            report(f"recording the index of each file of {key}")
            sets[key] = _record_indexes(place, kept, None, settings)
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
