"""`factory generate`: plan every recipe and write its files under the output folder, or check them.

A recipe that could not be planned is that recipe's problem: it keeps the files (and bake targets) it
generated before, recorded in the committed manifest, while every other recipe is regenerated. A recipe
whose inputs did not change since the last run is not planned again (factory.generate.memory), as long as its
files are still on disk as they were written.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from json.encoder import encode_basestring_ascii
from pathlib import Path, PurePosixPath

from factory.base.errors import FactoryError
from factory.base.outputs import OutputFile, differences
from factory.blueprint.router import router_blueprint
from factory.generate.memory import (
    Remembered,
    intact,
    read_memory,
    recipe_inputs,
    shared_inputs,
    stamped,
    write_memory,
)
from factory.generate.outputs import shared_files as shared_outputs
from factory.generate.scan import Scanning, begin_scan
from factory.generate.workers import plan_all
from factory.generate.writer import write_outputs
from factory.lockfile.store import inputs_digest
from factory.project import Project
from factory.recipes.loader import RecipeProblem
from factory.render.bake import BakeTarget

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


def generate(
    project: Project, check: bool = False, nodes: int | None = None, scanning: Scanning | None = None
) -> Generated:
    """Plan what changed, on every core, writing each recipe's files as it is planned (or, with `check`,
    comparing everything with what is on disk); then the files every recipe shares. `scanning`: the output
    folder's scan, begun before the project was loaded (the command does: factory.generate.scan); else now."""
    scanning = scanning or begin_scan(project.out)  # in a process of its own, while the memory is read
    memory = read_memory(project.out)
    planning = _plan(project, nodes, memory, check, scanning)
    present = scanning.result()  # taken once, in _plan
    shared_files, expected, kept = _shared_files(project, planning)
    if check:
        stale = planning.stale + list(differences(project.out, shared_files))
        extra = [f"not generated any more: {path}" for path in sorted(present.files) if path not in expected]
        stale_lines = lock_problems(project) + [line for _, line in sorted(stale)] + extra
        return planning.result(len(expected) - len(kept), stale_lines, kept, check=True)
    written = write_outputs(project.out, shared_files, keep=expected, present=present.files)
    if planning.planned or planning.restamped or set(planning.entries) != set(memory):
        write_memory(project.out, planning.entries)  # with the stamps of what was just written
    return planning.result(len(expected) - len(kept), [], kept, written=planning.written + written)


@dataclass
class Planning:
    """What the pass over the recipes found: each recipe's entry (planned now or remembered), the problems,
    which recipes were planned, whether a remembered recipe's stamps changed, what the planned recipes'
    files cost (written) or how they differ (--check)."""

    entries: dict[str, Remembered] = field(default_factory=dict)
    problems: list[RecipeProblem] = field(default_factory=list)
    planned: set[str] = field(default_factory=set)
    restamped: bool = False
    written: int = 0
    stale: list[tuple[str, str]] = field(default_factory=list)

    def result(
        self, files: int, stale: list[str], kept: list[str], check: bool = False, written: int = 0
    ) -> Generated:
        return Generated(self.entries, self.problems, files, stale, check, written, len(self.planned), kept)


def _plan(
    project: Project, nodes: int | None, memory: dict[str, Remembered], check: bool, scanning: Scanning
) -> Planning:
    """Plan every recipe whose inputs or files changed (factory.generate.workers); remember the others."""
    shared = shared_inputs(project, nodes)
    planning = Planning(problems=list(project.tree.problems))
    remembered: dict[str, Remembered] = {}
    todo: dict[str, str] = {}
    keys = {
        recipe_id: recipe_inputs(project, loaded, shared)
        for recipe_id, loaded in project.tree.recipes.items()
    }
    present = scanning.result()  # the digests above were taken while it ran
    for recipe_id, key in keys.items():
        known = memory.get(recipe_id)
        found = intact(project.out, known, present) if known is not None and known.inputs == key else None
        if found is not None:
            remembered[recipe_id] = found
            planning.restamped |= found is not known
        else:
            todo[recipe_id] = key
    outcomes = {outcome.recipe_id: outcome for outcome in plan_all(project, nodes, check, todo)}
    for recipe_id, loaded in project.tree.recipes.items():  # in the tree's order, whoever planned what
        if recipe_id in remembered:
            planning.entries[recipe_id] = remembered[recipe_id]
            continue
        outcome = outcomes[recipe_id]
        if outcome.entry is None:
            problem = FactoryError(outcome.problem or "could not be planned")
            planning.problems.append(RecipeProblem(loaded.path, recipe_id, problem))
            continue
        planning.planned.add(recipe_id)
        planning.entries[recipe_id] = outcome.entry if outcome.written else stamped(outcome.entry, present)
        planning.written += outcome.written
        planning.stale += outcome.stale
    return planning


def _shared_files(project: Project, planning: Planning) -> tuple[list[OutputFile], set[str], list[str]]:
    """The files over every image (the formats' and options': the bake file, the components; generate's
    manifest; the router's), every path expected in the output folder, and the files kept for recipes that
    could not be planned."""
    outputs = {recipe_id: RecipeOutput(sorted(e.files), e.bake) for recipe_id, e in planning.entries.items()}
    previous = read_manifest(project.out) if planning.problems else {}  # 16 MB on the corpus: read if needed
    for problem in planning.problems:  # a recipe that turned bad keeps what it generated before
        if problem.recipe_id in previous:
            outputs[problem.recipe_id] = previous[problem.recipe_id]
    kept = sorted(
        path for p in planning.problems for path in outputs.get(p.recipe_id, RecipeOutput([], [])).files
    )
    # The PD router's image (one for every pd_cluster deployment) is built beside the vLLM images.
    router = router_blueprint(project)  # the PD router's image is built beside the vLLM images
    targets = [t for o in outputs.values() for t in o.bake]
    targets += [BakeTarget.of(router.image)] if router is not None else []
    shared_files = [*shared_outputs(project, targets), _manifest_file(outputs)]
    shared_files += router.image_files if router is not None else ()
    expected = {path for entry in planning.entries.values() for path in entry.files} | set(kept)
    expected |= {file.path.as_posix() for file in shared_files}
    return shared_files, expected, kept


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
            recipe_id: {"files": output.files, "bake": [target.as_data() for target in output.bake]}
            for recipe_id, output in sorted(outputs.items())
        },
    }
    return OutputFile(MANIFEST, (indented_json(body) + "\n").encode())


def indented_json(value: object, indent: str = "") -> str:
    """json.dumps(value, indent=1), byte for byte, with the C encoder for every string: with `indent`,
    json falls back to its Python encoder, which was a tenth of an unchanged corpus run here."""
    inner = indent + " "
    if isinstance(value, dict) and value:
        entries = (f"{inner}{json.dumps(key)}: {_indented_item(item, inner)}" for key, item in value.items())
        return "{\n" + ",\n".join(entries) + f"\n{indent}}}"
    if isinstance(value, list | tuple) and value:
        items: Iterable[str]
        if all(type(item) is str for item in value):  # a recipe's files: most of the manifest
            items = map(encode_basestring_ascii, value)  # what json.dumps does for a str, without the calls
        else:
            items = (indented_json(item, inner) for item in value)
        return "[\n" + inner + f",\n{inner}".join(items) + f"\n{indent}]"
    return json.dumps(value)


def _indented_item(value: object, indent: str) -> str:
    """A dict's value: text directly (a bake target's fields; a call and a json.dumps less each)."""
    return encode_basestring_ascii(value) if type(value) is str else indented_json(value, indent)
