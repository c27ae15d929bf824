"""A model recipe of the vLLM recipes repository (models/<org>/<name>.yaml), as its SCHEMA.md documents it.

No machine-readable schema exists upstream: the site's command synthesis is the only validator. These
models hold every key the repository documents or its code reads. The site renders a recipe whatever
other keys it carries, and upstream adds keys every few weeks, so an unknown key is kept aside (never in
a command) and listed per recipe with a "did you mean" (factory.recipes.ignored): a typo such as
`base_arg` is a warning, and an error with `--strict`. A known key with a value the factory cannot use
refuses the recipe. `meta` only describes the recipe page: its unknown keys are listed the same way.
Strategies, KV stores and the taxonomy are in factory.recipes.tree_schema; what sections are made of in
factory.recipes.sections; the `omni` section in factory.recipes.omni_schema.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from factory.base.models import Count
from factory.recipes.omni_schema import Omni
from factory.recipes.sections import ArgsAndEnv, Env, Flags, HardwareKeyedInt, Section


class VariantHardwareOverride(ArgsAndEnv):
    """A variant's override for a generation (additive) or an exact GPU, which may pin an image."""

    docker_image: str | None = None


class PrecisionHardware(Section):
    """Overrides the hardware a precision implies (e.g. NVFP4 dequantized to BF16 on Hopper)."""

    brand: str | None = None
    generation: str | None = None


DockerImage = str | dict[str, Any]  # a tag, or a map by brand, or by CUDA flavour (cu129, cu130)


class Variant(Section):
    precision: str
    vram_minimum_gb: float | None = None
    description: str = ""
    label: str | None = None
    model_id: str | None = None
    extra_args: Flags = []
    extra_env: Env = {}
    tp: HardwareKeyedInt | None = None
    default_modes: dict[str, str] = {}
    min_vllm_version: str | None = None
    nightly_required: bool = False
    hardware_overrides: dict[str, VariantHardwareOverride] = {}
    precision_hardware: PrecisionHardware | None = None
    supported_hardware: list[str] = []
    docker_image: DockerImage | None = None


class Dependency(Section):
    command: str
    note: str = ""
    optional: bool = False
    brand: str | list[str] | None = None  # NVIDIA, AMD, Intel: the entry applies to that brand only
    install_modes: list[Literal["pip", "docker"]] = ["pip"]

    def brands(self) -> list[str]:
        if self.brand is None:
            return []
        return [self.brand] if isinstance(self.brand, str) else list(self.brand)


class FeatureArgs(Section):
    """A per-generation replacement of a feature's (or mode's) args; without `args` it replaces nothing."""

    args: Flags | None = None


class Companion(Section):
    """A helper process a feature runs beside `vllm serve` on the same node."""

    label: str | None = None
    description: str = ""
    command: str


class FeatureMode(Section):
    """One method of a single-select feature (e.g. one speculative-decoding method)."""

    label: str | None = None
    description: str = ""
    args: Flags = []
    variants: list[str] = []
    hardware_overrides: dict[str, FeatureArgs] = {}
    hardware: dict[str, Literal["unsupported", "supported", "verified"]] = {}


class Feature(Section):
    description: str = ""
    label: str | None = None
    args: Flags | None = None
    hardware_overrides: dict[str, FeatureArgs] = {}
    modes: dict[str, FeatureMode] | None = None
    default_mode: str | None = None
    strategies: list[str] = []
    companion: Companion | None = None


class PipInstall(Section):
    command: str | None = None
    note: str | None = None


class InstallSection(Section):
    """The recipe page's install block: `false` hides a tab, a map overrides its command or note."""

    pip: PipInstall | Literal[False] | None = None
    docker: PipInstall | Literal[False] | None = None


class DockerSource(Section):
    """A checkpoint served from a host path instead of the Hugging Face cache."""

    mount_path: str


class ModelSection(Section):
    model_id: str
    min_vllm_version: str
    revision: str | None = Field(
        default=None, description="Hugging Face revision (commit) to pin; --trust-remote-code runs its code"
    )
    architecture: str | None = None
    parameter_count: str | int | float | None = None
    active_parameters: str | int | float | None = None
    context_length: int | None = None
    supports_dcp: bool = False
    nightly_required: bool = False
    base_args: Flags = []
    base_env: Env = {}
    docker_image: DockerImage | None = None
    docker_source: DockerSource | None = None
    flashinfer_autotune: bool | None = None
    install: InstallSection = InstallSection()

    @field_validator("parameter_count", "active_parameters", mode="before")
    @classmethod
    def _as_text(cls, value: object) -> object:
        return str(value) if isinstance(value, int | float) else value


class Meta(Section):
    """What the recipe page shows about the model."""

    title: str = ""
    slug: str | None = None
    provider: str = ""
    description: str = ""
    date_added: Any = None
    date_updated: Any = None
    difficulty: str | None = None
    tasks: list[str] = []
    performance_headline: str | None = None
    related_recipes: list[str] = []
    default_hardware: str | None = None
    # verified, unsupported, or (the factory's own use) any other word that lists a restricted profile
    hardware: dict[str, str] = {}
    platforms: list[Any] = []


class PdRoleOverride(Section):
    """pd_cluster: one pool's (prefill or decode) parallelism and tweaks."""

    nodes: HardwareKeyedInt | None = None
    parallelism: Literal["tp", "tep", "dep"] | None = None
    tp: Count | None = None
    parallel_flag: str | None = None
    vllm_args: Flags = []
    extra_args: Flags = []
    env: Env = {}
    hardware_overrides: dict[str, ArgsAndEnv] = {}


class RouterOverride(Section):
    intra_node_data_parallel_size: Count | None = None


class StrategyOverride(Section):
    """A recipe's tweaks for one strategy: its TP, flags, environment and hardware overrides."""

    tp: HardwareKeyedInt | None = None
    extra_args: Flags = []
    vllm_args: Flags = []
    env: Env = {}
    extra_env: Env = {}
    hardware_overrides: dict[str, ArgsAndEnv] = {}
    prefill: PdRoleOverride | None = None
    decode: PdRoleOverride | None = None
    router: RouterOverride | None = None
    pool_modes: list[Literal["tp", "tep", "dep"]] = []


class Recipe(Section):
    meta: Meta
    model: ModelSection
    dependencies: list[Dependency] = []
    features: dict[str, Feature] = {}
    opt_in_features: list[str] = []
    hardware_opt_in_features: dict[str, list[str]] = {}
    variants: dict[str, Variant]
    compatible_strategies: list[str] = []
    default_strategy: str | None = None
    strategy_min_gpus: Count | dict[str, Count | dict[str, Count]] | None = None
    strategy_hardware: dict[str, dict[str, Literal["supported", "unsupported"]]] = {}
    kv_cache_strategy_hardware: dict[str, dict[str, Literal["supported", "unsupported"]]] = {}
    kv_offload_support: dict[str, Literal["verified", "unsupported"]] = {}
    hardware_overrides: dict[str, ArgsAndEnv] = {}
    strategy_overrides: dict[str, StrategyOverride] = {}
    omni: Omni | None = None
    guide: str = ""

    @property
    def is_omni(self) -> bool:
        return "omni" in self.meta.tasks


# Keys the factory reads but does not use, with why: `factory show` lists those a recipe sets.
NOT_USED: dict[str, str] = {
    "guide": "prose for the recipe page",
    "meta.title": "page text",
    "meta.description": "page text",
    "meta.performance_headline": "page text",
    "meta.related_recipes": "page links",
    "meta.date_added": "page ordering",
    "meta.date_updated": "page ordering",
    "meta.difficulty": "page badge",
    "meta.provider": "page text",
    "meta.platforms": "third-party hosting links on the page",
    "meta.default_hardware": "the page's first hardware pill; the factory renders every hardware",
    "model.install": "the page's install tab text; images install the locked vLLM",
    "model.docker_image": "upstream's prebuilt image; the factory builds its own",
    "model.flashinfer_autotune": "a page hint; the flags themselves are in base_args",
    "model.supports_dcp": "a page badge; the DCP flags are a feature's args",
    "dependencies": "extra installs on the page; images install vLLM from the lock (see factory show)",
}
