"""`nox -s bench`: the factory's figures, each beside its goal, measured in one run on this machine.

  hostile   an alias bomb refused in about the time a sound file takes; each class of issue 43, timed
  corpus    `factory lock` of the shared corpus (cold, unchanged) and `factory generate` of it (cold beside
            the disk's floor, unchanged, --check); needs FACTORY_UPSTREAM_RECIPES
  cpu       the CPU image: a cold build against pip's floor, rebuilds, size against its contents
  startup   the CPU image's start, from `docker compose up` to a 200 on /health, part by part
  trust     the CPU image published, signed and attested three times, and verified: each step's seconds
            (needs cosign: FACTORY_COSIGN or PATH; the loopback registry, FACTORY_BENCH_REGISTRY)
  cuda      (--cuda or --only cuda) the H200 image: uv against pip cold, layers shared with H100 and with a
            vLLM bump, sizes in a registry (two 11 GB images, many minutes)
  grace     (--only grace) the Grace recipe's GB200 image (linux/arm64, under QEMU) beside its B200 twin,
            both cold: time and size (8 and 11 GB images, many minutes)

Every comparison is of two measurements taken back to back in one run, because these machines are noisy. The
bench builds under its own image names (a scratch copy of the project), so it never moves a real tag, and
removes what it tagged. Each run is added to benchmarks/history.jsonl (committed: the docs' figures come from
it) and written whole to reports/bench.json. A development tool, not part of the installed package.
Run: python benchmarks/bench.py [--cuda] [--only GROUP] [--json PATH].
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import docker
from corpus import generate_figures, lock_figures
from docker.errors import ImageNotFound
from figures import Figure, blueprint, scratch_project, table
from grace import grace_figures
from hostile import alias_bomb_figures
from hostile_classes import hostile_class_figures
from registry import bench_registry
from startup import startup_figures
from trust import trust_figures

from factory.base.files import write_text_atomic
from factory.base.settings import load_settings
from factory.builder.builder import build_image
from factory.engine.connect import connect
from factory.project import load_project
from images import cpu_figures, cuda_figures

HISTORY = Path(__file__).with_name("history.jsonl")
GROUPS = ("hostile", "corpus", "cpu", "startup", "trust", "cuda", "grace")
HEAVY = ("cuda", "grace")  # only when asked: --cuda, or --only


def corpus(root: Path) -> list[Figure]:
    upstream = os.environ.get("FACTORY_UPSTREAM_RECIPES")
    if not upstream:
        print("corpus figures skipped: set FACTORY_UPSTREAM_RECIPES to a recipes tree")
        return []
    with tempfile.TemporaryDirectory(prefix="factory-corpus-lock-") as folder:
        figures = lock_figures(Path(upstream), Path(folder))
        return figures + generate_figures(root, Path(upstream), Path(folder) / "lock")


def startup(root: Path) -> list[Figure]:
    tiny = load_project(root).catalog.build_recipe("cpu")
    with scratch_project(root, tiny) as project:
        plan = blueprint(project, "cpu")
        build_image(project.root, plan, load_settings(root))
        return startup_figures(plan, project.out)


def untag_bench_images(client: docker.DockerClient) -> None:
    for image in client.images.list():
        for tag in image.tags:
            if "-bench:" in tag or "/factory-bench:" in tag:
                with contextlib.suppress(ImageNotFound):
                    client.images.remove(tag, noprune=False)


def record(figures: list[Figure], groups: list[str]) -> dict[str, object]:
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    )
    return {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "commit": commit.stdout.strip(),
        "machine": {"cores": len(os.sched_getaffinity(0)), "platform": sys.platform},
        "groups": groups,
        "figures": [asdict(figure) for figure in figures],
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", type=Path, default=Path("reports/bench.json"))
    parser.add_argument("--cuda", action="store_true", help="add the CUDA figures (two 11 GB images)")
    parser.add_argument("--only", choices=GROUPS, help="one group of figures")
    parser.add_argument("--no-history", action="store_true", help="do not add this run to history.jsonl")
    args = parser.parse_args()
    groups = (
        [args.only] if args.only else [g for g in GROUPS if g not in HEAVY or (g == "cuda" and args.cuda)]
    )
    root = Path.cwd()
    client, settings = connect(), load_settings(root)
    figures: list[Figure] = []
    listing: list[str] = []
    try:
        if "hostile" in groups:
            figures += alias_bomb_figures() + hostile_class_figures(root)
        if "corpus" in groups:
            figures += corpus(root)
        if "cpu" in groups:
            cpu_figures(root, client, settings, figures, listing)
        if "startup" in groups:
            figures += startup(root)
        if "trust" in groups:
            with bench_registry() as registry:
                if registry is None:
                    print("trust figures skipped: no registry answers (FACTORY_BENCH_REGISTRY)")
                else:
                    figures += trust_figures(root, client, settings, registry)
        if "cuda" in groups:
            with bench_registry() as registry:
                cuda_figures(root, client, settings, registry, figures, listing)
        if "grace" in groups:
            grace_figures(root, client, settings, figures, listing)
    finally:
        untag_bench_images(client)
        print(table(figures))  # what was measured, also when a later part failed
        if listing:
            print("\nlayers beyond the base, largest first:\n" + "\n".join(listing))
    entry = record(figures, groups)
    write_text_atomic(args.json, json.dumps(entry, indent=2) + "\n")
    if not args.no_history:
        with HISTORY.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(entry) + "\n")
    print(f"\nwritten: {args.json}" + ("" if args.no_history else f" and a line of {HISTORY.name}"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
