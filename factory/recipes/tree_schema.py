"""The rest of a recipes tree: strategies/*.yaml, kv_store/*.yaml and taxonomy.yaml. As in recipes, a key
the site does not read is kept aside and listed (factory.recipes.ignored), never a reason to stop."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from factory.base.models import Count, Open, Port
from factory.recipes.schema import Companion
from factory.recipes.sections import Env, Flags, Section


class HardwareMatch(Open):
    min_gpus: Count = 1
    max_gpus: Count | None = None
    multi_node: bool = False
    architecture: str | None = None


class PdRole(Section):
    """pd_cluster: what one pool (prefill or decode) adds to its `vllm serve`."""

    vllm_args: Flags = []
    env: Env = {}
    parallelism: Literal["tp", "tep", "dep"] | None = None
    tp: Count | None = None
    parallel_flag: str | None = None


class Router(Section):
    policy: str = "round_robin"


class Strategy(Section):
    name: str
    deploy_type: Literal["single_node", "multi_node", "pd_cluster"]
    display_name: str = ""
    orientation: str | None = None
    description: str = ""
    hardware_match: HardwareMatch = HardwareMatch()
    vllm_args: Flags = []
    parallel_flag: str = "--tensor-parallel-size"
    parallelism: str | None = None
    env: Env = {}
    prefill: PdRole | None = None
    decode: PdRole | None = None
    router: Router | None = None


# How many vLLM instances may share a KV store, as a store's default or `--instances`: each is a workload of
# the deployment (the site's page offers up to 8; upstream's stores default to 2).
MAX_INSTANCES = 64
Instances = Annotated[int, Field(strict=True, ge=1, le=MAX_INSTANCES)]

# A Mooncake config value as the kv_store file writes it (JSON types: the site prints the map as JSON).
ConfigValue = bool | int | float | str


class KvRouter(Section):
    policy: str = "cache_aware"
    install: str = "uv pip install vllm-router"
    port: Port = 30080


class KvVllm(Section):
    """What every vLLM instance of a KV-store deployment adds: the connector flags, the environment, the
    Mooncake install line (one string, or per vendor: `nvidia`, `amd`)."""

    vllm_args: Flags = []
    env: Env = {}
    install: str | dict[str, str] | None = None
    port: Port = 8000


class KvPdRole(Section):
    args: Flags = []


class KvPd(Section):
    """Mooncake composed with pd_cluster: each pool's flags (a MultiConnector of NIXL and Mooncake)."""

    prefill: KvPdRole = KvPdRole()
    decode: KvPdRole = KvPdRole()


class MooncakeMaster(Section):
    command: str = "mooncake_master"  # a shell snippet (it may hold comment lines), not an argv
    description: str = ""


class MooncakeStore(Section):
    """The centralized topology's standalone store service and its config."""

    command: str
    description: str = ""
    note: str = ""
    config: dict[str, ConfigValue] = {}


class MooncakeVllmConfig(Section):
    mode: str | None = None
    note: str = ""
    template: dict[str, ConfigValue] = {}


class KvStore(Section):
    """A Mooncake KV-store deployment (deploy_type kv_store_lb): a store every vLLM instance shares, its
    master, in the centralized topology a store service, and with two or more instances a router."""

    name: str
    deploy_type: Literal["kv_store_lb"]
    display_name: str = ""
    label: str = ""
    order: int | None = None
    description: str = ""
    router: KvRouter = KvRouter()
    vllm: KvVllm = KvVllm()
    pd: KvPd | None = None
    mooncake_master: MooncakeMaster = MooncakeMaster()
    mooncake_store_config: MooncakeStore | None = None
    mooncake_vllm_config: MooncakeVllmConfig = MooncakeVllmConfig()
    min_vllm_version: str | None = None
    default_instances: Instances | None = None


class HardwareProfile(Open):
    brand: str
    generation: str | list[str]
    display_name: str = ""
    description: str = ""
    gpu_count: int
    vram_gb: float
    multi_node: bool = False
    scalable: bool = True
    restricted: bool = False

    @property
    def gen(self) -> str:
        """The generation overrides are keyed by: the first one when a profile lists several."""
        return self.generation[0] if isinstance(self.generation, list) else self.generation

    @property
    def generations(self) -> list[str]:
        return self.generation if isinstance(self.generation, list) else [self.generation]


class KvOffloadOption(Section):
    """One option of the site's KV-offload row (taxonomy `kv_offload.<key>`): a connector's flags appended
    last to a single- or multi-node serving command, with its variables, and for some an install line and
    a companion process. The page offers it where three gates pass (factory.synthesis.kv_offload)."""

    display_name: str = ""
    label: str = ""
    group: str | None = None
    order: int | None = None
    description: str = ""
    requires_opt_in: bool = False  # offered only where a recipe's kv_offload_support says `verified`
    brands: list[str] = []  # empty: every brand
    strategies: list[str] = []  # empty: every strategy but pd_cluster and the KV stores
    args: Flags = []
    env: Env = {}
    install: str | None = None
    docs_url: str | None = None
    companion: Companion | None = None

    @field_validator("requires_opt_in", mode="before")
    @classmethod
    def _as_the_site_tests_it(cls, value: Any) -> bool:
        """The site tests the value as JavaScript does: YAML's unquoted `no` is the text "no", which is true
        there (the gate then refuses, as the option's author meant it to by default); a list is true too."""
        return True if isinstance(value, list | dict) else bool(value)

    @field_validator("brands", "strategies", mode="before")
    @classmethod
    def _restricts_only_as_a_list(cls, value: Any) -> Any:
        """The site restricts only by a list (`Array.isArray`): anything else restricts nothing."""
        return value if isinstance(value, list) else []


class Taxonomy(Open):
    hardware_profiles: dict[str, HardwareProfile]
    kv_offload: dict[str, KvOffloadOption] = {}
    # Options of the KV-offload row that cannot be read, with why: refused when asked for, never a reason to
    # stop the tree (the row is a pick of the page, in no default rendering).
    kv_offload_unreadable: dict[str, str] = {}

    @model_validator(mode="before")
    @classmethod
    def _set_unreadable_options_aside(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        row = data.get("kv_offload") or {}
        readable: dict[str, KvOffloadOption] = {}
        unreadable: dict[str, str] = {}
        for key, value in row.items() if isinstance(row, dict) else []:
            try:
                readable[str(key)] = KvOffloadOption.model_validate(value)
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(part) for part in first["loc"])
                unreadable[str(key)] = f"{where}: {first['msg']}" if where else first["msg"]
        if not isinstance(row, dict):
            unreadable["*"] = f"kv_offload is not a mapping of options: {type(row).__name__}"
        return {**data, "kv_offload": readable, "kv_offload_unreadable": unreadable}

    strategies: list[str] = []
    tasks: list[Any] = []
