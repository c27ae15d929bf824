"""`factory generate`: plan every recipe and write its files under the output folder, or check them.

A recipe that could not be planned is that recipe's problem: it keeps the files (and bake targets) it
generated before, recorded in the committed manifest, while every other recipe is regenerated. A recipe
whose inputs did not change since the last run is not planned again (factory.memory), as long as its
files are still on disk as they were written.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath

from factory.blueprint import RecipePlan, plan_recipe
from factory.errors import FactoryError
from factory.lock.published import read_record, record_file
from factory.lock.store import inputs_digest
from factory.memory import (
    Remembered,
    digest_of,
    intact,
    read_memory,
    recipe_inputs,
    shared_inputs,
    write_memory,
)
from factory.project import Project
from factory.recipes.loader import RecipeProblem
from factory.render import published_images
from factory.render.outputs import BakeTarget, OutputFile, bake_output
from factory.router.image import router_bake_targets, router_files
from factory.writer import stale_outputs, write_outputs

MANIFEST = PurePosixPath("images/.factory-manifest.json")


@dataclass(frozen=True)
class Generated:
    """What one run of `factory generate` made of the tree, and what it found stale (with --check)."""

    recipes: dict[str, Remembered]  # every recipe planned now or remembered, by id
    problems: list[RecipeProblem]
    files: int
    stale: list[str]
    checked: bool
    written: int = 0
    planned: int = 0  # recipes planned this run (the rest were unchanged and remembered)
    kept: list[str] = field(default_factory=list)  # files of recipes that could not be planned, kept

    @property
    def skipped(self) -> list[str]:
        return [line for entry in self.recipes.values() for line in entry.skipped]

    @property
    def findings(self) -> dict[str, list[str]]:
        merged: dict[str, list[str]] = {}
        for entry in self.recipes.values():
            for finding, images in entry.findings.items():
                merged.setdefault(finding, []).extend(images)
        return merged

    @property
    def summary(self) -> str:
        images = sum(entry.images for entry in self.recipes.values())
        deployments = sum(entry.deployments for entry in self.recipes.values())
        counts = f"{images} images, {deployments} deployments, {self.files} files"
        if self.checked:
            return f"up to date: {counts}"
        return (
            f"generated {counts} ({self.written} written, the rest unchanged;"
            f" {self.planned} of {len(self.recipes)} recipes planned, the rest unchanged since the last run)"
        )


@dataclass(frozen=True)
class RecipeOutput:
    """What one recipe generated: its files and its images' bake targets (the manifest's entry)."""

    files: list[str]
    bake: list[BakeTarget]


def generate(project: Project, check: bool = False, nodes: int | None = None) -> Generated:
    """Plan what changed, then write it (or, with `check`, compare everything with what is on disk)."""
    shared = shared_inputs(project, nodes)
    memory = read_memory(project.out)
    entries: dict[str, Remembered] = {}
    fresh: list[OutputFile] = []
    problems = list(project.tree.problems)
    planned = 0
    for recipe_id, loaded in project.tree.recipes.items():
        key = recipe_inputs(project, loaded, shared)
        known = memory.get(recipe_id)
        if known is not None and known.inputs == key and intact(project.out, known):
            entries[recipe_id] = known
            continue
        try:
            plan = plan_recipe(project, loaded, nodes)
        except FactoryError as exc:
            problems.append(RecipeProblem(loaded.path, recipe_id, exc))
            continue
        files = [file for blueprint in plan.images for file in blueprint.files]
        fresh += files
        planned += 1
        entries[recipe_id] = remember(plan, key, files)
    outputs = {recipe_id: RecipeOutput(sorted(e.files), e.bake) for recipe_id, e in entries.items()}
    previous = read_manifest(project.out)
    for problem in problems:  # a recipe that turned bad keeps what it generated before
        if problem.recipe_id in previous:
            outputs[problem.recipe_id] = previous[problem.recipe_id]
    kept = sorted(path for p in problems for path in outputs.get(p.recipe_id, RecipeOutput([], [])).files)
    # The PD router's image (one for every pd_cluster deployment) is built beside the vLLM images.
    targets = [t for o in outputs.values() for t in o.bake] + router_bake_targets(project)
    shared_files = [bake_output(targets), _manifest_file(outputs), *router_files(project)]
    shared_files.append(_published_images(project, targets))
    expected = {path for entry in entries.values() for path in entry.files} | set(kept)
    expected |= {file.path.as_posix() for file in shared_files}
    count = len(expected) - len(kept)
    if check:
        stale = lock_problems(project) + stale_outputs(project.out, [*fresh, *shared_files], expected)
        return Generated(entries, problems, count, stale, True, planned=planned, kept=kept)
    written = write_outputs(project.out, [*fresh, *shared_files], expected)
    if planned or set(entries) != set(memory):
        write_memory(project.out, entries)
    return Generated(entries, problems, count, [], False, written, planned, kept)


def _published_images(project: Project, targets: list[BakeTarget]) -> OutputFile:
    """The kustomize component pinning published images: read from the record on every run (one small
    file), so a publish shows in the manifests without planning any recipe again."""
    path = record_file(project.lock_path)
    out = project.out.resolve()
    # Named from the output folder where it lives there (a --recipes tree's lock/), never by machine path.
    source = path.resolve().relative_to(out).as_posix() if path.resolve().is_relative_to(out) else None
    return published_images.component(read_record(path), targets, source or project.relative(path))


def lock_problems(project: Project) -> list[str]:
    """A missing lock, or one made from other recipes or another catalog, is stale output too. (The check
    compares digests only: it never asks the package index, so a new upstream release cannot fail it.)"""
    if project.lock is None:
        return [f"missing: {project.lock_path} (run `factory lock`)"]
    if project.lock.inputs != inputs_digest(project.tree.root, project.catalog_path.parent):
        return [
            f"stale: {project.lock_path} was made from other recipes or another catalog (run `factory lock`)"
        ]
    return []


def remember(plan: RecipePlan, inputs: str, files: list[OutputFile]) -> Remembered:
    findings: dict[str, list[str]] = {}
    for blueprint in plan.images:
        for finding in blueprint.findings:
            findings.setdefault(str(finding), []).append(f"{blueprint.image.slug}:{blueprint.image.tag}")
    return Remembered(
        inputs=inputs,
        files={file.path.as_posix(): (digest_of(file.content), file.executable) for file in files},
        bake=[BakeTarget.of(bp.image) for bp in plan.images if bp.image.install is not None],
        images=len(plan.images),
        deployments=sum(len(blueprint.deployments) for blueprint in plan.images),
        skipped=[f"{skipped.what}: {skipped.reason}" for skipped in plan.skipped],
        findings=findings,
    )


def read_manifest(out: Path) -> dict[str, RecipeOutput]:
    """recipe id -> what it generated last time (empty when there is no manifest, or it is unreadable)."""
    try:
        data = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
        return {
            str(recipe_id): RecipeOutput(
                [str(path) for path in entry["files"]],
                [BakeTarget(**{**target, "tags": tuple(target["tags"])}) for target in entry["bake"]],
            )
            for recipe_id, entry in data["recipes"].items()
        }
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def _manifest_file(outputs: dict[str, RecipeOutput]) -> OutputFile:
    body = {
        "comment": "DO NOT EDIT: written by `factory generate`: what each recipe generated",
        "recipes": {
            recipe_id: {"files": output.files, "bake": [asdict(target) for target in output.bake]}
            for recipe_id, output in sorted(outputs.items())
        },
    }
    return OutputFile(MANIFEST, (json.dumps(body, indent=1) + "\n").encode())
