"""Planning a recipe into blueprints (factory.blueprint.model): every variant on every hardware it renders
on, each image finished once with its deployments. A recipe that cannot be planned is that recipe's problem
alone: the others are planned as usual."""

from __future__ import annotations

from factory.base.errors import FactoryError
from factory.blueprint.choices import offload_notes, with_nodes, with_offload
from factory.blueprint.model import Blueprint, Blueprints, RecipePlan
from factory.catalog.schema import Mooncake, Vendor
from factory.lock.mooncake import floor as mooncake_floor
from factory.lock.pins import pinned_vllm
from factory.lock.router import PLATFORM as ROUTER_PLATFORM
from factory.lockfile.model import Release
from factory.plan import naming
from factory.plan.cache import model_cache
from factory.plan.commands import PlannedCommands, common_env, default_command, plan_commands
from factory.plan.deployment import Deployment, Skipped
from factory.plan.fleet import plan_fleet
from factory.plan.hashing import hashed_context
from factory.plan.images import kv_image_spec, locked_release, plan_image_spec, weights_of
from factory.plan.kv import plan_kv
from factory.plan.models import ImagePlan, ImageSpec
from factory.plan.omni import plan_omni
from factory.plan.preflight import preflight
from factory.plan.router import router_image
from factory.plan.running import process_groups
from factory.plan.runspec import Run
from factory.plan.versions import judged_version
from factory.project import Project
from factory.recipes.loader import LoadedRecipe, RecipeProblem, RecipeTree
from factory.synthesis import kv_store
from factory.synthesis.kv_store import KvCommand
from factory.synthesis.matrix import Combination, Refusal, combinations, hardware_for

# vllm-router is its own program, in an image of its own (factory/router/); before `factory lock` locked it, a
# setting names the image to run.
ROUTER_IMAGE = "$VLLM_ROUTER_IMAGE"


def plan_project(project: Project, nodes: int | None = None) -> Blueprints:
    """Plan every recipe of the tree; a recipe that fails is recorded, and the rest go on."""
    plans, problems = [], list(project.tree.problems)
    for loaded in project.tree.recipes.values():
        try:
            plans.append(plan_recipe(project, loaded, nodes))
        except FactoryError as exc:
            problems.append(RecipeProblem(loaded.path, loaded.recipe_id, exc))
    return Blueprints(tuple(plans), tuple(problems))


def plan_recipe(
    project: Project,
    loaded: LoadedRecipe,
    nodes: int | None = None,
    kv_offload: str | None = None,
    instances: int | None = None,
) -> RecipePlan:
    """Every image of one recipe (variant x hardware) with its deployments, and what is left out; with
    `kv_offload`, each deployment composed with that option of the site's KV-offload row (and no KV store,
    which owns the connector itself); with `instances`, KV stores of that many vLLM instances."""
    recipe, tree = loaded.recipe, project.tree
    for brand in _brands(tree):  # a bad pin is the recipe's problem even before the lock is made
        pinned_vllm(loaded, project.catalog, brand)
    images: list[Blueprint] = []
    skipped: list[Skipped] = []
    kv: list[KvCommand] = []
    only = project.catalog.only_hardware.get(loaded.recipe_id)
    for variant in recipe.variants:
        model = recipe.variants[variant].model_id or recipe.model.model_id
        for hardware in hardware_for(recipe, variant, tree.taxonomy):
            if only is not None and hardware not in only:
                continue
            if recipe.is_omni:
                combos: list[Combination] = []
                refusals: list[Refusal] = []
            else:
                combos, refusals = combinations(recipe, variant, hardware, tree.strategies, tree.taxonomy)
            base = {"recipe": loaded.recipe_id, "model": model, "variant": variant, "hardware": hardware}
            skipped += [Skipped(**base, strategy=r.strategy, reason=r.reason) for r in refusals]
            combos, too_few = with_nodes(combos, nodes)
            skipped += [Skipped(**base, strategy=c.strategy, reason=why) for c, why in too_few]
            if kv_offload is not None:
                combos, refused = with_offload(combos, kv_offload, loaded, tree)
                skipped += [Skipped(**base, strategy=c.strategy, reason=why) for c, why in refused]
            if hardware not in project.catalog.hardware:
                profile = tree.taxonomy.hardware_profiles[hardware]
                why = f"the factory cannot build for {profile.brand} {profile.gen} hardware: no catalog entry"
                skipped += [Skipped(**base, strategy=c.strategy, reason=why) for c in combos] or [
                    Skipped(**base, reason=why)
                ]
                continue
            vendor = project.catalog.vendors[project.catalog.hardware[hardware].vendor]
            also = vendor.mooncake is not None and vendor.mooncake.factory_renders
            stores = kv_store.commands(
                recipe, variant, hardware, tree.kv_stores, tree.strategies, tree.taxonomy, also, instances
            )
            stores = stores if kv_offload is None else []  # a KV store sets the connector itself
            kv += stores
            if combos or recipe.is_omni:
                release = locked_release(project, loaded, variant, hardware)
                images.append(finish(project, loaded, variant, hardware, combos, release))
                if stores:
                    images.append(finish_kv(project, loaded, images[-1], stores, release))
    return RecipePlan(loaded, tuple(images), tuple(skipped), tuple(kv))


def _published(project: Project, image: ImagePlan) -> ImagePlan:
    """The plan with where it runs from once published from these very inputs (the publish record)."""
    reference = project.published.run_reference(image.reference, image.immutable_tag)
    return image if reference is None else image.model_copy(update={"published": reference})


def _brands(tree: RecipeTree) -> set[str]:
    return {profile.brand for profile in tree.taxonomy.hardware_profiles.values()}


def finish(
    project: Project,
    loaded: LoadedRecipe,
    variant: str,
    hardware: str,
    combos: list[Combination],
    release: Release,
) -> Blueprint:
    """Plan one image and everything that follows from it, once."""
    model = loaded.recipe.variants[variant].model_id or loaded.recipe.model.model_id
    weights, _ = weights_of(project, loaded, model)
    brand = project.tree.taxonomy.hardware_profiles[hardware].brand
    pinned = pinned_vllm(loaded, project.catalog, brand)
    judged = judged_version(loaded, variant, hardware, brand, release.vllm, pinned)
    if loaded.recipe.is_omni:
        planned = plan_omni(project, loaded, variant, hardware, weights)
    else:
        planned = [plan_commands(project, loaded, combo, judged.version, weights) for combo in combos]
    spec = plan_image_spec(
        project, loaded, variant, hardware, release, default_command(planned, weights), common_env(planned)
    )
    server = project.catalog.server
    image, image_files = hashed_context(spec, loaded.bundled_model_dir)
    image = _published(project, image)
    vendor = project.catalog.vendors[image.vendor]
    run = _run(project, loaded, image, vendor)
    deployments = tuple(_deployment(project, image, vendor, run, p) for p in planned)
    return Blueprint(
        image=image,
        vendor=vendor,
        server=server,
        deployments=deployments,
        image_files=tuple(image_files),
        findings=tuple(preflight(project, image, [role for d in deployments for role in d.roles])),
        notes=loaded.notes,
        ignored=tuple(key.field for key in loaded.ignored),
        judged=judged,
    )


def finish_kv(
    project: Project, loaded: LoadedRecipe, plain: Blueprint, commands: list[KvCommand], release: Release
) -> Blueprint:
    """The KV-store image beside a plain image (the same layers, then Mooncake's) and its deployments, one
    per kv_store file the site renders for this variant on this hardware."""
    fields = plain.image.model_dump(exclude={"inputs_hash", "published"})
    least = mooncake_floor([command.store for command in commands])
    spec = kv_image_spec(project, ImageSpec(**fields), str(least) if least else None)
    image, image_files = hashed_context(spec, loaded.bundled_model_dir)
    image = _published(project, image)
    vendor = plain.vendor
    mooncake = vendor.mooncake or Mooncake(install="amd")  # no wheel: the image says it is not buildable
    run = _run(project, loaded, image, vendor).model_copy(update={"mooncake": project.catalog.mooncake})
    deployments = []
    for kv in commands:
        planned = plan_kv(project, loaded, kv, plain.judged.version, image.weights, mooncake)
        groups = process_groups(
            planned.roles,
            run,
            image=image.reference,
            router_image=_router(project),
            host_network=True,  # RDMA, and instances whose ranks meet across nodes
            platforms=(image.platform, ROUTER_PLATFORM),
            deployment=naming.deployment_name(image.slug, image.hardware, image.variant, kv.store_id),
        )
        deployments.append(
            Deployment(
                image=image,
                strategy=kv.store_id,
                strategy_title=kv.store.display_name or kv.store_id,
                deploy_type="kv_store_lb",
                nodes=kv.node_count,
                roles=list(planned.roles),
                host_network=True,
                vendor=vendor,
                deviations=list(planned.deviations),
                recommended=False,
                run=groups,
                fleet=plan_fleet(project.catalog.fleet, "kv_store_lb", kv.node_count),
            )
        )
    return Blueprint(
        image=image,
        vendor=vendor,
        server=plain.server,
        deployments=tuple(deployments),
        image_files=tuple(image_files),
        findings=plain.findings,
        notes=plain.notes,
        ignored=plain.ignored,
        judged=plain.judged,
        kv_store=True,
    )


def _deployment(
    project: Project, image: ImagePlan, vendor: Vendor, run: Run, planned: PlannedCommands
) -> Deployment:
    combo = planned.combination
    strategy = project.tree.strategies.get(combo.strategy)
    host_network = planned.deploy_type != "single_node"
    option = project.tree.taxonomy.kv_offload.get(combo.kv_offload) if combo.kv_offload else None
    groups = process_groups(
        planned.roles,
        run,
        image=image.reference,
        router_image=_router(project) if planned.deploy_type == "pd_cluster" else ROUTER_IMAGE,
        host_network=host_network,
        platforms=(image.platform, ROUTER_PLATFORM),
        deployment=naming.deployment_name(
            image.slug, image.hardware, image.variant, naming.layout(combo.strategy, combo.kv_offload)
        ),
    )
    return Deployment(
        image=image,
        strategy=combo.strategy,
        strategy_title=(strategy.display_name if strategy else "") or combo.strategy,
        deploy_type=planned.deploy_type,
        nodes=combo.node_count,
        roles=list(planned.roles),
        host_network=host_network,
        vendor=vendor,
        deviations=list(planned.deviations),
        recommended=combo.recommended,
        run=groups,
        fleet=plan_fleet(project.catalog.fleet, planned.deploy_type, combo.node_count),
        kv_offload=combo.kv_offload,
        kv_offload_notes=offload_notes(combo.kv_offload, option) if combo.kv_offload and option else (),
    )


def _run(project: Project, loaded: LoadedRecipe, image: ImagePlan, vendor: Vendor) -> Run:
    """What every process of the image has in common, from the catalog, and its model cache's size."""
    server = project.catalog.server
    cache_gb, basis = model_cache(image.weights_gb, loaded.bundled_model_dir, server.model_cache_default_gb)
    return Run(
        vendor=vendor,
        server=server,
        router=project.catalog.router,
        gpus_per_node=image.gpus_per_node,
        start_period_s=image.start_period_s,
        cache_gb=cache_gb,
        cache_basis=basis,
    )


def _router(project: Project) -> str:
    router = router_image(project)
    return router.reference if router is not None else ROUTER_IMAGE
