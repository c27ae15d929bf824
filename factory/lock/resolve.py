"""Resolving one install's set for one release and platform with uv: the indexes it is resolved against,
a stand-in where the catalog allows one, and why a set cannot make an image (an index out of reach, a
torch that is no CUDA build, a CUDA with no base image)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from factory.base.settings import BuildSettings
from factory.catalog.schema import Catalog, Install
from factory.lock import index
from factory.lockfile.model import LockedSet, cuda_version, heavy_packages, set_key


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


def wanted_packages(catalog: Catalog, package: str, vllm: str, omni: str | None) -> list[str]:
    """What a set is resolved from: vLLM, and vllm-omni with it for an omni recipe's image."""
    wanted = [f"{package}=={vllm}"]
    if omni is not None and catalog.omni is not None:
        wanted.append(f"{catalog.omni.package}=={omni}")
    return wanted


def resolve_set(
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
    unreachable = _unreachable(catalog, sources)
    if unreachable is not None:
        return base.model_copy(update=unreachable), None
    find_links = settings.find_links if install.local_wheels else None
    wanted = wanted_packages(catalog, install.package, version, omni)
    try:
        compiled, base = _compiled(install, wanted, platform, find_links, sources, base)
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
    refused = _cuda_refusal(catalog, install, platform, sources, compiled.served, torch, cuda)
    if refused is not None:
        return base.model_copy(update={"unresolvable": refused, "torch": torch, "cuda": cuda}), None
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
    catalog: Catalog,
    install: Install,
    platform: str,
    sources: index.Sources,
    served: dict[str, str],
    torch: str | None,
    cuda: str | None,
) -> str | None:
    """Why a CUDA install's set cannot make an image: its torch is no CUDA build, or the catalog has no base
    image for that CUDA."""
    if install.accelerator != "cuda":
        return None
    if cuda is None:
        set_aside = [u.index for u in install.indexes if u.applies_to(platform)]
        set_aside = [n for n in set_aside if not catalog.indexes[n].default and n not in sources.urls]
        return (
            f"torch {torch} for {platform} from {', '.join(sorted(set(served.values())))} "
            "has no CUDA build (no nvidia-cuda-runtime in its set): name PyTorch's CUDA index for this "
            "platform in the install's indexes"
            + (
                f" (it names {', '.join(set_aside)}, which the pip_extra_index_url setting replaced here)"
                if set_aside
                else ""
            )
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
