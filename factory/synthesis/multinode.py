"""The parallel sizes and rendezvous flags of one node of a multi-node deployment, as the site writes them.

The layout follows the strategy's data: `parallelism: tp_pp` (TP inside a node, PP across) and `tp_dp`
(one replica per node), else the size the strategy's `parallel_flag` names spread over every GPU of
every node: data parallel (DEP, hybrid load balancing) or tensor parallel (TP, TEP).
"""

from __future__ import annotations

from collections.abc import Callable

from factory.recipes.schema import Recipe
from factory.recipes.tree_schema import HardwareProfile, Strategy
from factory.synthesis.args import flag_value
from factory.synthesis.hardware import generation_block
from factory.synthesis.values import node_rank, start_rank

HEAD = "$HEAD_IP"  # the rendezvous host, as the site spells it; compose files fill it from the settings


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
    gpus = profile.gpu_count or 1
    layout = LAYOUTS[layout_of(strategy)]
    return layout(recipe, strategy_name, profile, profile_id, gpus, nodes, mp_rank, head)


def _data_parallel(
    recipe: Recipe,
    strategy_name: str,
    profile: HardwareProfile,
    profile_id: str,
    gpus: int,
    nodes: int,
    rank: int,
    head: str,
) -> list[str]:
    """DEP: every GPU of every node is a DP rank; node r starts at r x its local DP size."""
    override = recipe.strategy_overrides.get(strategy_name)
    local = gpus
    if override:
        generation = generation_block(override.hardware_overrides, profile)
        exact = override.hardware_overrides.get(profile_id)
        flags = [
            *override.vllm_args,
            *override.extra_args,
            *(generation.extra_args if generation else []),
            *(exact.extra_args if exact else []),
        ]
        declared = flag_value(flags, "--data-parallel-size-local")
        # ASCII digits only: `²` passes str.isdigit() and crashes int().
        local = int(declared) if declared and declared.isascii() and declared.isdigit() else gpus
    found = ["--data-parallel-size", str(gpus * nodes), "--data-parallel-size-local", str(gpus)]
    found += ["--data-parallel-address", head]
    if rank:
        found += ["--data-parallel-start-rank", start_rank(rank, local)]
    return found


def _pipeline(
    recipe: Recipe,
    strategy_name: str,
    profile: HardwareProfile,
    profile_id: str,
    gpus: int,
    nodes: int,
    rank: int,
    head: str,
) -> list[str]:
    """TP inside each node, PP across nodes, through vLLM's multiprocessing launcher."""
    return [
        "--tensor-parallel-size",
        str(gpus),
        "--pipeline-parallel-size",
        str(nodes),
        *_mp(nodes, rank, head),
    ]


def _replica_per_node(
    recipe: Recipe,
    strategy_name: str,
    profile: HardwareProfile,
    profile_id: str,
    gpus: int,
    nodes: int,
    rank: int,
    head: str,
) -> list[str]:
    """TP inside each node, one DP rank (a full replica) per node."""
    found = ["--tensor-parallel-size", str(gpus), "--data-parallel-size", str(nodes)]
    found += ["--data-parallel-size-local", "1", "--data-parallel-address", head]
    if rank:
        found += ["--data-parallel-start-rank", start_rank(rank, 1)]
    return found


def _tensor_parallel(
    recipe: Recipe,
    strategy_name: str,
    profile: HardwareProfile,
    profile_id: str,
    gpus: int,
    nodes: int,
    rank: int,
    head: str,
) -> list[str]:
    """TP (or TEP) over every GPU of every node; every node runs the same engine at its own rank."""
    return ["--tensor-parallel-size", str(gpus * nodes), *_mp(nodes, rank, head)]


def _mp(nodes: int, rank: int, head: str) -> list[str]:
    found = ["--nnodes", str(nodes), "--node-rank", node_rank(rank), "--master-addr", head]
    return [*found, "--headless"] if rank > 0 else found


Layout = Callable[[Recipe, str, HardwareProfile, str, int, int, int, str], list[str]]
LAYOUTS: dict[str, Layout] = {
    "tp_pp": _pipeline,
    "tp_dp": _replica_per_node,
    "dp": _data_parallel,
    "tp": _tensor_parallel,
}
