"""What `factory generate` writes, gathered from the formats and options it writes (factory.render.registry):
each recipe's files, and the files over every image."""

from __future__ import annotations

from collections.abc import Sequence

from factory.base.outputs import OutputFile
from factory.blueprint import RecipePlan
from factory.project import Project
from factory.render.bake import BakeTarget
from factory.render.registry import written


def recipe_files(plan: RecipePlan) -> list[OutputFile]:
    """Each image's build context, then what every written format renders of each of its deployments."""
    formats = written()
    return [
        file
        for blueprint in plan.images
        for file in (
            *blueprint.image_files,
            *(f for d in blueprint.deployments for fmt in formats for f in fmt.render(blueprint, d)),
        )
    ]


def shared_files(project: Project, targets: Sequence[BakeTarget]) -> list[OutputFile]:
    """What every written format and option makes over every image planned (the bake file, the components)."""
    return [file for fmt in written() for file in fmt.finish(project, targets)]
