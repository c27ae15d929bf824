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
    from factory.blueprint.router import RouterBlueprint


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


def _selected(project: Project, args: argparse.Namespace) -> list[Blueprint | RouterBlueprint]:
    """The blueprints a command on images works on: a recipe's images on one hardware, or the PD router's
    image (model `vllm-router`: it runs on any hardware)."""
    from factory.base.errors import InputError
    from factory.blueprint.router import locked_router
    from factory.blueprint.select import select
    from factory.plan.router import SLUG as ROUTER

    if args.model == ROUTER:
        return [locked_router(project)]
    if args.hardware is None:
        raise InputError(
            "which hardware?", field="--hardware", hint=f"--hardware is needed unless MODEL is {ROUTER}"
        )
    model = args.model or project.catalog.build_recipe(args.hardware)
    return list(select(project, model, args.hardware, args.variant, args.kv_store))


def _build_flags(args: argparse.Namespace) -> dict[str, object]:
    """The build settings given on the command line (they win over the settings file and FACTORY_*)."""
    return {"base_image": args.base_image, "network": args.build_network}


def cmd_build(project: Project, args: argparse.Namespace) -> int:
    from factory.base.settings import load_settings
    from factory.builder.builder import build_image, summary, write_report
    from factory.builder.record import RECORDS, record_of, write_record
    from factory.engine.connect import connect, engine_facts

    settings = load_settings(project.root, _build_flags(args))
    client = connect()
    engine = engine_facts(client).version
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
        # What made this image ID, for the provenance `factory publish` attaches.
        write_record(record_of(client, result, engine), args.report.parent / RECORDS)
    write_report(results, args.report)
    say(f"report: {args.report}")
    return 0


def cmd_validate(project: Project, args: argparse.Namespace) -> int:
    from factory.blueprint.router import RouterBlueprint
    from factory.validate.router import validate_router
    from factory.validate.runner import validate_image

    status = 0
    for blueprint in _selected(project, args):
        if isinstance(blueprint, RouterBlueprint):
            report = validate_router(blueprint, args.reports, note=say)
        else:
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
    from factory.base.errors import RefusedError
    from factory.base.settings import registry_of
    from factory.blueprint.router import RouterBlueprint
    from factory.lockfile.published import record_file
    from factory.publish.signed import PublishOptions, Signing, publish_one, write_outcomes

    if args.unsigned:
        warn("WARNING: publishing WITHOUT a signature (--unsigned): nothing can verify these images")
    signing = Signing(key_file=args.key, keyless=args.keyless, unsigned=args.unsigned)
    options = PublishOptions(
        registry_of(project.root, args.registry),
        args.reports,
        args.tag,
        signing,
        args.force_unvalidated,
        args.allow_no_gpu,
    )
    record = record_file(project.lock_path)
    outcomes = []
    for blueprint in _selected(project, args):
        if isinstance(blueprint, RouterBlueprint) and not args.unsigned:
            raise RefusedError(
                "the PD router's image is not signed yet: its SBOM and provenance are made from a recipe's "
                "locked set, and the router's lock is its own (publish it with --unsigned)"
            )
        outcome = publish_one(project, blueprint, options, record, report=say)
        for item in outcome.published:
            say(f"published {item.reference} {item.digest} (attempts: {item.attempts})")
        outcomes.append(outcome)
    if outcomes:
        say(f"recorded in {record}: run `factory generate` to pin the manifests (and compose) to the digests")
    write_outcomes(outcomes, args.reports / "publish.json")
    return 0


def cmd_sbom(project: Project, args: argparse.Namespace) -> int:
    from factory.base.errors import RefusedError
    from factory.blueprint.router import RouterBlueprint
    from factory.publish.sbom import write_sbom

    for blueprint in _selected(project, args):
        if isinstance(blueprint, RouterBlueprint):
            raise RefusedError(
                "the PD router's image has no SBOM yet: an SBOM is checked against a recipe's set"
            )
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
