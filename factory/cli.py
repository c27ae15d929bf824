"""The `factory` command: generate, show, build, validate, publish."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from factory.errors import FactoryError, InputError
from factory.plan import ImagePlan
from factory.project import Project, load_project


def find_root(start: Path) -> Path:
    for folder in [start, *start.parents]:
        if (folder / "recipes" / "taxonomy.yaml").is_file() and (folder / "catalog").is_dir():
            return folder
    raise InputError(
        "no factory project here: looked for recipes/taxonomy.yaml and catalog/ here and above",
        file=start,
        hint="run inside the project, or pass --root",
    )


def cmd_generate(project: Project, args: argparse.Namespace) -> int:
    from factory.generate import all_outputs, stale_outputs, write_outputs
    from factory.planner import plan_all
    from factory.preflight import preflight

    plans = plan_all(project, nodes=args.nodes)
    files = all_outputs(project, plans)
    for skipped in plans.skipped:
        print(f"skipped: {skipped.what}: {skipped.reason}", file=sys.stderr)
    # One line per finding, naming every image it concerns, rather than one per image.
    affected: dict[str, list[str]] = {}
    for image in plans.images:
        for finding in preflight(project, image):
            affected.setdefault(str(finding), []).append(f"{image.slug}:{image.tag}")
    for finding_text, images in affected.items():
        print(f"{finding_text}\n  images: {', '.join(images)}", file=sys.stderr)
    if args.check:
        problems = stale_outputs(project.root, files)
        if problems:
            print(
                "generated files are stale; run `factory generate` (or `nox -s generate`):", file=sys.stderr
            )
            for problem in problems:
                print(f"  {problem}", file=sys.stderr)
            return 1
        print(
            f"up to date: {len(plans.images)} images, {len(plans.composes)} deployments, {len(files)} files"
        )
        return 0
    write_outputs(project.root, files)
    print(f"wrote {len(files)} files: {len(plans.images)} images, {len(plans.composes)} deployments")
    return 0


def cmd_show(project: Project, args: argparse.Namespace) -> int:
    from factory.generate import with_inputs_hash
    from factory.planner import plan_compose, plan_image
    from factory.preflight import preflight
    from factory.show import render_show

    loaded = project.tree.recipe(args.model)
    variant = args.variant or next(iter(loaded.recipe.variants))
    image = with_inputs_hash(project, plan_image(project, loaded, args.hardware, variant))
    strategy = args.strategy or loaded.recipe.compatible_strategies[0]
    deploy = project.tree.strategies[strategy].deploy_type if strategy in project.tree.strategies else ""
    nodes = args.nodes if args.nodes is not None else (2 if deploy == "multi_node" else 1)
    plan = plan_compose(project, image, strategy, nodes)
    print(render_show(plan, [str(finding) for finding in preflight(project, image)]), end="")
    return 0


def cmd_list(project: Project, args: argparse.Namespace) -> int:
    from factory.planner import plan_all

    for image in plan_all(project).images:
        print(f"{image.reference}\t{image.platform}\t{image.directory}")
    return 0


def cmd_testbench_settings(project: Project, args: argparse.Namespace) -> int:
    from factory.settings import write_testbench_settings

    write_testbench_settings(args.output, args.base_image)
    print(f"wrote {args.output}")
    return 0


def _select_images(project: Project, args: argparse.Namespace) -> list[ImagePlan]:
    from factory.planner import plan_image

    loaded = project.tree.recipe(args.model)
    variants = [args.variant] if args.variant else list(loaded.recipe.variants)
    return [plan_image(project, loaded, args.hardware, variant) for variant in variants]


def cmd_build(project: Project, args: argparse.Namespace) -> int:
    from factory.build.builder import build_image, summary, write_report
    from factory.settings import load_settings

    settings = load_settings(project.root, {"base_image": args.base_image})
    results = []
    for image in _select_images(project, args):
        result = build_image(
            project, image, settings, backend=args.backend, echo=args.verbose or sys.stderr.isatty()
        )
        results.append(result)
        print(summary(result))
    write_report(results, args.report)
    print(f"report: {args.report}")
    return 0


def cmd_validate(project: Project, args: argparse.Namespace) -> int:
    from factory.validate.runner import validate_image

    status = 0
    for image in _select_images(project, args):
        report = validate_image(project, image, args.reports, args.health_timeout)
        for case in report.cases:
            print(f"  {case.status:7} {case.name}: {case.detail.splitlines()[0] if case.detail else ''}")
        if not report.passed:
            failed = [case for case in report.cases if case.status == "failed"]
            print(f"error: {image.reference} failed validation:", file=sys.stderr)
            for case in failed:
                print(f"  {case.name}: {case.detail}", file=sys.stderr)
            status = 1
        elif report.fully_validated:
            print(f"validated {image.reference} ({report.image_id[:19]})")
        elif args.allow_no_gpu:
            print(f"{image.reference}: built; static checks passed; GPU probes not run")
        else:
            print(f"error: {image.reference}: GPU probes not run, so it is not validated", file=sys.stderr)
            status = 1
    return status


def _registry(project: Project, args: argparse.Namespace) -> str:
    """--registry, else the `registry` setting (.factory.local.toml or FACTORY_REGISTRY)."""
    from factory.settings import load_settings

    registry = args.registry or load_settings(project.root).registry
    if not registry:
        raise InputError(
            "no registry given",
            field="--registry",
            hint="pass --registry HOST[:PORT][/NAMESPACE] or set FACTORY_REGISTRY",
        )
    return registry


def cmd_publish(project: Project, args: argparse.Namespace) -> int:
    from factory.publish.publisher import publish_image, write_publish_report

    registry = _registry(project, args)
    results = []
    for image in _select_images(project, args):
        published = publish_image(
            project,
            image,
            registry,
            args.reports / "validated",
            args.tag,
            force_unvalidated=args.force_unvalidated,
        )
        for item in published:
            print(f"published {item.reference} {item.digest} (attempts: {item.attempts})")
        results += published
    write_publish_report(results, args.reports / "publish.json")
    return 0


def cmd_sbom(project: Project, args: argparse.Namespace) -> int:
    import json

    from factory.engine import connect
    from factory.files import write_text_atomic
    from factory.publish.sbom import cyclonedx

    client = connect()
    for image in _select_images(project, args):
        path = args.reports / f"sbom-{image.slug}-{image.tag}.cdx.json"
        bom = cyclonedx(client, image.reference)
        write_text_atomic(path, json.dumps(bom, indent=2) + "\n")
        print(f"{path}: {len(bom['components'])} components")
    return 0


def cmd_publish_platforms(project: Project, args: argparse.Namespace) -> int:
    from factory.planner import plan_all
    from factory.publish.platforms import platform_groups, push_platform_list
    from factory.publish.registry import credentials_for, split_registry

    registry = _registry(project, args)
    recipe_id = project.tree.recipe(args.model).model_id
    groups = [g for g in platform_groups(plan_all(project).images) if g.members[0].recipe_id == recipe_id]
    if not groups:
        print(f"{recipe_id}: no images that differ only in platform; nothing to join")
    credentials = credentials_for(split_registry(registry)[0])
    for group in groups:
        repository = group.members[0].repository
        digest = push_platform_list(
            registry, repository, group.tag, [m.tag for m in group.members], credentials
        )
        platforms = ", ".join(f"{m.hardware} {m.platform}" for m in group.members)
        print(f"published {registry}/{repository}:{group.tag} {digest} ({platforms})")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="factory", description=__doc__)
    parser.add_argument(
        "--root", type=Path, help="the project folder (default: found from the current folder)"
    )
    sub = parser.add_subparsers(dest="command", required=True)

    gen = sub.add_parser("generate", help="write images/ and compose/ from the recipes and the catalog")
    gen.add_argument(
        "--check", action="store_true", help="write nothing; fail if the committed files are stale"
    )
    gen.add_argument("--nodes", type=int, default=2, help="node count for multi-node strategies (default 2)")
    gen.set_defaults(func=cmd_generate)

    show = sub.add_parser("show", help="print install, serve, docker run and compose for one configuration")
    show.add_argument("model", help="model id, e.g. moonshotai/Kimi-Linear-48B-A3B-Instruct")
    show.add_argument("--hardware", required=True)
    show.add_argument("--strategy")
    show.add_argument("--variant")
    show.add_argument("--nodes", type=int)
    show.set_defaults(func=cmd_show)

    lst = sub.add_parser("list", help="list every image the recipes and catalog define")
    lst.set_defaults(func=cmd_list)

    build = sub.add_parser(
        "build", help="build (and tag) the images of one model on one hardware, via BuildKit"
    )
    _add_target_args(build)
    build.add_argument("--base-image", help="build on this image instead of the target's base (a mirror)")
    build.add_argument("--backend", choices=["auto", "compose", "bake"], default="auto")
    build.add_argument("--report", type=Path, default=Path("reports/build.json"))
    build.add_argument("-v", "--verbose", action="store_true", help="print BuildKit's output as it comes")
    build.set_defaults(func=cmd_build)

    validate = sub.add_parser("validate", help="check a built image inside, then serve and probe it")
    _add_target_args(validate)
    validate.add_argument("--reports", type=Path, default=Path("reports"))
    validate.add_argument(
        "--health-timeout", type=float, help="seconds to wait for /health (default: from the recipe)"
    )
    validate.add_argument(
        "--allow-no-gpu",
        action="store_true",
        help="succeed with static checks alone where the GPU is absent (the image is then not publishable)",
    )
    validate.set_defaults(func=cmd_validate)

    publish = sub.add_parser(
        "publish", help="push the tags of validated images and check the registry's digest"
    )
    _add_target_args(publish)
    publish.add_argument(
        "--registry", help="HOST[:PORT][/NAMESPACE] (default: the registry setting / FACTORY_REGISTRY)"
    )
    publish.add_argument(
        "--tag",
        action="append",
        default=[],
        help="an extra tag, a template: '{tag}-1.2.0', '{tag}-sha-abc1234', 'latest-{hardware}-{variant}'",
    )
    publish.add_argument("--reports", type=Path, default=Path("reports"))
    publish.add_argument(
        "--force-unvalidated",
        action="store_true",
        help="publish although no passing validation is recorded (loud)",
    )
    publish.set_defaults(func=cmd_publish)

    platforms = sub.add_parser(
        "publish-platforms", help="join published images that differ only in CPU platform under one tag"
    )
    platforms.add_argument("model")
    platforms.add_argument(
        "--registry", help="HOST[:PORT][/NAMESPACE] (default: the registry setting / FACTORY_REGISTRY)"
    )
    platforms.set_defaults(func=cmd_publish_platforms)

    sbom = sub.add_parser("sbom", help="write a CycloneDX SBOM of a built image, read from inside it")
    _add_target_args(sbom)
    sbom.add_argument("--reports", type=Path, default=Path("reports"))
    sbom.set_defaults(func=cmd_sbom)

    bench = sub.add_parser(
        "testbench-settings", help="write .factory.local.toml for this machine (testbench/up)"
    )
    bench.add_argument("--base-image", required=True)
    bench.add_argument("--output", type=Path, required=True)
    bench.set_defaults(func=cmd_testbench_settings)
    return parser


def _add_target_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="model id, e.g. moonshotai/Kimi-Linear-48B-A3B-Instruct")
    parser.add_argument("--hardware", required=True)
    parser.add_argument("--variant", help="default: every variant of the recipe")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        root = args.root or find_root(Path.cwd())
        project = load_project(root)
        result: int = args.func(project, args)
        return result
    except FactoryError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
