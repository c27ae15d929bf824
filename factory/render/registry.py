"""Every output format and every option, by name: `factory generate` writes what those with an output root
render; `factory show --format NAME` and `factory renderings` print the others. Adding one is a module that
implements factory.render.protocol.OutputFormat and a line here."""

from __future__ import annotations

from factory.render.bake import BakeFormat
from factory.render.components.model_cache_claim import ModelCacheClaim
from factory.render.components.published_images import PublishedImages
from factory.render.compose import ComposeFormat
from factory.render.kubernetes.files import KubernetesFormat
from factory.render.protocol import OutputFormat
from factory.render.renderings import RenderingsFormat

FORMATS: tuple[OutputFormat, ...] = (ComposeFormat(), KubernetesFormat(), BakeFormat(), RenderingsFormat())
# Kustomize components a user switches on from a kustomization of their own.
OPTIONS: tuple[OutputFormat, ...] = (ModelCacheClaim(), PublishedImages())


def by_name(name: str) -> OutputFormat:
    return next(fmt for fmt in (*FORMATS, *OPTIONS) if fmt.name == name)


def written() -> tuple[OutputFormat, ...]:
    """The formats and options `factory generate` writes (those with an output root), in order."""
    return tuple(fmt for fmt in (*FORMATS, *OPTIONS) if fmt.writes is not None)
