"""The environment of one process, in the site's order: recipe, variant, strategy, PD pool pinning,
strategy overrides, then hardware overrides (a strategy's generation block replacing the recipe's)."""

from __future__ import annotations

from factory.recipes.sections import Env, EnvValue
from factory.recipes.tree_schema import HardwareProfile, Strategy
from factory.synthesis import pd
from factory.synthesis.hardware import generation_block
from factory.synthesis.selection import Selection
from factory.synthesis.values import own_address, pool_node

# NCCL and UCX settings meant for GB200/GB300 NVL4 trays (NVLink between nodes); on other hardware they are
# inert or harmful, so the site drops them from PD pools elsewhere.
NVL4_ONLY = (
    "VLLM_USE_NCCL_SYMM_MEM",
    "NCCL_CUMEM_ENABLE",
    "NCCL_MNNVL_ENABLE",
    "NCCL_NVLS_ENABLE",
    "UCX_NET_DEVICES",
)
NVL4_HARDWARE = ("gb200", "gb300")


def build_env(
    selection: Selection,
    strategy: Strategy,
    profile: HardwareProfile,
    role: str | None,
    kv: Env | None = None,
) -> dict[str, EnvValue]:
    """`kv`: a KV-store instance's variables, set after the strategy's and before every override."""
    recipe = selection.recipe
    variant = recipe.variants[selection.variant_key]
    exact = variant.hardware_overrides.get(selection.profile_id)
    env: dict[str, EnvValue] = {
        **recipe.model.base_env,
        **variant.extra_env,
        **(exact.extra_env if exact else {}),
    }
    if strategy.deploy_type != "pd_cluster":
        env.update(strategy.env)
        env.update(selection.kv_offload.option.env if selection.kv_offload else {})
        env.update(kv or {})
    elif role:
        env.update(pd.role_spec(strategy, role).env)
        env.update(kv or {})
        env.update(_pool_devices(selection, profile, role))
    override = recipe.strategy_overrides.get(selection.strategy_name)
    if override:
        env.update(override.env)
        pool = getattr(override, role) if role else None
        if pool:
            env.update(pool.env)
        if not role:
            env.update(override.extra_env)
    strategy_block = generation_block(override.hardware_overrides, profile) if override else None
    if strategy_block is not None:
        env.update(strategy_block.extra_env)
    else:
        for mapping in (recipe.hardware_overrides, variant.hardware_overrides):
            block = generation_block(mapping, profile)
            env.update(block.extra_env if block else {})
    if override:
        exact_strategy = override.hardware_overrides.get(selection.profile_id)
        env.update(exact_strategy.extra_env if exact_strategy else {})
        pool = getattr(override, role) if role else None
        pool_exact = pool.hardware_overrides.get(selection.profile_id) if pool else None
        env.update(pool_exact.extra_env if pool_exact else {})
    if strategy.deploy_type == "pd_cluster" and role:
        if selection.profile_id not in NVL4_HARDWARE:
            for key in NVL4_ONLY:
                env.pop(key, None)
        env = _rank_hosts(selection, strategy, role, env)
    return env


def _pool_devices(selection: Selection, profile: HardwareProfile, role: str) -> dict[str, EnvValue]:
    """A pool on whole nodes sees every local GPU; two pools sharing a node split its GPUs in half."""
    gpus = profile.gpu_count or 1
    chosen = selection.pd_nodes.get(role) if selection.pd_nodes else None
    nodes = chosen.nodes if chosen is not None else (1 if selection.node_count > 1 else 0)
    if nodes >= 1:
        env: dict[str, EnvValue] = {"CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in range(gpus))}
        if nodes >= 2:
            env |= {"GLOO_SOCKET_IFNAME": "$IFACE_NAME", "NCCL_SOCKET_IFNAME": "$IFACE_NAME"}
        return env
    half = gpus // 2
    if half <= 0:
        return {}
    ids = range(half) if role == "prefill" else range(half, gpus)
    return {"CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in ids)}


def _rank_hosts(
    selection: Selection, strategy: Strategy, role: str, env: dict[str, EnvValue]
) -> dict[str, EnvValue]:
    """A DEP pool's node k binds its side channel on its own address: the first node's -> its own."""
    chosen = selection.pd_nodes.get(role) if selection.pd_nodes else None
    rank = chosen.rank if chosen else 0
    parallelism = pd.declared_parallelism(selection.recipe, selection.strategy_name, strategy, role)
    if rank <= 0 or parallelism != "dep":
        return env
    old, new = pool_node(role, 1), own_address(role, rank)
    return {key: new if value == old else value for key, value in env.items()}
