"""The PD router's blueprint: its image (factory.plan.router) and its build context, which the build,
validate and publish stages read as they read every vLLM image's blueprint."""

from __future__ import annotations

from dataclasses import dataclass

from factory.base.errors import InputError
from factory.base.outputs import OutputFile
from factory.lock.router import lock_path
from factory.plan.router import RouterImage, router_files, router_image
from factory.plan.running import process_spec
from factory.plan.runspec import Run, RunSpec
from factory.project import Project
from factory.synthesis.options import read


@dataclass(frozen=True)
class RouterBlueprint:
    image: RouterImage
    image_files: tuple[OutputFile, ...]
    alone: RunSpec  # the router with no worker: what validation starts (it serves, and routes nowhere)


def router_blueprint(project: Project) -> RouterBlueprint | None:
    """The locked router's blueprint; None before `factory lock` locked the router."""
    image = router_image(project)
    if image is None:
        return None
    return RouterBlueprint(image, tuple(router_files(project)), _alone(project, image))


# The router listens on every address of its container, as the compose files start it (vllm-router's own
# default, 127.0.0.1, is unreachable through a published port).
ALONE_ARGS = ("--host", "0.0.0.0")


def _alone(project: Project, image: RouterImage) -> RunSpec:
    """The router's run spec with no worker, from the catalog's router facts (its port, its health check)."""
    catalog = project.catalog
    # The router needs no accelerator: the CPU vendor's run facts where the catalog has that vendor (a
    # catalog of GPU hardware only, as a user's may be, lends its first vendor's: no GPU is asked for).
    vendor = catalog.vendors.get("cpu") or next(iter(catalog.vendors.values()))
    run = Run(
        vendor=vendor,
        server=catalog.server,
        router=catalog.router,
        gpus_per_node=0,
        start_period_s=catalog.router.start_period_s,
        cache_gb=0.0,  # the router holds no model
        cache_basis="the router holds no model",
    )
    labels = {"ai.vllm.factory.component": "router"}
    args = list(ALONE_ARGS)
    return process_spec(
        run, image.reference, image.platform, "vllm-router", args, [], read(args), False, labels
    )


def locked_router(project: Project) -> RouterBlueprint:
    """The router's blueprint, or why there is none."""
    blueprint = router_blueprint(project)
    if blueprint is None:
        raise InputError("the PD router is not locked", file=lock_path(project), hint="run `factory lock`")
    return blueprint
