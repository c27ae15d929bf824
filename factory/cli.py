"""The `factory` command: parses arguments, calls the package, prints what it returns. It decides nothing."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from factory.errors import FactoryError
from factory.leftovers import unwind_on_termination
from factory.project import Project, find_root, load_project

if TYPE_CHECKING:
    from factory.blueprint import Blueprint
    from factory.recipes.loader import RecipeProblem


def say(line: str) -> None:
    print(line, flush=True)


def warn(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


# Each node of a multi-node deployment gets its own compose file: a mistyped count (1000) would write
# thousands of them. 64 nodes is more than any recipe's GPU floor asks for and than one NVLink domain has.
MAX_NODES = 64


def node_count(text: str) -> int:
    """--nodes: a whole number of nodes a multi-node deployment spans."""
    try:
        nodes = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not 2 <= nodes <= MAX_NODES:
        raise argparse.ArgumentTypeError(
            f"{nodes} is outside 2..{MAX_NODES}: multi-node deployments span 2 to {MAX_NODES} nodes,"
            " each with its own compose file"
        )
    return nodes


def cmd_generate(project: Project, args: argparse.Namespace) -> int:
    from factory.generate import generate, lock_problems

    result = generate(project, check=args.check, nodes=args.nodes)
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
    status = _report_problems(result.problems)
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


def _report_problems(problems: Sequence[RecipeProblem]) -> int:
    """One line per recipe that could not be planned; non-zero when there is any."""
    for problem in problems:
        warn(f"bad recipe: {problem.one_line()}")
    return 1 if problems else 0


def cmd_renderings(project: Project, args: argparse.Namespace) -> int:
    import json

    from factory.blueprint import plan_project
    from factory.renderings import all_renderings

    blueprints = plan_project(project, args.nodes)
    for line in all_renderings(blueprints):
        sys.stdout.write(json.dumps(line, ensure_ascii=False) + "\n")
    return 1 if blueprints.problems else 0


def cmd_conformance(project: Project, args: argparse.Namespace) -> int:
    from factory.blueprint import plan_project
    from factory.conformance import compare, oracle_renderings
    from factory.renderings import all_renderings

    comparison = compare(oracle_renderings(args.oracle), all_renderings(plan_project(project)))
    say(comparison.table())
    if args.floor is not None and comparison.rate < args.floor:
        warn(f"error: conformance {comparison.rate:.4f} is below the floor {args.floor}")
        return 1
    return 0


def cmd_show(project: Project, args: argparse.Namespace) -> int:
    from factory.blueprint import choose_deployment
    from factory.show import render_show

    blueprint, deployment = choose_deployment(
        project, args.model, args.hardware, args.strategy, args.variant, args.nodes
    )
    if args.json:
        import json

        from factory.renderings import rendering

        say(json.dumps(rendering(blueprint, deployment), ensure_ascii=False))
        return 0
    print(render_show(blueprint, deployment), end="")
    return 0


def cmd_list(project: Project, args: argparse.Namespace) -> int:
    from factory.blueprint import plan_project

    blueprints = plan_project(project)
    for blueprint in blueprints.images:
        image = blueprint.image
        where = image.directory if image.install else f"not built: {image.unbuildable}"
        say(f"{image.reference}\t{image.platform}\t{where}")
    return _report_problems(blueprints.problems)


def cmd_matrix(project: Project, args: argparse.Namespace) -> int:
    from factory.blueprint import plan_project
    from factory.engine import connect
    from factory.errors import DockerError
    from factory.matrix import coverage, hadolint, write_matrix

    blueprints = plan_project(project)
    try:
        client = connect()
    except DockerError as exc:
        client = None
        warn(f"no Docker Engine ({str(exc).splitlines()[0]}): cells stop at linted")
    matrix = coverage(blueprints, project.out, args.reports, client, hadolint)
    for path in write_matrix(
        matrix, args.reports, f"vLLM image factory coverage: {project.relative(project.tree.root)}"
    ):
        say(f"wrote {path}")
    say(", ".join(f"{count} {level}" for level, count in matrix.counts().items()))
    return _report_problems(blueprints.problems)


def cmd_lock(project: Project, args: argparse.Namespace) -> int:
    from factory.lock.locker import lock
    from factory.settings import load_settings

    upgrade = args.upgrade if args.upgrade != "" else "*"
    result = lock(project, load_settings(project.root), upgrade, report=say)
    say(
        f"locked {result.releases} releases ({result.kept} kept, {len(result.moved)} moved);"
        f" {result.sets_resolved} sets resolved, {result.sets_kept} kept: {project.lock_path}"
    )
    for line in result.moved:
        say(f"  moved {line}")
    for line in [*result.none, *result.unresolvable]:
        warn(f"  not buildable: {line}")
    return 0


def cmd_check_args(project: Project, args: argparse.Namespace) -> int:
    from factory.blueprint import plan_project
    from factory.engine import connect
    from factory.validate.check_args import check_all

    checks = check_all(connect(), plan_project(project).images)
    rejected = 0
    for check in checks:
        if check.checked_in is None:
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


def cmd_testbench_settings(project: Project, args: argparse.Namespace) -> int:
    from factory.settings import write_testbench_settings

    write_testbench_settings(args.output, args.base_image)
    say(f"wrote {args.output}")
    return 0


def _selected(project: Project, args: argparse.Namespace) -> list[Blueprint]:
    from factory.blueprint import select

    model = args.model or project.catalog.build_recipe(args.hardware)
    return select(project, model, args.hardware, args.variant)


def cmd_build(project: Project, args: argparse.Namespace) -> int:
    from factory.build.builder import build_image, summary, write_report
    from factory.settings import load_settings

    settings = load_settings(project.root, {"base_image": args.base_image})
    results = []
    for blueprint in _selected(project, args):
        result = build_image(
            project.root,
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
    from factory.publish.publisher import publish_image, write_publish_report
    from factory.settings import registry_of

    registry = registry_of(project.root, args.registry)
    results = []
    for blueprint in _selected(project, args):
        published = publish_image(
            blueprint.image,
            registry,
            args.reports / "validated",
            args.tag,
            force_unvalidated=args.force_unvalidated,
            report=say,
        )
        for item in published:
            say(f"published {item.reference} {item.digest} (attempts: {item.attempts})")
        results += published
    write_publish_report(results, args.reports / "publish.json")
    return 0


def cmd_sbom(project: Project, args: argparse.Namespace) -> int:
    from factory.publish.sbom import write_sbom

    for blueprint in _selected(project, args):
        path, components = write_sbom(blueprint.image, args.reports)
        say(f"{path}: {components} components")
    return 0


def cmd_publish_platforms(project: Project, args: argparse.Namespace) -> int:
    from factory.blueprint import plan_project
    from factory.publish.platforms import publish_platform_groups
    from factory.settings import registry_of

    registry = registry_of(project.root, args.registry)
    recipe_id = project.tree.recipe(args.model).model_id
    images = [blueprint.image for blueprint in plan_project(project).images]
    published = publish_platform_groups(registry, recipe_id, images)
    if not published:
        say(f"{recipe_id}: no images that differ only in platform; nothing to join")
    for line in published:
        say(line)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="factory", description=__doc__)
    parser.add_argument(
        "--root", type=Path, help="the project folder (default: found from the current folder)"
    )
    # Every command reads a recipes tree and finds generated files: --recipes and --out go on each.
    tree = argparse.ArgumentParser(add_help=False)
    tree.add_argument(
        "--recipes",
        type=Path,
        help="a recipes tree, e.g. a checkout of the upstream recipes repository "
        "(default: FACTORY_RECIPES, else the project's recipes/)",
    )
    tree.add_argument("--out", type=Path, help="where images/ and compose/ are (default: the project folder)")
    tree.add_argument(
        "--lock",
        type=Path,
        help="the lock file (default: recipes/lock/vllm.lock.json for the project's recipes, else in --out)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    original = sub.add_parser

    def add_parser(name: str, **kwargs: Any) -> argparse.ArgumentParser:
        return original(name, parents=[tree], **kwargs)

    sub.add_parser = add_parser  # type: ignore[method-assign]

    gen = sub.add_parser("generate", help="write images/ and compose/ from the recipes and the catalog")
    gen.add_argument(
        "--check", action="store_true", help="write nothing; fail if the committed files are stale"
    )
    gen.add_argument(
        "--nodes",
        type=node_count,
        help="node count for multi-node strategies (default: 2, or what the recipe's GPU floor needs)",
    )
    gen.add_argument(
        "-v", "--verbose", action="store_true", help="list every skipped combination and finding"
    )
    gen.set_defaults(func=cmd_generate)

    rend = sub.add_parser(
        "renderings", help="print every deployment's commands as JSON lines (the upstream JSON API's shape)"
    )
    rend.add_argument("--json", action="store_true", help="JSON lines (the only format; for clarity)")
    rend.add_argument("--nodes", type=node_count, help="node count for multi-node strategies")
    rend.set_defaults(func=cmd_renderings)

    lck = sub.add_parser(
        "lock",
        help="choose a vLLM release per recipe, variant and install; lock every dependency with hashes",
    )
    lck.add_argument(
        "--upgrade",
        nargs="?",
        const="",
        help="move versions on purpose: every recipe, or the one named (default: keep what is locked)",
    )
    lck.set_defaults(func=cmd_lock)

    args_check = sub.add_parser(
        "check-args", help="parse every serve command of every image with the vLLM release it runs"
    )
    args_check.set_defaults(func=cmd_check_args)

    matrix = sub.add_parser(
        "matrix",
        help="write reports/matrix.html and .md: how far each model and variant got on each hardware",
    )
    matrix.add_argument("--reports", type=Path, default=Path("reports"), help="where validation reports are")
    matrix.set_defaults(func=cmd_matrix)

    conf = sub.add_parser(
        "conformance", help="compare every rendering with the upstream site's JSON API for the same tree"
    )
    conf.add_argument(
        "--oracle", type=Path, required=True, help="what the site's build-api wrote for the tree"
    )
    conf.add_argument("--floor", type=float, help="fail when the conformance rate is below this")
    conf.set_defaults(func=cmd_conformance)

    show = sub.add_parser("show", help="print install, serve, docker run and compose for one configuration")
    show.add_argument("model", help="model id, e.g. moonshotai/Kimi-Linear-48B-A3B-Instruct")
    show.add_argument("--hardware", required=True)
    show.add_argument("--strategy")
    show.add_argument("--variant")
    show.add_argument("--nodes", type=node_count)
    show.add_argument("--json", action="store_true", help="print the rendering as one JSON object")
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
    parser.add_argument(
        "model",
        nargs="?",
        help="recipe id, e.g. moonshotai/Kimi-Linear-48B-A3B-Instruct "
        "(default: the catalog's build recipe for the hardware)",
    )
    parser.add_argument("--hardware", required=True)
    parser.add_argument("--variant", help="default: every variant of the recipe")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    unwind_on_termination()
    try:
        root = args.root or find_root(Path.cwd())
        project = load_project(
            root, getattr(args, "recipes", None), getattr(args, "out", None), getattr(args, "lock", None)
        )
        result: int = args.func(project, args)
        return result
    except FactoryError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
