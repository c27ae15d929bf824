"""The commands that work with images on the Docker Engine: build, validate, check-args, publish, the
SBOM and multi-platform lists."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from factory.cli.output import say, warn
from factory.project import Project

if TYPE_CHECKING:
    from factory.blueprint import Blueprint


def cmd_check_args(project: Project, args: argparse.Namespace) -> int:
    from factory.blueprint import plan_project
    from factory.engine.connect import connect
    from factory.validate.check_args import check_all

    wanted = {project.tree.recipe(model).recipe_id for model in args.models}
    images = [b for b in plan_project(project).images if not wanted or b.image.recipe_id in wanted]
    checks = check_all(connect(), images)
    rejected = 0
    for check in checks:
        if check.unbuildable is not None:
            say(f"not buildable       {check.image}: {check.unbuildable}")
        elif check.checked_in is None:
            why = "no lock" if check.version is None else f"no built image of vLLM {check.version} here"
            say(f"not parser-checked  {check.image}: {why}")
        elif check.rejected:
            rejected += 1
            for result in check.rejected:
                warn(f"REJECTED            {check.image}: {result.name}: {result.detail}")
        else:
            say(
                f"accepted            {check.image}: "
                f"{len(check.results)} commands (vLLM of {check.checked_in})"
            )
    checked = sum(check.checked_in is not None for check in checks)
    say(f"{checked} of {len(checks)} images parser-checked, {rejected} with a rejected command")
    return 1 if rejected else 0


def _selected(project: Project, args: argparse.Namespace) -> list[Blueprint]:
    from factory.blueprint.select import select

    model = args.model or project.catalog.build_recipe(args.hardware)
    return select(project, model, args.hardware, args.variant, args.kv_store)


def _build_flags(args: argparse.Namespace) -> dict[str, object]:
    """The build settings given on the command line (they win over the settings file and FACTORY_*)."""
    return {"base_image": args.base_image, "network": args.build_network}


def cmd_build(project: Project, args: argparse.Namespace) -> int:
    from factory.base.settings import load_settings
    from factory.builder.builder import build_image, summary, write_report

    settings = load_settings(project.root, _build_flags(args))
    results = []
    for blueprint in _selected(project, args):
        result = build_image(
            project.out,
            blueprint,
            settings,
            backend=args.backend,
            echo=args.verbose,
            report=say,
            # One updating line on a terminal, timestamped lines in a log (-v prints BuildKit's own).
            show_progress=None if args.verbose else sys.stdout,
        )
        results.append(result)
        say(summary(result))
    write_report(results, args.report)
    say(f"report: {args.report}")
    return 0


def cmd_build_router(project: Project, args: argparse.Namespace) -> int:
    from factory.base.settings import load_settings
    from factory.builder.builder import summary, write_report
    from factory.router.build import build_router

    settings = load_settings(project.root, _build_flags(args))
    result = build_router(project, settings, backend=args.backend, echo=args.verbose, report=say)
    say(summary(result))
    write_report([result], args.report)
    say(f"report: {args.report}")
    return 0


def cmd_validate(project: Project, args: argparse.Namespace) -> int:
    from factory.validate.runner import validate_image

    status = 0
    for blueprint in _selected(project, args):
        report = validate_image(
            blueprint, args.reports, args.health_timeout, note=say, progress_to=sys.stdout
        )
        for case in report.cases:
            say(f"  {case.status:7} {case.name}: {case.detail.splitlines()[0] if case.detail else ''}")
        ok, line = report.verdict(args.allow_no_gpu)
        if ok:
            say(line)
        else:
            warn(f"error: {line}")
            status = 1
    return status


def cmd_publish(project: Project, args: argparse.Namespace) -> int:
    from factory.base.settings import registry_of
    from factory.lockfile.published import record_file
    from factory.publish.publisher import publish_image, record_publish, write_publish_report

    registry = registry_of(project.root, args.registry)
    record = record_file(project.lock_path)
    results = []
    for blueprint in _selected(project, args):
        published = publish_image(
            blueprint.image,
            registry,
            args.reports / "validated",
            args.tag,
            force_unvalidated=args.force_unvalidated,
            allow_no_gpu=args.allow_no_gpu,
            report=say,
        )
        for item in published:
            say(f"published {item.reference} {item.digest} (attempts: {item.attempts})")
        record_publish(blueprint.image, published, record)
        results += published
    if results:
        say(f"recorded in {record}: run `factory generate` to pin the Kubernetes manifests to the digests")
    write_publish_report(results, args.reports / "publish.json")
    return 0


def cmd_sbom(project: Project, args: argparse.Namespace) -> int:
    from factory.publish.sbom import write_sbom

    for blueprint in _selected(project, args):
        path, components = write_sbom(blueprint.image, args.reports)
        say(f"{path}: {components} components")
    return 0


def cmd_publish_platforms(project: Project, args: argparse.Namespace) -> int:
    from factory.base.settings import registry_of
    from factory.blueprint import plan_project
    from factory.lockfile.published import record_file
    from factory.publish.platforms import publish_platform_groups, recipe_groups

    registry = registry_of(project.root, args.registry)
    loaded = project.tree.recipe(args.model)
    groups = recipe_groups(loaded.recipe_id, [blueprint.image for blueprint in plan_project(project).images])
    record = record_file(project.lock_path)
    published = publish_platform_groups(registry, groups, record)
    if not published:
        say(
            f"{loaded.recipe_id} ({loaded.model_id}): no images that differ only in platform; nothing to join"
        )
    for line in published:
        say(line)
    if published:
        say(f"recorded in {record}: run `factory generate` to run the lists by digest in compose and k8s")
    return 0
