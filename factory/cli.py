"""The `factory` command: generate, show, build, validate, publish."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from factory.errors import FactoryError, InputError
from factory.project import Project, load_project


def find_root(start: Path) -> Path:
    for folder in [start, *start.parents]:
        if (folder / "recipes" / "taxonomy.yaml").is_file() and (folder / "catalog").is_dir():
            return folder
    raise InputError(
        "no factory project here: looked for recipes/taxonomy.yaml and catalog/ in this folder and its parents",
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
            print("generated files are stale; run `factory generate` (or `nox -s generate`):", file=sys.stderr)
            for problem in problems:
                print(f"  {problem}", file=sys.stderr)
            return 1
        print(f"up to date: {len(plans.images)} images, {len(plans.composes)} deployments, {len(files)} files")
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="factory", description=__doc__)
    parser.add_argument("--root", type=Path, help="the project folder (default: found from the current folder)")
    sub = parser.add_subparsers(dest="command", required=True)

    gen = sub.add_parser("generate", help="write images/ and compose/ from the recipes and the catalog")
    gen.add_argument("--check", action="store_true", help="write nothing; fail if the committed files are stale")
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

    for register in EXTRA_COMMANDS:
        register(sub)
    return parser


# Later stages (build, validate, publish, testbench) add their subcommands here.
EXTRA_COMMANDS: list[Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None]] = []


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
