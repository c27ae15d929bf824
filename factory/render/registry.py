"""Every output format and every option, by name: `factory generate` writes what those with an output root
render; `factory show --format NAME` and `factory renderings` print the others. Adding one is a module that
implements factory.render.protocol.OutputFormat and a line here."""

from __future__ import annotations

from factory.render import bake, compose, compose_gate, kubernetes, network_policy
from factory.render.components import (
    autoscale,
    inference_pool,
    model_cache_claim,
    monitoring,
    published_images,
    verify,
)
from factory.render.protocol import OutputFormat, OverAllImages, PerDeployment
from factory.render.renderings import RenderingsFormat

FORMATS: tuple[OutputFormat, ...] = (
    PerDeployment("compose", "compose", compose.files, compose.CANNOT_EXPRESS),
    PerDeployment("k8s", "k8s", kubernetes.files, kubernetes.CANNOT_EXPRESS),
    PerDeployment("network-policy", "k8s", network_policy.files),
    OverAllImages("bake", "images", lambda project, targets: [bake.bake_output(list(targets))]),
    RenderingsFormat(),
)
# Options: kustomize components a user switches on from a kustomization of their own, and the compose
# gate a published image's deployments get.
OPTIONS: tuple[OutputFormat, ...] = (
    OverAllImages(
        "model-cache-claim", "k8s", lambda project, _: [model_cache_claim.component(project.catalog.server)]
    ),
    OverAllImages("published-images", "k8s", published_images.files),
    OverAllImages("verify", "k8s", verify.files),
    # A published image's compose deployments verify it before it starts (compose.override.yaml).
    OverAllImages("compose-verify", "compose", compose_gate.files),
    PerDeployment("monitoring", "k8s", monitoring.files),
    PerDeployment("autoscale", "k8s", autoscale.files),
    PerDeployment("inference-pool", "k8s", inference_pool.files),
)


def by_name(name: str) -> OutputFormat:
    return next(fmt for fmt in (*FORMATS, *OPTIONS) if fmt.name == name)


def written() -> tuple[OutputFormat, ...]:
    """The formats and options `factory generate` writes (those with an output root), in order."""
    return tuple(fmt for fmt in (*FORMATS, *OPTIONS) if fmt.writes is not None)
