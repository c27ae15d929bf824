"""Planning the recipes that changed, on every core: each worker plans a recipe, writes its files (or, for
`--check`, compares them with the folder) and hands back what `generate` remembers of it.

Planning is pure Python and a recipe's files are its own, so recipes are independent work: on this
project's 2-core machines a cold corpus run was bound by one core before (the writer's thread only
overlapped the system calls). Workers are forked (they inherit the loaded project; nothing is pickled but
each recipe's id and what comes back), and a recipe's failure comes back as its message, as it would be
printed. Fewer than two recipes to plan, or one core, and it all happens in this process.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass

from factory.base.errors import FactoryError
from factory.base.outputs import differences
from factory.blueprint import plan_recipe
from factory.generate.memory import Remembered, digest_of, written_as
from factory.generate.outputs import recipe_files
from factory.generate.writer import OutputWriter
from factory.project import Project
from factory.render.bake import BakeTarget


@dataclass(frozen=True)
class Outcome:
    """One recipe planned: what is remembered of it, the files written, and for --check what differs."""

    recipe_id: str
    entry: Remembered | None = None
    problem: str | None = None  # why it could not be planned, as the error prints
    written: int = 0
    stale: tuple[tuple[str, str], ...] = ()  # (path, "changed: path") for --check


@dataclass(frozen=True)
class Task:
    project: Project
    nodes: int | None
    check: bool
    inputs: dict[str, str]  # recipe id -> the digest of its inputs


_TASK: Task | None = None  # the work a forked worker inherits


def plan_all(project: Project, nodes: int | None, check: bool, inputs: dict[str, str]) -> Iterator[Outcome]:
    """Plan, and write or compare, every recipe of `inputs`; outcomes come in no particular order."""
    global _TASK
    task = Task(project, nodes, check, inputs)
    workers = min(_cores(), len(inputs))
    if workers < 2:
        for recipe_id in inputs:
            yield _plan_one(task, recipe_id)
        return
    _TASK = task
    pool = multiprocessing.get_context("fork").Pool(workers, initializer=_quiet_signals)
    try:
        yield from pool.imap_unordered(_in_worker, list(inputs), chunksize=1)
        pool.close()  # every recipe planned: the workers end on their own
    finally:
        pool.terminate()  # on a failure (or Ctrl-C) here, the workers are ended before this returns
        pool.join()
        _TASK = None


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _quiet_signals() -> None:
    """A worker ends when it is told to, without the command's own handlers (which raise to clean up the
    engine's containers: a worker starts none), and leaves Ctrl-C to the command."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _in_worker(recipe_id: str) -> Outcome:
    assert _TASK is not None, "a worker runs only inside plan_all"
    return _plan_one(_TASK, recipe_id)


def _plan_one(task: Task, recipe_id: str) -> Outcome:
    project = task.project
    loaded = project.tree.recipes[recipe_id]
    try:
        plan = plan_recipe(project, loaded, task.nodes)
    except FactoryError as exc:
        return Outcome(recipe_id, problem=str(exc))
    files = recipe_files(plan)
    findings: dict[str, list[str]] = {}
    for blueprint in plan.images:
        for finding in blueprint.findings:
            findings.setdefault(str(finding), []).append(f"{blueprint.image.slug}:{blueprint.image.tag}")
    entry = Remembered(
        inputs=task.inputs[recipe_id],
        files={file.path.as_posix(): written_as(digest_of(file.chunks()), file.executable) for file in files},
        bake=[BakeTarget.of(bp.image) for bp in plan.images if bp.image.install is not None],
        images=len(plan.images),
        deployments=sum(len(blueprint.deployments) for blueprint in plan.images),
        skipped=[f"{skipped.what}: {skipped.reason}" for skipped in plan.skipped],
        findings=findings,
    )
    if task.check:
        return Outcome(recipe_id, entry, stale=tuple(differences(project.out, files)))
    with OutputWriter(project.out) as writer:
        writer.put(files)
    # Its stamps come from the run's scan when it wrote nothing (factory.generate.run), else the next run's.
    return Outcome(recipe_id, entry, written=writer.written)
