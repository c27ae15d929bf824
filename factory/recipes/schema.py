"""The vLLM recipes repository's schema: models/<org>/<name>.yaml, strategies/*.yaml, taxonomy.yaml.

No machine-readable schema exists upstream (the site's build script is the only validator), so these
models follow the repository's files. Sections the factory reads forbid unknown keys, so a typo such as
`base_arg` fails loudly instead of silently dropping flags.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from factory.models_base import Open, Strict


class ArgsAndEnv(Strict):
    """An override block: flags appended to the serve command and environment variables to set."""

    extra_args: list[str] = []
    extra_env: dict[str, str] = {}


class Variant(Strict):
    precision: str
    vram_minimum_gb: float | None = None
    description: str = ""
    model_id: str | None = None
    extra_args: list[str] = []
    extra_env: dict[str, str] = {}
    hardware_overrides: dict[str, ArgsAndEnv] = {}


class Dependency(Strict):
    note: str = ""
    command: str


class Feature(Strict):
    description: str = ""
    args: list[str] = []
    env: dict[str, str] = {}


class ModelSection(Strict):
    model_id: str
    min_vllm_version: str
    revision: str | None = Field(
        default=None, description="Hugging Face revision (commit) to pin; --trust-remote-code runs its code"
    )
    architecture: str | None = None
    parameter_count: str | None = None
    active_parameters: str | None = None
    context_length: int | None = None
    supports_dcp: bool = False
    base_args: list[str] = []
    base_env: dict[str, str] = {}
    docker_image: dict[str, str] = {}
    install: dict[str, Any] = {}


class Meta(Open):
    title: str = ""
    slug: str | None = None
    provider: str = ""
    description: str = ""
    hardware: dict[str, str] = {}


class StrategyOverride(Open):
    """Per-strategy tweaks; `tp` fixes the tensor-parallel size (the Gemma sample sets `tp: 1`)."""

    tp: int | None = None
    extra_args: list[str] = []
    env: dict[str, str] = {}


class Recipe(Strict):
    meta: Meta
    model: ModelSection
    dependencies: list[Dependency] = []
    features: dict[str, Feature] = {}
    opt_in_features: list[str] = []
    hardware_opt_in_features: dict[str, list[str]] = {}
    variants: dict[str, Variant]
    compatible_strategies: list[str]
    hardware_overrides: dict[str, ArgsAndEnv] = {}
    strategy_overrides: dict[str, StrategyOverride] = {}
    guide: str = ""


class HardwareMatch(Open):
    min_gpus: int = 1
    max_gpus: int | None = None
    multi_node: bool = False
    architecture: str | None = None


class Strategy(Open):
    name: str
    deploy_type: Literal["single_node", "multi_node", "pd_cluster"]
    display_name: str = ""
    description: str = ""
    hardware_match: HardwareMatch = HardwareMatch()
    vllm_args: list[str] = []
    parallel_flag: str
    parallelism: str | None = None
    env: dict[str, str] = {}


class HardwareProfile(Open):
    brand: str
    generation: str
    display_name: str = ""
    description: str = ""
    gpu_count: int
    vram_gb: float
    multi_node: bool = False
    scalable: bool = True
    restricted: bool = False


class Taxonomy(Open):
    hardware_profiles: dict[str, HardwareProfile]
    strategies: list[str] = []
