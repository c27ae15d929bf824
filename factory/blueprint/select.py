"""Finding blueprints for a command: one recipe's images on one hardware (`factory build`, `validate`,
`publish`, `sbom`), and one deployment of them (`factory show`)."""

from __future__ import annotations

from factory.base.errors import InputError
from factory.blueprint import Blueprint, plan_recipe
from factory.plan import naming
from factory.plan.deployment import Deployment
from factory.project import Project
from factory.recipes.loader import LoadedRecipe
from factory.synthesis.kv_offload import offered, refusal


def select(
    project: Project, model: str, hardware: str, variant: str | None = None, kv_store: bool = False
) -> list[Blueprint]:
    """The blueprints of one recipe on one hardware: one variant, or every variant it has there (a variant's
    model id names that variant); its KV-store images instead with `kv_store`."""
    loaded, named = project.tree.lookup(model)
    variant = variant or named
    if hardware not in project.catalog.hardware:
        raise InputError(
            "unknown hardware", field="--hardware", value=hardware, valid=project.catalog.hardware
        )
    if variant is not None and variant not in loaded.recipe.variants:
        raise InputError(
            "unknown variant",
            file=loaded.path,
            field="--variant",
            value=variant,
            valid=loaded.recipe.variants,
        )
    found = [
        blueprint
        for blueprint in plan_recipe(project, loaded).images
        if blueprint.image.hardware == hardware
        and variant in (None, blueprint.image.variant)
        and blueprint.kv_store == kv_store
    ]
    if not found:
        skipped = [s.reason for s in plan_recipe(project, loaded).skipped if s.hardware == hardware]
        why = skipped[0] if skipped else "the recipe renders nothing on it"
        raise InputError(
            f"{loaded.recipe_id} has no image for this hardware: {why}",
            field="--hardware",
            value=hardware,
        )
    return found


def choose_deployment(
    project: Project,
    model: str,
    hardware: str,
    strategy: str | None = None,
    variant: str | None = None,
    nodes: int | None = None,
    kv_offload: str | None = None,
    instances: int | None = None,
) -> tuple[Blueprint, Deployment]:
    """One deployment, as `factory show` prints it: the recommended one unless told otherwise; with
    `kv_offload`, composed with that option of the site's KV-offload row, or refused with the gate; with
    `instances`, a KV store's deployment with that many vLLM instances."""
    loaded, named = project.tree.lookup(model)
    variant = variant or named or next(iter(loaded.recipe.variants))
    kv_store = strategy is not None and strategy in project.tree.kv_stores
    blueprint = select(project, model, hardware, variant, kv_store)[0]
    if strategy is None:
        chosen = next((d for d in blueprint.deployments if d.recommended), blueprint.deployments[0])
        strategy = chosen.strategy
    if instances is not None and not kv_store:
        raise InputError(
            f"--instances counts a KV store's vLLM instances; {strategy} is not a KV store",
            field="--strategy",
            value=strategy,
            valid=project.tree.kv_stores,
        )
    if nodes is None and kv_offload is None and instances is None:
        return blueprint, blueprint.deployment(strategy)
    if kv_offload is not None:
        _offload_composes(project, loaded, kv_offload, strategy, kv_store, hardware)
    if strategy not in {d.strategy for d in blueprint.deployments}:
        blueprint.deployment(strategy)  # refused with the strategies there are
    override = plan_recipe(project, loaded, nodes, kv_offload, instances)
    picked = f" with --kv-offload {kv_offload}" if kv_offload else ""
    picked += f" on --nodes {nodes}" if nodes else ""
    what = f"no {strategy} deployment of {blueprint.image.reference}{picked}"
    for refused in override.skipped:
        if (refused.hardware, refused.variant, refused.strategy) == (hardware, variant, strategy):
            raise InputError(
                f"{what}: {refused.reason}",
                field="--strategy",
                value=strategy,
            )
    wanted = (hardware, variant, kv_store)
    found = [c for c in override.images if (c.image.hardware, c.image.variant, c.kv_store) == wanted]
    if not found:
        raise InputError(what, field="--strategy")
    return found[0], found[0].deployment(strategy)


def _offload_composes(
    project: Project, loaded: LoadedRecipe, key: str, strategy: str, kv_store: bool, hardware: str
) -> None:
    """Refuse, saying why, a KV-offload option the site would not compose with this deployment: one the
    tree cannot offer by name, an omni recipe's (the site composes none), a KV store's (it sets the
    connector itself)."""
    taxonomy = project.tree.taxonomy
    naming.offload_key(key, taxonomy, project.tree.root / "taxonomy.yaml")
    if loaded.recipe.is_omni:
        raise InputError(
            f"the recipes site composes no KV-offload option with {loaded.recipe_id}'s omni commands",
            field="--kv-offload",
            value=key,
        )
    if kv_store:
        profile = taxonomy.hardware_profiles[hardware]
        why = refusal(key, taxonomy.kv_offload[key], loaded.recipe, strategy, "kv_store_lb", profile)
        raise InputError(f"no {strategy} deployment with {key}: {why}", field="--kv-offload")


def offload_options(project: Project, deployment: Deployment) -> list[str]:
    """The KV-offload options the site's page offers beside this deployment (`factory show --kv-offload`)."""
    tree = project.tree
    strategy = tree.strategies.get(deployment.strategy)
    if strategy is None or deployment.kv_offload is not None:  # a KV store, or already composed
        return []
    recipe = tree.recipes[deployment.image.recipe_id].recipe
    profile = tree.taxonomy.hardware_profiles[deployment.image.hardware]
    found = offered(tree.taxonomy.kv_offload, recipe, deployment.strategy, strategy, profile)
    return [key for key in found if naming.fits_a_name(key)]  # the others cannot be picked
