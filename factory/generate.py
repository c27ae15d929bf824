"""`factory generate`: write every blueprint's files into images/ and compose/, atomically, or check that
the files on disk are current."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from factory.blueprint import Blueprints, plan_project
from factory.plan.deployments import DEFAULT_NODES
from factory.project import Project
from factory.render.outputs import OUTPUT_ROOTS, OutputFile


@dataclass(frozen=True)
class Generated:
    """What one run of `factory generate` planned, and what it found stale (with --check)."""

    blueprints: Blueprints
    files: list[OutputFile]
    stale: list[str]
    checked: bool

    @property
    def summary(self) -> str:
        images, deployments = len(self.blueprints.images), len(self.blueprints.deployments)
        if self.checked:
            return f"up to date: {images} images, {deployments} deployments, {len(self.files)} files"
        return f"wrote {len(self.files)} files: {images} images, {deployments} deployments"


def generate(project: Project, check: bool = False, nodes: int = DEFAULT_NODES) -> Generated:
    """Plan everything, then write it (or, with `check`, compare it with what is on disk)."""
    blueprints = plan_project(project, nodes)
    files = blueprints.files()
    if check:
        return Generated(blueprints, files, stale_outputs(project.root, files), checked=True)
    write_outputs(project.root, files)
    return Generated(blueprints, files, [], checked=False)


def write_outputs(root: Path, files: list[OutputFile]) -> None:
    """Write every output root into a new folder, then swap it in: a failure leaves the old output intact,
    and files that are no longer generated disappear."""
    staged: list[tuple[Path, Path]] = []
    try:
        for top in OUTPUT_ROOTS:
            new = root / f".{top}.new-{os.getpid()}"
            shutil.rmtree(new, ignore_errors=True)
            new.mkdir()
            staged.append((new, root / top))
            for file in files:
                if file.path.parts[0] != top:
                    continue
                target = new.joinpath(*file.path.parts[1:])
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(file.content)
                target.chmod(0o755 if file.executable else 0o644)
    except BaseException:
        for new, _ in staged:
            shutil.rmtree(new, ignore_errors=True)
        raise
    for new, final in staged:
        old = final.with_name(f".{final.name}.old-{os.getpid()}")
        if final.exists():
            final.rename(old)
        new.rename(final)
        shutil.rmtree(old, ignore_errors=True)


def stale_outputs(root: Path, files: list[OutputFile]) -> list[str]:
    """What differs between the generated files and the tree: changed, missing and extra paths."""
    expected = {file.path.as_posix(): file for file in files}
    problems = []
    for path, file in sorted(expected.items()):
        on_disk = root / path
        if not on_disk.is_file():
            problems.append(f"missing: {path}")
        elif on_disk.read_bytes() != file.content:
            problems.append(f"changed: {path}")
        elif bool(on_disk.stat().st_mode & 0o100) != file.executable:
            problems.append(f"mode: {path}")
    for top in OUTPUT_ROOTS:
        for on_disk in sorted((root / top).rglob("*")) if (root / top).is_dir() else []:
            rel = on_disk.relative_to(root).as_posix()
            if on_disk.is_file() and rel not in expected:
                problems.append(f"not generated any more: {rel}")
    return problems
