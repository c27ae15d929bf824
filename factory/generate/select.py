"""Finding blueprints for a command: one recipe's images on one hardware (`factory build`, `validate`,
`publish`, `sbom`), and one deployment of them (`factory show`)."""

from __future__ import annotations

from factory.base.errors import InputError
from factory.generate.blueprint import Blueprint, plan_recipe
from factory.plan.models import Deployment
from factory.project import Project


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
) -> tuple[Blueprint, Deployment]:
    """One deployment, as `factory show` prints it: the recommended one unless told otherwise."""
    loaded, named = project.tree.lookup(model)
    variant = variant or named or next(iter(loaded.recipe.variants))
    kv_store = strategy is not None and strategy in project.tree.kv_stores
    blueprint = select(project, model, hardware, variant, kv_store)[0]
    if strategy is None:
        chosen = next((d for d in blueprint.deployments if d.recommended), blueprint.deployments[0])
        strategy = chosen.strategy
    if nodes is not None:
        override = plan_recipe(project, loaded, nodes)
        for candidate in override.images:
            if (candidate.image.hardware, candidate.image.variant, candidate.kv_store) == (
                hardware,
                variant,
                kv_store,
            ):
                blueprint = candidate
    return blueprint, blueprint.deployment(strategy)
