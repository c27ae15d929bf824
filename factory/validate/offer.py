"""What an image and this machine offer the live probes: the image's tasks and vendor, whether the engine
gives a container that vendor's GPUs, a one-node deployment to start, and whether the static checks passed.
Which probes run is decided from this alone (checklist.decide)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from factory.blueprint import Blueprint
from factory.catalog.schema import Vendor
from factory.engine.connect import EngineFacts
from factory.plan.deployment import Deployment


@dataclass(frozen=True)
class GpuAccess:
    available: bool
    why: str


@dataclass(frozen=True)
class Offer:
    tasks: frozenset[str]  # tasks_of(the recipe's meta.tasks)
    gpu: GpuAccess  # whether this engine gives a container the image's vendor's GPUs (or needs none)
    one_node: bool  # the image has a one-node deployment for validation to start
    static_passed: bool  # the static checks inside the image passed: a broken image is not started
    # Why the engine cannot run the image natively (another CPU platform: only under emulation, where no GPU
    # driver is): None when it can.
    foreign: str | None = None

    @staticmethod
    def of(blueprint: Blueprint, facts: EngineFacts, static_passed: bool) -> Offer:
        """What this image offers on the engine `facts` describe."""
        platform = blueprint.image.platform
        foreign = (
            f"the engine is {facts.platform}: a {platform} image runs here only under emulation (QEMU),"
            " where no GPU driver is; it is served on its own platform's hardware"
            if platform != facts.platform
            else None
        )
        return Offer(
            tasks_of(blueprint.image.tasks),
            gpu_access(blueprint.vendor, facts),
            one_node(blueprint) is not None,
            static_passed,
            foreign,
        )


def one_node(blueprint: Blueprint) -> Deployment | None:
    """The image's one-node deployment: what validation starts."""
    return next((plan for plan in blueprint.deployments if plan.nodes == 1), None)


def tasks_of(declared: Sequence[str]) -> frozenset[str]:
    """An image's tasks from its recipe's meta.tasks: a recipe that names none is a text model."""
    return frozenset(declared) or frozenset({"text"})


def gpu_access(vendor: Vendor, facts: EngineFacts) -> GpuAccess:
    """Whether the engine can give a container this vendor's GPUs, by the check the catalog names."""
    check = vendor.gpu_check
    if check is None:
        return GpuAccess(True, f"{vendor.name}: no GPU needed")
    if check.runtime:
        if check.runtime in facts.runtimes:
            return GpuAccess(True, f"the engine has the {check.runtime} container runtime ({vendor.name})")
        runtimes = ", ".join(facts.runtimes)
        return GpuAccess(
            False,
            f"the engine has no {check.runtime} container runtime for {vendor.name} GPUs"
            f" (runtimes: {runtimes})",
        )
    assert check.device is not None  # the catalog's GpuCheck names a runtime or a device
    local = os.environ.get("DOCKER_HOST", "unix://").startswith("unix://")
    if (local and Path(check.device).exists()) or (
        check.remote_env and os.environ.get(check.remote_env) == "1"
    ):
        return GpuAccess(True, f"{check.device} is present")
    remote = f" (on a remote engine set {check.remote_env}=1)" if check.remote_env else ""
    return GpuAccess(False, f"no {vendor.name} GPU: {check.device} is absent{remote}")
