"""`factory generate`: write every blueprint's files under the output folder, or check the files there.

Writing compares first: a file whose bytes and mode are already right is left alone, others are written
beside their place and renamed over it (a reader never sees half a file), and files no longer generated
are removed. A manifest records which recipe made which files, so a recipe that turned bad keeps its
earlier files untouched while every other recipe is regenerated. Every path is checked to stay inside
the output folder.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath

from factory.blueprint import Blueprints, RecipePlan, plan_project
from factory.errors import InputError
from factory.project import Project
from factory.render.outputs import OUTPUT_ROOTS, BakeTarget, OutputFile, bake_output

MANIFEST = PurePosixPath("images/.factory-manifest.json")


@dataclass(frozen=True)
class Generated:
    """What one run of `factory generate` planned, and what it found stale (with --check)."""

    blueprints: Blueprints
    files: list[OutputFile]
    stale: list[str]
    checked: bool
    written: int = 0
    kept: list[str] = field(
        default_factory=list
    )  # files of recipes that could not be planned, kept as they were

    @property
    def summary(self) -> str:
        images, deployments = len(self.blueprints.images), len(self.blueprints.deployments)
        counts = f"{images} images, {deployments} deployments, {len(self.files)} files"
        if self.checked:
            return f"up to date: {counts}"
        return f"generated {counts} ({self.written} written, the rest unchanged)"


@dataclass(frozen=True)
class RecipeOutput:
    """What one recipe generated: its files and its images' bake targets (the manifest's entry)."""

    files: list[str]
    bake: list[BakeTarget]


def generate(project: Project, check: bool = False, nodes: int | None = None) -> Generated:
    """Plan everything, then write it (or, with `check`, compare it with what is on disk)."""
    blueprints = plan_project(project, nodes)
    outputs = {plan.loaded.recipe_id: _output_of(plan) for plan in blueprints.recipes}
    previous = read_manifest(project.out)
    for problem in blueprints.problems:  # a recipe that turned bad keeps what it generated before
        if problem.recipe_id in previous:
            outputs[problem.recipe_id] = previous[problem.recipe_id]
    kept = {
        path
        for problem in blueprints.problems
        for path in outputs.get(problem.recipe_id, RecipeOutput([], [])).files
    }
    targets = [target for output in outputs.values() for target in output.bake]
    files = [*blueprints.files(), bake_output(targets), _manifest_file(outputs)]
    if check:
        return Generated(blueprints, files, stale_outputs(project.out, files, kept), True, kept=sorted(kept))
    written = write_outputs(project.out, files, kept)
    return Generated(blueprints, files, [], False, written, sorted(kept))


def _output_of(plan: RecipePlan) -> RecipeOutput:
    files = sorted(f.path.as_posix() for blueprint in plan.images for f in blueprint.files)
    bake = [BakeTarget.of(bp.image) for bp in plan.images if bp.image.install is not None]
    return RecipeOutput(files, bake)


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


def _target(out: Path, path: PurePosixPath) -> Path:
    """Where a generated file goes: always inside the output folder, under images/ or compose/."""
    target = (out / path).resolve()
    roots = [(out / top).resolve() for top in OUTPUT_ROOTS]
    if path.is_absolute() or ".." in path.parts or not any(target.is_relative_to(r) for r in roots):
        raise InputError("a generated path would land outside the output folder", value=str(path), file=out)
    return target


def write_outputs(out: Path, files: list[OutputFile], kept: set[str] | None = None) -> int:
    """Write what changed, remove what is no longer generated; returns how many files were written."""
    targets = [(file, _target(out, file.path)) for file in files]  # every path checked before any write
    written = 0
    for file, target in targets:
        if _same(target, file):
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        try:
            temporary.write_bytes(file.content)
            temporary.chmod(0o755 if file.executable else 0o644)
            temporary.replace(target)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
        written += 1
    expected = {file.path.as_posix() for file in files} | (kept or set())
    for path in _on_disk(out):
        if path not in expected:
            (out / path).unlink()
    _remove_empty_folders(out)
    return written


def _same(target: Path, file: OutputFile) -> bool:
    try:
        if bool(target.stat().st_mode & 0o100) != file.executable:
            return False
        return target.read_bytes() == file.content
    except OSError:
        return False


def _on_disk(out: Path) -> list[str]:
    found = []
    for top in OUTPUT_ROOTS:
        for folder, _, names in os.walk(out / top):
            for name in names:
                found.append((Path(folder) / name).relative_to(out).as_posix())
    return sorted(found)


def _remove_empty_folders(out: Path) -> None:
    for top in OUTPUT_ROOTS:
        for folder, _, _ in os.walk(out / top, topdown=False):  # deepest first, so parents empty in turn
            path = Path(folder)
            if path != out / top and not any(path.iterdir()):
                path.rmdir()


def stale_outputs(out: Path, files: list[OutputFile], kept: set[str] | None = None) -> list[str]:
    """What differs between the generated files and the folder: changed, missing and extra paths."""
    problems = []
    for file in sorted(files, key=lambda f: f.path):
        target = out / file.path
        if not target.is_file():
            problems.append(f"missing: {file.path}")
        elif target.read_bytes() != file.content:
            problems.append(f"changed: {file.path}")
        elif bool(target.stat().st_mode & 0o100) != file.executable:
            problems.append(f"mode: {file.path}")
    expected = {file.path.as_posix() for file in files} | (kept or set())
    problems += [f"not generated any more: {path}" for path in _on_disk(out) if path not in expected]
    return problems
