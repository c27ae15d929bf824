"""Blueprints: each image finished once, for every later stage to read and none to recompute.

A Blueprint holds an image's plan with its inputs hash, every deployment of it (each strategy, each
node), every file `factory generate` writes for it, and what the preflight says about it. generate,
build, validate, publish and show take blueprints; none of them plans or hashes again.
"""

from __future__ import annotations

from dataclasses import dataclass

from factory.catalog.schema import Server, Vendor
from factory.errors import InputError, RefusedError
from factory.plan.deployments import (
    DEFAULT_NODES,
    default_nodes,
    hardware_targets,
    plan_deployment,
    plan_deployments,
)
from factory.plan.images import plan_image_spec
from factory.plan.models import Deployment, ImagePlan, Skipped
from factory.plan.pins import pinned_vllm
from factory.plan.preflight import Finding, preflight
from factory.project import Project
from factory.recipes.loader import LoadedRecipe
from factory.render.hashing import hashed_context
from factory.render.outputs import OutputFile, bake_output, compose_outputs


@dataclass(frozen=True)
class Blueprint:
    image: ImagePlan
    vendor: Vendor  # what a container needs to see this image's GPUs
    server: Server  # the API port and health check every image serves with
    deployments: tuple[Deployment, ...]
    image_files: tuple[OutputFile, ...]  # the build context under images/
    compose_files: tuple[OutputFile, ...]  # every deployment's files under compose/
    findings: tuple[Finding, ...]
    skipped: tuple[Skipped, ...]  # strategies of the recipe that do not fit this hardware, with why

    def deployment(self, strategy: str, nodes: int | None = None) -> Deployment:
        for deployment in self.deployments:
            if deployment.strategy == strategy and nodes in (None, deployment.nodes):
                return deployment
        raise InputError(
            f"no {strategy} deployment of {self.image.reference}"
            + (f" on {nodes} nodes" if nodes is not None else ""),
            field="--strategy",
            value=strategy,
            valid=sorted({d.strategy for d in self.deployments}),
        )


@dataclass(frozen=True)
class Blueprints:
    """Everything the project's recipes and catalog define, and what they leave out with why."""

    images: tuple[Blueprint, ...]
    skipped: tuple[Skipped, ...]

    @property
    def deployments(self) -> list[Deployment]:
        return [deployment for blueprint in self.images for deployment in blueprint.deployments]

    def files(self) -> list[OutputFile]:
        files = [file for blueprint in self.images for file in blueprint.image_files]
        files.append(bake_output([blueprint.image for blueprint in self.images]))
        files += [file for blueprint in self.images for file in blueprint.compose_files]
        return files


def finish(project: Project, loaded: LoadedRecipe, hardware: str, variant: str, nodes: int) -> Blueprint:
    """Plan one image and everything that follows from it, once."""
    server = project.catalog.server
    image, image_files = hashed_context(
        project.root, plan_image_spec(project, loaded, hardware, variant), server
    )
    deployments, skipped = plan_deployments(project, image, nodes)
    return Blueprint(
        image=image,
        vendor=project.catalog.vendors[image.vendor],
        server=server,
        deployments=tuple(deployments),
        image_files=tuple(image_files),
        compose_files=tuple(file for d in deployments for file in compose_outputs(d, server)),
        findings=tuple(preflight(project, image)),
        skipped=tuple(skipped),
    )


def plan_project(project: Project, nodes: int = DEFAULT_NODES) -> Blueprints:
    images: list[Blueprint] = []
    skipped: list[Skipped] = []
    for loaded in project.tree.recipes.values():
        pinned_vllm(loaded, project.catalog)  # a bad pin fails the whole run, before anything is written
        hardware_names, unbuildable = hardware_targets(project, loaded)
        skipped.extend(unbuildable)
        for hardware in hardware_names:
            for variant in loaded.recipe.variants:
                try:
                    blueprint = finish(project, loaded, hardware, variant, nodes)
                except RefusedError as exc:
                    skipped.append(
                        Skipped(what=f"{loaded.model_id} on {hardware} ({variant})", reason=str(exc))
                    )
                    continue
                images.append(blueprint)
                skipped.extend(blueprint.skipped)
    return Blueprints(tuple(images), tuple(skipped))


def select(
    project: Project, model: str, hardware: str, variant: str | None = None, nodes: int = DEFAULT_NODES
) -> list[Blueprint]:
    """The blueprints of one recipe on one hardware: one variant, or every variant of the recipe."""
    loaded = project.tree.recipe(model)
    variants = [variant] if variant else list(loaded.recipe.variants)
    return [finish(project, loaded, hardware, name, nodes) for name in variants]


def choose_deployment(
    project: Project,
    model: str,
    hardware: str,
    strategy: str | None = None,
    variant: str | None = None,
    nodes: int | None = None,
) -> tuple[Blueprint, Deployment]:
    """One deployment, as `factory show` prints it: the recipe's first variant and first strategy unless
    told otherwise, on one node for a single-node strategy and DEFAULT_NODES for a multi-node one."""
    loaded = project.tree.recipe(model)
    variant = variant or next(iter(loaded.recipe.variants))
    strategy = strategy or loaded.recipe.compatible_strategies[0]
    known = strategy in project.tree.strategies
    count = nodes if nodes is not None else (default_nodes(project, strategy) if known else 1)
    blueprint = finish(project, loaded, hardware, variant, count if count > 1 else DEFAULT_NODES)
    for deployment in blueprint.deployments:
        if deployment.strategy == strategy and deployment.nodes == count:
            return blueprint, deployment
    # Not among the blueprint's deployments: plan it alone, which names what is wrong with the request.
    return blueprint, plan_deployment(project, blueprint.image, strategy, count)
