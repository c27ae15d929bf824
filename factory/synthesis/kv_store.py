"""Mooncake KV-store deployments (`kv_store/*.yaml`, deploy_type kv_store_lb), as the upstream site renders
them: a port of the kv branch of buildVariantRendering (which recipe, hardware and serving strategy; how
many nodes per instance) and of resolveCommand's kv composition (each instance's `vllm serve`, the master,
the store service, the router, each role's Mooncake config).

An instance is its serving strategy's command with the store's connector flags last (the later duplicate
wins, so the store's `--kv-transfer-config` is the one vLLM reads) and the store's variables set after the
strategy's. With two or more instances each instance's ranks meet at `$VLLM_INSTANCE_<n>`, the name the
router lists it by; one instance keeps the site's `$HEAD_IP`.
"""

from __future__ import annotations

from dataclasses import dataclass

from factory.recipes.schema import Recipe
from factory.recipes.sections import EnvValue
from factory.recipes.tree_schema import ConfigValue, HardwareProfile, KvStore, Strategy, Taxonomy
from factory.synthesis import hardware as hw
from factory.synthesis import strategies as st
from factory.synthesis.args import dedupe
from factory.synthesis.command import KvInstance, Process, build_args, served_model
from factory.synthesis.env import build_env
from factory.synthesis.features import default_features
from factory.synthesis.multinode import HEAD
from factory.synthesis.selection import Selection

BRANDS = {"NVIDIA": "nvidia", "AMD": "amd"}  # Mooncake's wheels: CUDA, and the non-CUDA build for ROCm
DEFAULT_INSTANCES = 2  # the site's, for a store that names no default_instances
# The router's balance settings, fixed in the site's command (not in the kv_store files).
ROUTER_TUNING = ("--cache-threshold", "0.5", "--balance-abs-threshold", "4", "--balance-rel-threshold", "1.1")


@dataclass(frozen=True)
class KvChoice:
    """Which serving strategy a KV-store deployment's instances run, on how many nodes each."""

    store: str
    serving: str
    node_count: int  # per instance


@dataclass(frozen=True)
class Instance:
    """One vLLM instance: its head, then each follower rank (multi-node serving strategies)."""

    nodes: tuple[Process, ...]


@dataclass(frozen=True)
class KvCommand:
    store_id: str
    store: KvStore
    variant: str
    hardware: str
    model: str
    serving: str
    node_count: int
    instances: tuple[Instance, ...]
    env: dict[str, EnvValue]
    install: str | None  # the Mooncake wheel for the hardware's vendor
    master: str  # a shell snippet, as the kv_store file writes it
    store_command: str | None  # the centralized topology's store service
    store_config: dict[str, ConfigValue] | None
    vllm_config: dict[str, ConfigValue]
    router: tuple[str, ...]  # vllm-router's argv; none for one instance


def eligible(
    recipe: Recipe, profile: HardwareProfile, profile_id: str, store_id: str, also: bool = False
) -> bool:
    """Every non-omni recipe on scalable NVIDIA and AMD hardware, unless it opts the GPU out; `also`: the
    factory renders the stores on this hardware too (the catalog's choice; the site renders none there)."""
    opted = recipe.kv_cache_strategy_hardware.get(store_id, {}).get(profile_id)
    return (also or (profile.scalable and profile.brand in BRANDS)) and opted != "unsupported"


def choose(
    recipe: Recipe,
    variant_key: str,
    profile: HardwareProfile,
    profile_id: str,
    store_id: str,
    strategies: dict[str, Strategy],
) -> KvChoice | None:
    """One node per instance when the variant fits one node, else two (more for a GPU floor); the
    recommended serving strategy for that count, else the first compatible one of the right shape."""
    nodes = 1 if hw.fits_one_node(profile, recipe.variants[variant_key]) else 2
    serving = _serving_for(recipe, nodes, strategies)
    if serving is None and nodes == 2:
        nodes, serving = 1, _serving_for(recipe, 1, strategies)
    if serving is None:
        return None
    if strategies[serving].deploy_type == "multi_node":
        nodes = max(nodes, st.nodes_for(recipe, serving, profile.gpu_count, profile_id))
    return KvChoice(store_id, serving, nodes)


def commands(
    recipe: Recipe,
    variant_key: str,
    profile_id: str,
    stores: dict[str, KvStore],
    strategies: dict[str, Strategy],
    taxonomy: Taxonomy,
    also: bool = False,
    instances: int | None = None,
) -> list[KvCommand]:
    """Every KV-store deployment the site renders for one variant on one hardware, in the site's order
    (the kv_store files' names); none for an omni recipe (the site renders it no command). `also`: on
    hardware the site renders no store on, as the site would render it (the catalog's choice).
    `instances`: the page's instance count, instead of each store's default."""
    if recipe.is_omni:
        return []
    profile = taxonomy.hardware_profiles[profile_id]
    features = tuple(default_features(recipe, profile_id, variant_key))
    found = []
    for store_id in sorted(stores):
        if not eligible(recipe, profile, profile_id, store_id, also):
            continue
        choice = choose(recipe, variant_key, profile, profile_id, store_id, strategies)
        if choice is not None:
            tree = (stores, strategies, taxonomy)
            found.append(resolve(recipe, variant_key, profile_id, features, choice, *tree, instances))
    return found


def _serving_for(recipe: Recipe, nodes: int, strategies: dict[str, Strategy]) -> str | None:
    def fits(name: str) -> bool:
        strategy = strategies.get(name)
        if strategy is None or strategy.deploy_type == "pd_cluster":
            return False
        return (strategy.deploy_type == "multi_node") == (nodes > 1)

    recommended = st.recommend(recipe, nodes)
    if fits(recommended):
        return recommended
    return next((name for name in st.offered(recipe) if fits(name)), None)


def instance_count(store: KvStore) -> int:
    return store.default_instances or DEFAULT_INSTANCES


def resolve(
    recipe: Recipe,
    variant_key: str,
    profile_id: str,
    features: tuple[str, ...],
    choice: KvChoice,
    stores: dict[str, KvStore],
    strategies: dict[str, Strategy],
    taxonomy: Taxonomy,
    instance_total: int | None = None,
) -> KvCommand:
    store = stores[choice.store]
    profile = taxonomy.hardware_profiles[profile_id]
    strategy = strategies[choice.serving]
    count = instance_total or instance_count(store)
    selection = Selection(recipe, variant_key, choice.serving, profile_id, features, choice.node_count)
    multi = strategy.deploy_type == "multi_node" and choice.node_count > 1

    env = build_env(selection, strategy, profile, None, store.vllm.env)  # every rank of every instance
    # A multi-node serving strategy: the head, then each follower rank; else the one process.
    ranks = [("head" if r == 0 else "worker", r) for r in range(choice.node_count)] if multi else [(None, 1)]

    def instance(number: int) -> Instance:
        kv = KvInstance(store, f"${instance_setting(number)}" if count > 1 else HEAD)
        flags = [
            build_args(selection, strategy, profile, node_role=node_role, rank=rank, kv=kv)
            for node_role, rank in ranks
        ]
        return Instance(tuple(Process(tuple(dedupe(args)), env) for args in flags))

    instances = tuple(instance(number) for number in range(1, count + 1))
    install = store.vllm.install
    if isinstance(install, dict):
        install = install.get(BRANDS.get(profile.brand, "")) or None
    service = store.mooncake_store_config
    return KvCommand(
        store_id=choice.store,
        store=store,
        variant=variant_key,
        hardware=profile_id,
        model=served_model(recipe, variant_key),
        serving=choice.serving,
        node_count=choice.node_count,
        instances=instances,
        env=env,
        install=install or None,
        master=store.mooncake_master.command or "mooncake_master",
        store_command=service.command if service else None,
        store_config=dict(service.config) if service else None,
        vllm_config=dict(store.mooncake_vllm_config.template),
        router=router_argv(store, count),
    )


def instance_setting(number: int) -> str:
    """The setting naming instance `number`'s address, with two instances or more: its ranks meet there, it
    listens there, the router calls it there."""
    return f"VLLM_INSTANCE_{number}"


def router_argv(store: KvStore, count: int) -> tuple[str, ...]:
    """`vllm-router --policy cache_aware` in front of every instance, as the site writes it; none for one."""
    if count < 2:
        return ()
    backends = [
        token
        for number in range(1, count + 1)
        for token in ("--backend-url", f"http://${instance_setting(number)}:{store.vllm.port}")
    ]
    return (
        "vllm-router",
        "--policy",
        store.router.policy,
        *backends,
        "--host",
        "$ROUTER_HOST",
        "--port",
        "$ROUTER_PORT",
        *ROUTER_TUNING,
    )
