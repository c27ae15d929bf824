"""Blueprints: each image finished once, for every later stage to read and none to recompute.

A Blueprint holds an image's plan with its inputs hash, every deployment of it (each strategy, each node,
each PD pool), its build context, and what the preflight says about it. generate, build, validate, publish,
show and renderings take blueprints; none of them plans or hashes again; the output formats
(factory.formats) print their deployments.
"""

from __future__ import annotations

from dataclasses import dataclass

from factory.base.errors import InputError
from factory.base.outputs import OutputFile
from factory.catalog.schema import Server, Vendor
from factory.plan.deployment import Deployment, Skipped
from factory.plan.models import ImagePlan
from factory.plan.preflight import Finding
from factory.plan.versions import JudgedVersion
from factory.recipes.loader import LoadedRecipe, RecipeProblem
from factory.synthesis.kv_store import KvCommand

_NOT_JUDGED = JudgedVersion(None, "not judged")


@dataclass(frozen=True)
class Blueprint:
    image: ImagePlan
    vendor: Vendor  # what a container needs to see this image's GPUs
    server: Server  # the API port and health check every image serves with
    deployments: tuple[Deployment, ...]
    image_files: tuple[OutputFile, ...]  # the build context under images/ (none when unbuildable)
    findings: tuple[Finding, ...]
    notes: tuple[str, ...]  # what the recipe sets that the factory does not use, with why
    ignored: tuple[str, ...] = ()  # the recipe's keys the site does not read (factory.recipes.ignored)
    # The vLLM version the deviation rules were judged by (the lock's, else the recipe's floor)
    judged: JudgedVersion = _NOT_JUDGED
    kv_store: bool = False  # a KV-store image (Mooncake's layer on the plain image) and its deployments

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
class RecipePlan:
    """One recipe's blueprints and what it leaves out, or why it could not be planned at all."""

    loaded: LoadedRecipe
    images: tuple[Blueprint, ...] = ()
    skipped: tuple[Skipped, ...] = ()
    # The site's Mooncake KV-store deployments on hardware the factory builds for: their commands only
    # (no image, compose file or manifest is generated from them yet).
    kv_stores: tuple[KvCommand, ...] = ()


@dataclass(frozen=True)
class Blueprints:
    """Everything a recipes tree and the catalog define, what they leave out, and which recipes failed."""

    recipes: tuple[RecipePlan, ...]
    problems: tuple[RecipeProblem, ...]

    @property
    def images(self) -> list[Blueprint]:
        return [blueprint for plan in self.recipes for blueprint in plan.images]

    @property
    def skipped(self) -> list[Skipped]:
        return [skipped for plan in self.recipes for skipped in plan.skipped]

    @property
    def kv_stores(self) -> list[tuple[LoadedRecipe, KvCommand]]:
        return [(plan.loaded, kv) for plan in self.recipes for kv in plan.kv_stores]

    @property
    def deployments(self) -> list[Deployment]:
        return [deployment for blueprint in self.images for deployment in blueprint.deployments]
