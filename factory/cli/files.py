"""The commands that read recipes and write or print what follows from them: generate, renderings,
conformance, show, list, matrix, lock, and the test bench's settings. None of them builds an image."""

from __future__ import annotations

import argparse
import sys

from factory.cli.output import report_problems, say, warn
from factory.project import Project


def cmd_generate(project: Project, args: argparse.Namespace) -> int:
    from factory.generate.run import generate, lock_problems
    from factory.recipes.ignored import summary as ignored_summary

    result = generate(project, check=args.check, nodes=args.nodes, scanning=args.scanning)
    for line in project.tree.ignored:  # keys of the shared strategy files
        warn(line)
    for loaded in project.tree.recipes.values():  # one line per recipe: --strict makes them errors
        if loaded.ignored:
            warn(ignored_summary(loaded.recipe_id, loaded.ignored))
    if not args.check:
        for problem in lock_problems(project):  # --check lists it among the stale files
            warn(f"{problem}: an image gets its Dockerfile once the lock holds its release")
    if args.verbose:
        for skipped in result.skipped:
            warn(f"skipped: {skipped}")
        # One line per finding, naming every image it concerns, rather than one per image.
        for finding_text, images in result.findings.items():
            warn(f"{finding_text}\n  images: {', '.join(images)}")
    elif result.skipped:
        warn(f"{len(result.skipped)} combinations skipped, each with its reason (-v lists them)")
    status = report_problems(result.problems)
    if result.kept:
        warn(f"kept {len(result.kept)} files of the recipes above as they were")
    if result.stale:
        warn("generated files are stale; run `factory generate` (or `nox -s generate`):")
        for problem in result.stale[:200]:
            warn(f"  {problem}")
        if len(result.stale) > 200:
            warn(f"  ... and {len(result.stale) - 200} more")
        return 1
    say(result.summary)
    return status


def cmd_renderings(project: Project, args: argparse.Namespace) -> int:
    import json

    from factory.blueprint import plan_project
    from factory.render.renderings import all_renderings

    blueprints = plan_project(project, args.nodes)
    for line in all_renderings(blueprints):
        sys.stdout.write(json.dumps(line, ensure_ascii=False) + "\n")
    return 1 if blueprints.problems else 0


def cmd_conformance(project: Project, args: argparse.Namespace) -> int:
    from factory.blueprint import plan_project
    from factory.render.renderings import all_renderings
    from factory.report.conformance import compare, oracle_renderings

    comparison = compare(oracle_renderings(args.oracle), all_renderings(plan_project(project)))
    say(comparison.table())
    if args.floor is not None and comparison.rate < args.floor:
        warn(f"error: conformance {comparison.rate:.4f} is below the floor {args.floor}")
        return 1
    return 0


def cmd_show(project: Project, args: argparse.Namespace) -> int:
    from factory.blueprint.select import choose_deployment, offload_options
    from factory.report.show import render_show

    blueprint, deployment = choose_deployment(
        project,
        args.model,
        args.hardware,
        args.strategy,
        args.variant,
        args.nodes,
        kv_offload=args.kv_offload,
        instances=args.instances,
    )
    if args.format == "k8s":
        from factory.render import kubernetes

        print(kubernetes.render(deployment), end="")  # refused, saying why, when the router is not locked
        return 0
    if args.json:
        import json

        from factory.render.renderings import rendering

        say(json.dumps(rendering(blueprint, deployment), ensure_ascii=False))
        return 0
    offload = project.tree.taxonomy.kv_offload.get(deployment.kv_offload or "")
    offered = tuple(offload_options(project, deployment))
    print(render_show(blueprint, deployment, offload, offered), end="")
    return 0


def cmd_list(project: Project, args: argparse.Namespace) -> int:
    from collections import Counter

    from factory.blueprint import plan_project

    blueprints = plan_project(project)
    causes: Counter[str] = Counter()
    older = 0
    for blueprint in blueprints.images:
        image = blueprint.image
        why = f"not built ({image.unbuildable_cause}): {image.unbuildable}"
        where = image.directory if image.install else why
        # A fourth column only when the lock passed a newer release over for this image, with the cause.
        passed = "".join(f"\t{note}" for note in image.passed_over)
        say(f"{image.reference}\t{image.platform}\t{where}{passed}")
        if not image.install:
            causes[image.unbuildable_cause or "unknown"] += 1
        older += bool(image.passed_over)
    from factory.plan.router import router_image

    router = router_image(project)  # the PD router's own image
    if router is not None:
        say(f"{router.reference}\t{router.platform}\t{router.directory}")
    catalog = project.catalog.hardware
    no_entry = {
        (s.model, s.variant, s.hardware)
        for plan in blueprints.recipes
        for s in plan.skipped
        if s.hardware is not None and s.hardware not in catalog
    }
    total = len(blueprints.images)
    warn(f"{total} images, {total - sum(causes.values())} buildable, {sum(causes.values())} not buildable:")
    for cause, count in causes.most_common():
        warn(f"  {count:5d} {cause}")
    if older:
        warn(f"{older} images take an older release: a newer one requires what no index serves (4th column)")
    warn(f"and {len(no_entry)} model variants on hardware with no catalog entry (no image planned)")
    return report_problems(blueprints.problems)


def cmd_matrix(project: Project, args: argparse.Namespace) -> int:
    from factory.base.errors import DockerError
    from factory.blueprint import plan_project
    from factory.engine.connect import connect
    from factory.report.matrix import LintCache, coverage, hadolint, hadolint_tool, write_matrix

    blueprints = plan_project(project)
    try:
        client = connect()
    except DockerError as exc:
        client = None
        warn(f"no Docker Engine ({str(exc).splitlines()[0]}): cells stop at linted")
    lint = LintCache(args.reports / ".lint-cache.json", hadolint, hadolint_tool())
    matrix = coverage(blueprints, project.out, args.reports, client, lint, report=warn)
    lint.save()
    warn(f"hadolint ran on {lint.runs} Dockerfiles; {lint.hits} verdicts reused (bytes unchanged)")
    for path in write_matrix(
        matrix, args.reports, f"vLLM image factory coverage: {project.relative(project.tree.root)}"
    ):
        say(f"wrote {path}")
    say(", ".join(f"{count} {level}" for level, count in matrix.counts().items()))
    return report_problems(blueprints.problems)


def cmd_lock(project: Project, args: argparse.Namespace) -> int:
    from factory.base.settings import load_settings
    from factory.lock.locker import lock

    upgrade = args.upgrade if args.upgrade != "" else "*"
    result = lock(project, load_settings(project.root), upgrade, report=say, refresh=args.refresh)
    say(
        f"locked {result.releases} releases ({result.kept} kept, {len(result.moved)} moved);"
        f" {result.sets_resolved} sets resolved, {result.sets_kept} kept: {project.lock_path}"
    )
    for line in result.moved:
        say(f"  moved {line}")
    for line in result.passed_over:
        say(f"  passed over: {line}")
    for line in [*result.none, *result.unresolvable]:
        warn(f"  not buildable: {line}")
    from factory.lock.router import lock_path, lock_router

    router = lock_router(project, upgrade == "*", report=say)
    say(f"locked the PD router: vllm-router {router.version}: {lock_path(project)}")
    return 0


def cmd_testbench_settings(project: Project, args: argparse.Namespace) -> int:
    from factory.base.settings import write_testbench_settings

    write_testbench_settings(args.output, args.base_image, args.arm64_base_image)
    say(f"wrote {args.output}")
    return 0
