"""The one protocol every output format implements, and every option a user switches on.

A format prints the run spec of a deployment (its processes, their commands, settings and start order) in one
file format; it decides nothing. It declares what it is (`name`, `writes`: the output root its files go
under, or None for a format that is printed, not written) and what it cannot express (`cannot_express`: run
spec field -> why), and fills in two methods:
  render(blueprint, deployment)  the files of one deployment (the blueprint: its image, its judged version)
  finish(project, targets)       the files over every image planned (`targets`: each image's bake target,
                                 also those of recipes `generate` remembered and did not plan again)
The core (factory.generate) decides what is current and when to write; a format only renders.

An option (a kustomize component such as the model-cache claim) is the same protocol, registered apart
(OPTIONS): its files sit beside the formats', and a user switches it on from a kustomization of their own.
Adding either is one module and one line in factory.render.registry.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from factory.base.outputs import OutputFile
from factory.blueprint import Blueprint
from factory.plan.deployment import Deployment
from factory.project import Project
from factory.render.bake import BakeTarget


class OutputFormat(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def writes(self) -> str | None: ...

    @property
    def cannot_express(self) -> Mapping[str, str]: ...

    def render(self, blueprint: Blueprint, deployment: Deployment) -> list[OutputFile]: ...

    def finish(self, project: Project, targets: Sequence[BakeTarget]) -> list[OutputFile]: ...


@dataclass(frozen=True)
class PerDeployment:
    """A format whose files are a function of one deployment (compose, Kubernetes)."""

    name: str
    writes: str | None
    files: Callable[[Deployment], list[OutputFile]]
    cannot_express: Mapping[str, str] = field(default_factory=dict)

    def render(self, blueprint: Blueprint, deployment: Deployment) -> list[OutputFile]:
        return self.files(deployment)

    def finish(self, project: Project, targets: Sequence[BakeTarget]) -> list[OutputFile]:
        return []


@dataclass(frozen=True)
class OverAllImages:
    """A format or option whose files are made once over every image planned (the bake file, a component)."""

    name: str
    writes: str | None
    files: Callable[[Project, Sequence[BakeTarget]], list[OutputFile]]
    cannot_express: Mapping[str, str] = field(default_factory=dict)

    def render(self, blueprint: Blueprint, deployment: Deployment) -> list[OutputFile]:
        return []

    def finish(self, project: Project, targets: Sequence[BakeTarget]) -> list[OutputFile]:
        return self.files(project, targets)
