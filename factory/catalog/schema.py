"""Typed hardware catalog: per target its vendor, platform, GPU architecture, base image and install."""

from __future__ import annotations

from typing import Literal

from packaging.specifiers import SpecifierSet

from factory.base.models import Count, Strict
from factory.catalog.fleet import Fleet
from factory.catalog.platform import Platform
from factory.catalog.releases import (
    DeviationRule,
    KnownBadPin,
    OmniCatalog,
    OmniRefusal,
    OmniRelease,
    TorchSource,
)
from factory.catalog.serving import (
    ImageUser,
    Liveness,
    MooncakeProcess,
    MooncakeProcesses,
    PodRequests,
    RouterProcess,
    Secret,
    Server,
    Volume,
    Writable,
)
from factory.catalog.sourced import Sourced

__all__ = [
    "DeviationRule",
    "Fleet",
    "ImageUser",
    "KnownBadPin",
    "Liveness",
    "MooncakeProcess",
    "MooncakeProcesses",
    "OmniCatalog",
    "OmniRefusal",
    "OmniRelease",
    "PodRequests",
    "RouterProcess",
    "Secret",
    "Server",
    "TorchSource",
    "Volume",
    "Writable",
]


class ArchCoverage(Sourced):
    """Which GPU architectures the vLLM builds in a version range were compiled for."""

    vllm: str  # a PEP 440 specifier, e.g. "<0.13"
    archs: list[str]

    def covers_version(self, version: str) -> bool:
        return SpecifierSet(self.vllm).contains(version, prereleases=True)


class PublishedImage(Sourced):
    """A vendor-published image that already contains vLLM at exactly `vllm`."""

    vllm: str
    image: str
    python: str


class WheelsFrom(Sourced):
    """The first vLLM version a wheel index serves for this install."""

    version: str


class PackageIndex(Sourced):
    """A package index wheels come from (PEP 503 simple API). `{vllm}` in the URL stands for the release
    (vLLM's ROCm index has one folder per release)."""

    url: str
    # The machine's configured index (pip.conf, UV_INDEX_URL) stands in for this one: a PyPI mirror
    # behind a firewall serves what PyPI serves, so no flag names it.
    default: bool = False

    def url_for(self, vllm: str) -> str:
        return self.url.replace("{vllm}", vllm)


class IndexUse(Strict):
    """One index an install takes wheels from, on every platform or only on the ones named."""

    index: str  # a key of the catalog's indexes (the loader checks it)
    platforms: list[Platform] = []  # empty: every platform
    why: str | None = None

    def applies_to(self, platform: str) -> bool:
        return not self.platforms or platform in self.platforms


class StandIn(Strict):
    """A package whose index build of the same release stands in for a local build (`torch==2.13.0+cpu`)
    that no index the install reaches serves; the locked set records the substitution."""

    package: str
    why: str


class Install(Strict):
    """How vLLM gets into an image: pip into a venv, or preinstalled in a vendor image."""

    kind: Literal["pip", "vendor-image"]
    description: str
    package: str = "vllm"
    accelerator: Literal["cuda", "rocm", "cpu"]  # what the torch build targets
    # pip installs: the interpreter the venv uses (the lock resolves for it); vendor images: the one an image
    # a recipe names is taken to run vLLM on (the cited images give their own)
    python: str | None = None
    system_packages: list[str] = []
    # Where its wheels come from, in the order uv asks them: the default index (the machine's) is the
    # fallback; the others are extra indexes, which uv prefers for the packages they serve (torch builds).
    indexes: list[IndexUse] = []
    # Where torch comes from per platform and torch release (first match wins), with the evidence; a set
    # whose torch no entry matches takes `indexes` as they are.
    torch_sources: list[TorchSource] = []
    # CUDA installs: the base image for the CUDA version of the locked torch build (12.8, 12.9, 13.0).
    base_images: dict[str, str] = {}
    # May take wheels from the find_links setting: a torch build no index this machine reaches serves (+cpu).
    local_wheels: bool = False
    remove_packages: list[str] = []  # wheels that clash with the torch build: never in the locked set
    remove_packages_reason: str | None = None
    stand_ins: list[StandIn] = []
    images: list[PublishedImage] = []
    arch_coverage: list[ArchCoverage] = []
    wheels_from: WheelsFrom | None = None
    notes: list[Sourced] = []

    def torch_source(self, platform: str, torch: str | None) -> TorchSource | None:
        """The catalog's entry for this torch release on this platform, if any (the first that matches)."""
        if torch is None:
            return None
        return next((entry for entry in self.torch_sources if entry.matches(platform, torch)), None)

    def first_index_release(self, platform: str) -> str | None:
        """The first vLLM release whose set on this platform the install's own indexes serve, with no index
        a torch source adds (linux/arm64: vLLM 0.20.0, the first on torch 2.11.0)."""
        own = (e.vllm_from for e in self.torch_sources if e.platform == platform and not e.indexes)
        return next(own, None)


class GroupAdd(Strict):
    """A supplementary group the server needs: a name, or ${SETTING} for an id only the host knows."""

    group: str
    why: str | None = None


class GpuRequest(Strict):
    """A device request through the engine's GPU driver (the NVIDIA container toolkit)."""

    driver: str
    count: Literal["all"] = "all"
    capabilities: list[str]


class GpuCheck(Strict):
    """How validation knows the engine can give a container this vendor's GPUs."""

    runtime: str | None = None  # the engine must offer this container runtime
    device: str | None = None  # this device must exist (on a local engine)
    remote_env: str | None = None  # on a remote engine, this variable set to 1 says the GPUs are there


class Mooncake(Strict):
    """How this vendor's images get Mooncake (the KV store of the recipes' kv_store deployments)."""

    # Which of a kv_store file's per-brand install lines its images take: `nvidia` (the CUDA wheel), `amd`
    # (the non-CUDA wheel).
    install: Literal["nvidia", "amd"]
    # The site renders KV-store deployments on scalable NVIDIA and AMD hardware only; a vendor marked here
    # gets them from the factory too (the CPU target: to run the store here), the site having no page.
    factory_renders: bool = False
    # Values that replace the kv_store files' config values on this vendor's hardware (the CPU target has no
    # RDMA: protocol tcp; segments that fit a test machine).
    # (global_segment_size is replaced only where the file's is a size: an instance of the centralized
    # topology must give 0, the store service owning the pool.)
    config: dict[str, str | int | bool] = {}
    store_config: dict[str, str | int | bool] = {}
    system_packages: list[str] = []  # what the wheel's libraries load (ibverbs) and the base lacks
    sources: list[str] = []


class Vendor(Strict):
    """What a container needs to see this vendor's GPUs. One home for it: the compose files, `factory show`'s
    `docker run` and validation's containers all read it from here."""

    name: str  # as people say it: NVIDIA, AMD
    gpu_request: GpuRequest | None = None
    devices: list[str] = []
    group_add: list[GroupAdd] = []
    security_opt: list[str] = []
    gpu_check: GpuCheck | None = None  # None: the backend needs no GPU
    # /dev/shm of every serving container: NCCL, vLLM's workers and its message queues use it. A size (rather
    # than the host's IPC namespace, as the recipe pages' --ipc=host) is what every format can express.
    shm_size: str
    # The resource its Kubernetes device plugin advertises (a pod asks for its GPUs by it); None: no GPUs.
    kubernetes_resource: str | None = None
    pod_requests: PodRequests | None = None  # None: a pod asks for nothing (BestEffort)
    mooncake: Mooncake | None = None  # None: no Mooncake wheel for its images (no KV-store images)
    # Limits its serving and Mooncake processes get besides the server's (memlock for RDMA), and the size of
    # each writable folder where it differs from the server's default (by the folder's name).
    ulimits: dict[str, int] = {}
    writable_gib: dict[str, Count] = {}
    # What its nodes must be set up to do for a pod of the non-root user (device ownership, memlock), shown
    # beside its manifests: the pod spec cannot say it.
    node_needs: list[str] = []
    sources: list[str] = []


class Hardware(Strict):
    vendor: str  # a key of the catalog's vendors (the loader checks it)
    display_name: str
    platform: Platform
    gpu_arch: str | None  # sm_90, gfx942, ...; None for the CPU target
    gpus_per_node: Count  # 0 planned 0 GPUs for every process (one node's worth; the CPU target has 1)
    install: str
    base_image: str | None = None  # None when the install brings its own (a vendor image)
    sources: list[str] = []
    notes: list[Sourced] = []


class Catalog(Strict):
    vendors: dict[str, Vendor]
    indexes: dict[str, PackageIndex] = {}
    server: Server = Server()
    router: RouterProcess = RouterProcess()
    mooncake: MooncakeProcesses = MooncakeProcesses()
    installs: dict[str, Install]
    hardware: dict[str, Hardware]
    known_bad: dict[str, list[KnownBadPin]] = {}  # model_id -> versions that break it
    # recipe id (<org>/<file name>) -> the only hardware to build it for (the tiny self-test model: CPU)
    only_hardware: dict[str, list[str]] = {}
    # The recipe built for a hardware when none is named (nox -s build-<hw>, CI, the benchmark):
    # `default`, or the hardware's own entry.
    build_recipes: dict[str, str]
    uv: str  # the uv release images install their locked set with (the lock holds its hashes)
    # Where the factory's commands differ from the upstream site's (catalog/deviations.yaml).
    deviations: list[DeviationRule] = []
    omni: OmniCatalog | None = None  # vllm-omni releases and where they can run
    fleet: Fleet  # metrics, autoscaling, the endpoint picker and the clients a deployment's servers admit

    @property
    def default_index(self) -> str:
        """The index the machine's configuration stands in for (PyPI), by name."""
        return next((name for name, index in self.indexes.items() if index.default), "default")

    def install_indexes(
        self, install: Install, platform: str, torch: str | None = None
    ) -> list[tuple[str, PackageIndex]]:
        """(name, index) of every index the install takes wheels from on this platform, in its order, with
        those the torch source of a set pinning `torch` adds."""
        names = [use.index for use in install.indexes if use.applies_to(platform)]
        source = install.torch_source(platform, torch)
        names += [name for name in (source.indexes if source else []) if name not in names]
        return [(name, self.indexes[name]) for name in names]

    def extra_index_url(
        self, install: Install, platform: str, vllm: str, torch: str | None = None
    ) -> str | None:
        """The indexes other than the machine's default, as pip's PIP_EXTRA_INDEX_URL (space-separated)."""
        indexes = self.install_indexes(install, platform, torch)
        urls = [index.url_for(vllm) for _, index in indexes if not index.default]
        return " ".join(urls) or None

    def build_recipe(self, hardware: str) -> str:
        return self.build_recipes.get(hardware) or self.build_recipes["default"]
