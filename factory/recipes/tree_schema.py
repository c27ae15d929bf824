"""The rest of a recipes tree: strategies/*.yaml, kv_store/*.yaml and taxonomy.yaml. As in recipes, a key
the site does not read is kept aside and listed (factory.recipes.ignored), never a reason to stop."""

from __future__ import annotations

from typing import Any, Literal

from factory.models_base import Count, Open
from factory.recipes.schema import Env, Section


class HardwareMatch(Open):
    min_gpus: Count = 1
    max_gpus: Count | None = None
    multi_node: bool = False
    architecture: str | None = None


class PdRole(Section):
    """pd_cluster: what one pool (prefill or decode) adds to its `vllm serve`."""

    vllm_args: list[str] = []
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
    vllm_args: list[str] = []
    parallel_flag: str = "--tensor-parallel-size"
    parallelism: str | None = None
    env: Env = {}
    prefill: PdRole | None = None
    decode: PdRole | None = None
    router: Router | None = None


class KvStore(Open):
    """A Mooncake KV-store deployment (deploy_type kv_store_lb): read, listed, not generated yet."""

    name: str
    deploy_type: Literal["kv_store_lb"]
    display_name: str = ""


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


class Taxonomy(Open):
    hardware_profiles: dict[str, HardwareProfile]
    strategies: list[str] = []
    tasks: list[Any] = []
