"""The parallel sizes and rendezvous flags of one node of a multi-node deployment, as the site writes them.

The layout follows the strategy's data: `parallelism: tp_pp` (TP inside a node, PP across) and `tp_dp`
(one replica per node), else the size the strategy's `parallel_flag` names spread over every GPU of
every node: data parallel (DEP, hybrid load balancing) or tensor parallel (TP, TEP).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from factory.recipes.schema import Recipe
from factory.recipes.tree_schema import HardwareProfile, Strategy
from factory.synthesis.args import flag_value
from factory.synthesis.hardware import generation_block
from factory.synthesis.values import node_rank, start_rank

HEAD = "$HEAD_IP"  # the rendezvous host, as the site spells it; compose files fill it from the settings


@dataclass(frozen=True)
class Node:
    """One node of a multi-node deployment, as a layout reads it: the recipe and strategy, the hardware
    profile (its GPUs on this node), how many nodes, the node's rank (0: the head) and where ranks meet."""

    recipe: Recipe
    strategy_name: str
    profile: HardwareProfile
    profile_id: str
    gpus: int
    nodes: int
    rank: int
    head: str


def layout_of(strategy: Strategy) -> str:
    """The site checks the data-parallel flag first, then `parallelism`, then falls back to TP."""
    if strategy.parallel_flag == "--data-parallel-size":
        return "dp"
    if strategy.parallelism in ("tp_pp", "tp_dp"):
        return strategy.parallelism
    return "tp"


def args(
    recipe: Recipe,
    strategy_name: str,
    strategy: Strategy,
    profile: HardwareProfile,
    profile_id: str,
    nodes: int,
    node_role: str | None,
    rank: int,
    head: str = HEAD,
) -> list[str]:
    """`head`: the address every rank meets at (a KV-store deployment's instance names its own)."""
    mp_rank = max(1, rank) if node_role == "worker" else 0
    at = Node(recipe, strategy_name, profile, profile_id, profile.gpu_count or 1, nodes, mp_rank, head)
    return LAYOUTS[layout_of(strategy)](at)


def _data_parallel(at: Node) -> list[str]:
    """DEP: every GPU of every node is a DP rank; node r starts at r x its local DP size."""
    override = at.recipe.strategy_overrides.get(at.strategy_name)
    local = at.gpus
    if override:
        generation = generation_block(override.hardware_overrides, at.profile)
        exact = override.hardware_overrides.get(at.profile_id)
        flags = [
            *override.vllm_args,
            *override.extra_args,
            *(generation.extra_args if generation else []),
            *(exact.extra_args if exact else []),
        ]
        declared = flag_value(flags, "--data-parallel-size-local")
        # ASCII digits only: `²` passes str.isdigit() and crashes int().
        local = int(declared) if declared and declared.isascii() and declared.isdigit() else at.gpus
    found = ["--data-parallel-size", str(at.gpus * at.nodes), "--data-parallel-size-local", str(at.gpus)]
    found += ["--data-parallel-address", at.head]
    if at.rank:
        found += ["--data-parallel-start-rank", start_rank(at.rank, local)]
    return found


def _pipeline(at: Node) -> list[str]:
    """TP inside each node, PP across nodes, through vLLM's multiprocessing launcher."""
    return [
        "--tensor-parallel-size",
        str(at.gpus),
        "--pipeline-parallel-size",
        str(at.nodes),
        *_mp(at.nodes, at.rank, at.head),
    ]


def _replica_per_node(at: Node) -> list[str]:
    """TP inside each node, one DP rank (a full replica) per node."""
    found = ["--tensor-parallel-size", str(at.gpus), "--data-parallel-size", str(at.nodes)]
    found += ["--data-parallel-size-local", "1", "--data-parallel-address", at.head]
    if at.rank:
        found += ["--data-parallel-start-rank", start_rank(at.rank, 1)]
    return found


def _tensor_parallel(at: Node) -> list[str]:
    """TP (or TEP) over every GPU of every node; every node runs the same engine at its own rank."""
    return ["--tensor-parallel-size", str(at.gpus * at.nodes), *_mp(at.nodes, at.rank, at.head)]


def _mp(nodes: int, rank: int, head: str) -> list[str]:
    found = ["--nnodes", str(nodes), "--node-rank", node_rank(rank), "--master-addr", head]
    return [*found, "--headless"] if rank > 0 else found


Layout = Callable[[Node], list[str]]
LAYOUTS: dict[str, Layout] = {
    "tp_pp": _pipeline,
    "tp_dp": _replica_per_node,
    "dp": _data_parallel,
    "tp": _tensor_parallel,
}
