"""What every benchmark shares: a figure with its goal, the table they print, and a scratch copy of the
project that builds under its own image names (no real tag ever moves)."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from factory.blueprint import Blueprint
from factory.blueprint.select import select
from factory.generate.run import generate
from factory.project import Project, load_project

BENCH_SLUG = "{slug}-bench"


@dataclass(frozen=True)
class Figure:
    name: str
    value: float
    unit: str
    goal: str
    met: bool | None
    detail: str


def table(figures: list[Figure]) -> str:
    rows = [f"{'figure':66} {'value':>10} {'unit':6} {'goal':16} {'met':5} detail"]
    for f in figures:
        met = "-" if f.met is None else ("yes" if f.met else "NO")
        rows.append(f"{f.name:66} {f.value:>10} {f.unit:6} {f.goal:16} {met:5} {f.detail}")
    return "\n".join(rows)


@contextlib.contextmanager
def scratch_project(
    root: Path, model: str, change: Callable[[dict[str, Any]], None] | None = None
) -> Iterator[Project]:
    """A copy of the project whose recipe `model` builds under <slug>-bench: no real tag ever moves."""
    with tempfile.TemporaryDirectory(prefix="factory-bench-") as folder:
        copy = Path(folder)
        for name in ("recipes", "catalog", "images", "compose"):
            shutil.copytree(root / name, copy / name)
        if (root / ".factory.local.toml").exists():  # this machine's build settings
            shutil.copy(root / ".factory.local.toml", copy)
        path = copy / "recipes" / "models" / f"{model}.yaml"
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        data["meta"]["slug"] = BENCH_SLUG.format(slug=data["meta"]["slug"])
        if change:
            change(data)
        path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
        generate(load_project(copy))
        yield load_project(copy)


def blueprint(project: Project, hardware: str) -> Blueprint:
    return select(project, project.catalog.build_recipe(hardware), hardware, "default")[0]
