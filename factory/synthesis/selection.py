"""What a reader of the recipes site selects before any command exists: the input of the synthesis."""

from __future__ import annotations

from dataclasses import dataclass

from factory.recipes.schema import Recipe
from factory.recipes.tree_schema import KvOffloadOption
from factory.synthesis.pd import PdNodes


@dataclass(frozen=True)
class Selection:
    """What the site's command builder has selected: one recipe, variant, strategy, hardware, features."""

    recipe: Recipe
    variant_key: str
    strategy_name: str
    profile_id: str
    features: tuple[str, ...]
    node_count: int = 1
    pd_nodes: PdNodes | None = None
    kv_offload: KvOffload | None = None  # the KV-offload row's pick, once its gates passed


@dataclass(frozen=True)
class KvOffload:
    """A KV-offload option the reader picked on the page (taxonomy kv_offload.<key>)."""

    key: str
    option: KvOffloadOption
