"""Resolving one install's set for one release and platform with uv: the indexes it is resolved against,
a stand-in where the catalog allows one, and why a set cannot make an image (an index out of reach, a
torch that is no CUDA build, a CUDA with no base image)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from factory.base.settings import BuildSettings
from factory.catalog.schema import Catalog, Install
from factory.lock import index
from factory.lockfile.model import NO_CUDA_TORCH, LockedSet, cuda_version, heavy_packages, set_key


def install_sources(
    catalog: Catalog,
    install: Install,
    platform: str | None,
    version: str | None,
    settings: BuildSettings,
    torch: str | None = None,
) -> index.Sources:
    """The indexes an install's set is resolved against on a platform (None: the ones every platform
    uses, for listing releases), with those the catalog's torch source for `torch` adds. The
    pip_extra_index_url setting replaces every index but the default."""
    if platform is None:
        named = [(u.index, catalog.indexes[u.index]) for u in install.indexes if not u.platforms]
    else:
        named = catalog.install_indexes(install, platform, torch)
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


def wanted_packages(catalog: Catalog, package: str, vllm: str, omni: str | None) -> list[str]:
    """What a set is resolved from: vLLM, and vllm-omni with it for an omni recipe's image."""
    wanted = [f"{package}=={vllm}"]
    if omni is not None and catalog.omni is not None:
        wanted.append(f"{catalog.omni.package}=={omni}")
    return wanted


@dataclass(frozen=True)
class _Request:
    """One set to resolve: the install, what is wanted of it, for which platform, with which settings."""

    catalog: Catalog
    install: Install
    wanted: list[str]
    platform: str
    settings: BuildSettings


def resolve_set(
    catalog: Catalog,
    install: Install,
    version: str,
    platform: str,
    settings: BuildSettings,
    omni: str | None = None,
) -> tuple[LockedSet, str | None]:
    """The set of one release on one platform with its text, or (the text None) why it cannot be resolved.
    Where the catalog's torch source for the torch the set pins names other indexes (arm64 before torch
    2.11: PyTorch's CUDA index), the set is resolved again with them."""
    sources = install_sources(catalog, install, platform, version, settings)
    base = LockedSet(
        package=install.package, vllm=version, omni=omni, platform=platform,
        accelerator=install.accelerator, python=install.python or "", indexes=sources.urls,
    )  # fmt: skip
    request = _Request(catalog, install, wanted_packages(catalog, install.package, version, omni), platform,
                       settings)  # fmt: skip
    found = _resolved(request, sources, base)
    if isinstance(found, LockedSet):
        return found, None
    compiled, base = found
    torch = _torch_of(compiled.text)
    source = install.torch_source(platform, torch)
    if source is not None and source.indexes:
        wanted = install_sources(catalog, install, platform, version, settings, torch)
        if wanted != sources:  # this torch comes from other indexes: resolve with them
            base = base.model_copy(update={"indexes": wanted.urls})
            found = _resolved(request, wanted, base, source.describe())
            if isinstance(found, LockedSet):
                return found, None
            (compiled, base), sources = found, wanted
    return _checked(request, compiled, base, sources)


def _resolved(
    request: _Request, sources: index.Sources, base: LockedSet, why_these: str | None = None
) -> LockedSet | tuple[index.Compiled, LockedSet]:
    """What uv resolves from these indexes, or the set recorded as unresolvable (an index that does not
    answer here: with `why_these`, why the catalog names it)."""
    unreachable = _unreachable(request.catalog, sources)
    if unreachable is not None:
        if why_these is not None:
            unreachable["unresolvable"] += f"; {why_these}" + _first_release(request)
        return base.model_copy(update=unreachable)
    install = request.install
    find_links = request.settings.find_links if install.local_wheels else None
    try:
        compiled, base = _compiled(install, request.wanted, request.platform, find_links, sources, base)
    except index.RequirementNotServed as exc:
        return base.model_copy(update={"unresolvable": str(exc), "missing": exc.requirement})
    except index.IndexUnavailable as exc:
        return base.model_copy(update={"unresolvable": str(exc)})
    return compiled, base.model_copy(update={"served": compiled.served})


def _checked(
    request: _Request, compiled: index.Compiled, base: LockedSet, sources: index.Sources
) -> tuple[LockedSet, str | None]:
    """The resolved set, unless it cannot make an image (its torch is no CUDA build, or the catalog has no
    base image for its CUDA): then the set records why."""
    install, text = request.install, compiled.text
    cuda = cuda_version(text) if install.accelerator == "cuda" else None
    torch = _torch_of(text)
    refused = _cuda_refusal(request, sources, compiled.served, torch, cuda)
    if refused is not None:
        cause = NO_CUDA_TORCH if cuda is None else None
        update = {"unresolvable": refused, "torch": torch, "cuda": cuda, "cause": cause}
        return base.model_copy(update=update), None
    key = set_key(install.package, base.vllm, request.platform, install.accelerator, install.python or "",
                  base.omni)  # fmt: skip
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


def _torch_of(text: str) -> str | None:
    """The torch release a requirements file pins."""
    pins = (line.split("==")[1].split()[0] for line in text.splitlines() if line.startswith("torch=="))
    return next(pins, None)


def _first_release(request: _Request) -> str:
    """Where the catalog knows it: the first vLLM release whose set the package index serves alone here."""
    first = request.install.first_index_release(request.platform)
    if first is None:
        return ""
    return (
        f"; vLLM {first} is the first release whose {request.platform} CUDA set the package index serves"
        " alone"
    )


def _unreachable(catalog: Catalog, sources: index.Sources) -> dict[str, str] | None:
    """Why a set cannot be resolved here: one of its indexes does not answer (and which)."""
    for name, url in sources.urls.items():
        why = index.unreachable(url)
        if why is not None:
            entry = catalog.indexes.get(name)
            unreachable = (
                f"not resolvable here: the index {name} ({url}) cannot be reached from this machine ({why}); "
                f"a machine that reaches it gets this set from `factory lock`"
                + (f" (source: {entry.source})" if entry else "")
            )
            return {"unresolvable": unreachable, "unreachable_index": name}
    return None


def _compiled(
    install: Install,
    wanted: list[str],
    platform: str,
    find_links: Path | None,
    sources: index.Sources,
    base: LockedSet,
) -> tuple[index.Compiled, LockedSet]:
    """The set uv resolves; where a requirement no index serves has a stand-in the catalog allows (a +cpu
    torch), resolved again with it, and the set records it."""
    python = install.python or ""
    try:
        return index.compile_set(wanted, platform, python, install.remove_packages, find_links, sources), base
    except index.RequirementNotServed as exc:
        stand_in = _stand_in(install, exc.requirement)
        if stand_in is None:
            raise
        compiled = index.compile_set(
            wanted, platform, python, install.remove_packages, find_links, sources, overrides=[stand_in]
        )
        return compiled, base.model_copy(update={"stand_in": f"{stand_in} for {exc.requirement}"})


def _cuda_refusal(
    request: _Request, sources: index.Sources, served: dict[str, str], torch: str | None, cuda: str | None
) -> str | None:
    """Why a CUDA install's set cannot make an image: its torch is no CUDA build (no cuda-toolkit or
    nvidia-cuda-runtime pin names a CUDA release), or the catalog has no base image for that CUDA."""
    install, platform = request.install, request.platform
    if install.accelerator != "cuda":
        return None
    if cuda is None:
        source = install.torch_source(platform, torch)
        named = [name for name, _ in request.catalog.install_indexes(install, platform, torch)]
        set_aside = [n for n in named if not request.catalog.indexes[n].default and n not in sources.urls]
        return (
            f"torch {torch} for {platform} from {', '.join(sorted(set(served.values())))} "
            "has no CUDA build (no cuda-toolkit or nvidia-cuda-runtime in its set)"
            + (f": {source.describe()}" if source is not None else "")
            + (
                f"; the catalog takes it from {', '.join(set_aside)}, which the pip_extra_index_url setting"
                " replaced here"
                if set_aside
                else ": name PyTorch's CUDA index for this torch in the install's torch_sources"
                if source is None
                else ""
            )
            + _first_release(request)
        )
    if cuda not in install.base_images:
        return f"torch {torch} is built for CUDA {cuda}, and the catalog has no base image for it"
    return None


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
