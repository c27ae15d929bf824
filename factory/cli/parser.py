"""The command line's grammar: every command, its arguments and their checks."""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, get_args

from factory.base.settings import Network
from factory.cli.files import (
    cmd_conformance,
    cmd_generate,
    cmd_list,
    cmd_lock,
    cmd_matrix,
    cmd_renderings,
    cmd_show,
)
from factory.cli.images import cmd_build, cmd_check_args, cmd_validate
from factory.cli.publishing import add_publishing
from factory.recipes.tree_schema import MAX_INSTANCES

DESCRIPTION = (
    "The `factory` command: parses arguments, calls the package, prints what it returns. It decides nothing."
)


# Each node of a multi-node deployment gets its own compose file: a mistyped count (1000) would write
# thousands of them. 64 nodes is more than any recipe's GPU floor asks for and than one NVLink domain has.
MAX_NODES = 64


def whole_number(low: int, high: int, why: str) -> Callable[[str], int]:
    """An argparse type: a whole number in low..high, refused with `why` outside it."""

    def parse(text: str) -> int:
        try:
            number = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if not low <= number <= high:
            raise argparse.ArgumentTypeError(f"{number} is outside {low}..{high}: {why}")
        return number

    return parse


# --nodes: a whole number of nodes a multi-node deployment spans.
node_count = whole_number(
    2, MAX_NODES, f"multi-node deployments span 2 to {MAX_NODES} nodes, each with its own compose file"
)
# --instances: how many vLLM instances share a KV store (one needs no router).
instance_count = whole_number(1, MAX_INSTANCES, f"a KV store has 1 to {MAX_INSTANCES} vLLM instances")


@functools.cache  # the grammar is the same for every command of one process
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="factory", description=DESCRIPTION)
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
    tree.add_argument(
        "--strict",
        action="store_true",
        help="refuse a recipe with a key the site ignores (default: warn, and ignore it as the site does)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    original = sub.add_parser

    def add_parser(name: str, **kwargs: Any) -> argparse.ArgumentParser:
        return original(name, parents=[tree], **kwargs)

    sub.add_parser = add_parser  # type: ignore[method-assign]

    _add_generate_and_lock(sub)
    _add_reading(sub)
    _add_building(sub)
    add_publishing(sub, _add_target_args)
    return parser


def _add_generate_and_lock(sub: Any) -> None:
    """generate, renderings, lock, check-args."""
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
    gen.set_defaults(func=cmd_generate, scans_output=True)

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
    lck.add_argument(
        "--refresh",
        action="store_true",
        help="try again the releases passed over because a requirement was served by no index; recipes "
        "move up to those that install now (asks the indexes only about those requirements)",
    )
    lck.set_defaults(func=cmd_lock)

    args_check = sub.add_parser(
        "check-args", help="parse every serve command of every image with the vLLM release it runs"
    )
    args_check.add_argument(
        "models", nargs="*", help="only these recipes (recipe ids or model ids; default: every recipe)"
    )
    args_check.set_defaults(func=cmd_check_args)


def _add_reading(sub: Any) -> None:
    """matrix, conformance, show, list: what the factory tells people."""
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
    show.add_argument(
        "--instances",
        type=instance_count,
        help="a KV store's vLLM instances (with --strategy KV_STORE; default: the store's own, as the site)",
    )
    show.add_argument(
        "--kv-offload",
        metavar="OPTION",
        help="compose an option of the recipes site's KV-offload row (taxonomy kv_offload), e.g. simple",
    )
    show.add_argument("--json", action="store_true", help="print the rendering as one JSON object")
    show.add_argument(
        "--format",
        choices=("text", "k8s"),
        default="text",
        help="k8s: the deployment's Kubernetes manifest (what k8s/.../manifest.yaml holds)",
    )
    show.set_defaults(func=cmd_show)

    lst = sub.add_parser("list", help="list every image the recipes and catalog define")
    lst.set_defaults(func=cmd_list)


def _add_building(sub: Any) -> None:
    """build, validate (a recipe's images, or the PD router's: MODEL vllm-router)."""
    build = sub.add_parser(
        "build", help="build (and tag) the images of one model on one hardware, via BuildKit"
    )
    _add_target_args(build)
    build.add_argument("--base-image", help="build on this image instead of the target's base (a mirror)")
    build.add_argument("--backend", choices=["auto", "compose", "bake"], default="auto")
    _add_network_arg(build)
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


def _add_network_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--build-network",
        choices=get_args(Network),
        help="the network of the build's RUN steps; host: the build host's, for a package index on its "
        "loopback (default: the network setting, else BuildKit's own)",
    )


def _add_target_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "model",
        nargs="?",
        help="recipe id, e.g. moonshotai/Kimi-Linear-48B-A3B-Instruct, or vllm-router for the PD router's "
        "image (default: the catalog's build recipe for the hardware)",
    )
    parser.add_argument("--hardware", help="the hardware (not for vllm-router, which runs on any)")
    parser.add_argument("--variant", help="default: every variant of the recipe")
    parser.add_argument(
        "--kv-store",
        action="store_true",
        help="its KV-store images (the plain image with Mooncake) instead of the plain ones",
    )
