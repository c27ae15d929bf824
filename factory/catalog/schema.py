"""Typed hardware catalog: per target its vendor, platform, GPU architecture, base image and install."""

from __future__ import annotations

from typing import Literal

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from factory.base.models import Count, Strict
from factory.catalog.serving import (
    MooncakeProcess,
    MooncakeProcesses,
    PodRequests,
    RouterProcess,
    Secret,
    Server,
    Volume,
)

__all__ = [
    "MooncakeProcess",
    "MooncakeProcesses",
    "PodRequests",
    "RouterProcess",
    "Secret",
    "Server",
    "Volume",
]

Platform = Literal["linux/amd64", "linux/arm64"]


class Sourced(Strict):
    """A fact that could not be checked here carries where it was read."""

    source: str


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
    python: str | None = None  # pip installs: the interpreter the venv uses (the lock resolves for it)
    system_packages: list[str] = []
    # Where its wheels come from, in the order uv asks them: the default index (the machine's) is the
    # fallback; the others are extra indexes, which uv prefers for the packages they serve (torch builds).
    indexes: list[IndexUse] = []
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


class KnownBadPin(Sourced):
    vllm: str
    reason: str


class DeviationRule(Strict):
    """A deliberate difference from the upstream site's commands, applied to every process it matches."""

    flag: str  # the flag the rule adds or changes
    reason: str
    program: Literal["vllm", "vllm-router"] = "vllm"  # the processes it applies to
    when_present: list[str] = []  # every one of these flags is in the command
    when_absent: list[str] = []  # none of these is
    when_nonzero: list[str] = []  # each of these flags is there with a value other than 0
    when_host_network: bool = False  # only processes of deployments on the host's network (multi-node, PD)
    # Appended (the flag and its value) unless the command already has `flag`; {bind_address} is the address
    # the process must listen on: its own node's for a PD pool (the router calls it), else $BIND_ADDRESS;
    # {workers_start_s} the start budget of the vLLM processes the router fronts.
    add: list[str] = []
    # The flag each of whose values (given once per value) becomes a value of `flag`, once: vllm-router
    # takes its backends as `--worker-urls A B`, where the site writes `--backend-url A --backend-url B`.
    gather: str | None = None
    # Split an entry holding a flag and its value (`--max-model-len auto`) into the two words it is.
    split_flag_and_value: bool = False
    # The flag's value -> its replacement ({context_length} is the model's), or null to drop the flag.
    replace_values: dict[str, str | None] = {}
    # A PEP 440 specifier: only for these vLLM versions. With no readable version (a `nightly` image, no
    # lock and no floor) an `add` rule still applies; a rule that changes the recipe's own flag does not.
    vllm: str | None = None
    sources: list[str] = []

    def applies_to(self, version: str | None) -> bool:
        if self.vllm is None:
            return True
        if version is None:
            return not self.replace_values
        return SpecifierSet(self.vllm).contains(version, prereleases=True)


class OmniRelease(Sourced):
    """One vllm-omni release and the vLLM series (major.minor) it runs with, read from its project."""

    omni: str
    vllm: str  # "0.30": any 0.30.x


class OmniRefusal(Sourced):
    """Where no omni image can exist (an accelerator, a platform, or both), and why."""

    accelerator: str | None = None
    platform: str | None = None
    from_omni: str | None = None  # the first vllm-omni release it holds for (fa3-fwd: from 0.14.0); None: all
    why: str

    def matches(self, accelerator: str, platform: str | None, omni: str | None = None) -> bool:
        same_platform = self.platform is None or (platform is not None and self.platform == platform)
        same_release = self.from_omni is None or omni is None or Version(omni) >= Version(self.from_omni)
        return (
            (self.accelerator is None or self.accelerator == accelerator) and same_platform and same_release
        )


class OmniCatalog(Sourced):
    """vllm-omni: its releases with the vLLM each runs with, and where no omni image can exist."""

    package: str = "vllm-omni"
    releases: list[OmniRelease] = []
    refusals: list[OmniRefusal] = []

    def release_for(self, vllm: str) -> OmniRelease | None:
        """The vllm-omni release that runs with this vLLM release (the same major.minor), if any."""
        series = ".".join(vllm.split(".")[:2])
        return next((r for r in self.releases if r.vllm == series), None)

    def refusal(self, accelerator: str, platform: str | None, omni: str | None = None) -> str | None:
        """Why no omni image can exist for this accelerator (on this platform, with this vllm-omni release,
        when given); else None."""
        found = next((r for r in self.refusals if r.matches(accelerator, platform, omni)), None)
        return f"{found.why} (source: {found.source})" if found else None


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

    @property
    def default_index(self) -> str:
        """The index the machine's configuration stands in for (PyPI), by name."""
        return next((name for name, index in self.indexes.items() if index.default), "default")

    def install_indexes(self, install: Install, platform: str) -> list[tuple[str, PackageIndex]]:
        """(name, index) of every index the install takes wheels from on this platform, in its order."""
        return [(use.index, self.indexes[use.index]) for use in install.indexes if use.applies_to(platform)]

    def extra_index_url(self, install: Install, platform: str, vllm: str) -> str | None:
        """The indexes other than the machine's default, as pip's PIP_EXTRA_INDEX_URL (space-separated)."""
        indexes = self.install_indexes(install, platform)
        urls = [index.url_for(vllm) for _, index in indexes if not index.default]
        return " ".join(urls) or None

    def build_recipe(self, hardware: str) -> str:
        return self.build_recipes.get(hardware) or self.build_recipes["default"]
