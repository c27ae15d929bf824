"""`nox -s bench`: rebuild cost, layer sharing, image size against its floor, time to healthy.

Every figure is a ratio of two measurements taken back to back in one run, because these machines are
noisy. The benchmark builds under its own image names (a scratch copy of the project), so it never
moves a real tag, and removes what it tagged. A development tool, not part of the installed package.
Run: python benchmarks/bench.py [--json PATH] (what `nox -s bench` does).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

import docker
import yaml
from docker.errors import ImageNotFound

from factory.blueprint import Blueprint, select
from factory.build.builder import BuildResult, build_image
from factory.engine import connect
from factory.files import write_text_atomic
from factory.generate import generate
from factory.plan.models import ImagePlan
from factory.project import Project, load_project
from factory.settings import BuildSettings, load_settings
from factory.validate.container import running
from factory.validate.probes import chat, wait_healthy
from factory.validate.static import run_in_image

TINY_FILE = Path("recipes/models/factory/tiny-random-llama.yaml")
BENCH_SLUG = "tiny-random-llama-bench"


@dataclass(frozen=True)
class Figure:
    name: str
    value: float
    unit: str
    goal: str
    met: bool | None
    detail: str


@contextlib.contextmanager
def scratch_project(root: Path, extra_args: list[str] | None = None) -> Iterator[Project]:
    """A copy of the project whose tiny recipe builds as vllm-factory/tiny-random-llama-bench."""
    with tempfile.TemporaryDirectory(prefix="factory-bench-") as folder:
        copy = Path(folder)
        for name in ("recipes", "catalog", "images", "compose"):
            shutil.copytree(root / name, copy / name)
        path = copy / TINY_FILE
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        data["meta"]["slug"] = BENCH_SLUG
        data["model"]["base_args"] += extra_args or []
        path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
        project = load_project(copy)
        generate(project)
        yield project


def tiny(project: Project) -> Blueprint:
    """The built-in default: the catalog's build recipe for the CPU target."""
    return select(project, project.catalog.build_recipe("cpu"), "cpu", "default")[0]


def floor_install(image: ImagePlan, settings: BuildSettings, cache: Path) -> float:
    """pip install of the image's packages into an empty venv on this machine: the floor of a build."""
    with tempfile.TemporaryDirectory(prefix="factory-floor-") as folder:
        venv = Path(folder) / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        command = [str(venv / "bin" / "pip"), "install", "-q", *image.pip_requirements]
        if settings.find_links:
            command += ["--find-links", str(settings.find_links)]
        env = {**os.environ, "PIP_CACHE_DIR": str(cache)}
        started = time.monotonic()
        subprocess.run(command, check=True, env=env)
        if image.remove_packages:
            subprocess.run(
                [str(venv / "bin" / "pip"), "uninstall", "-q", "-y", *image.remove_packages],
                env=env,
                check=True,
            )
        return time.monotonic() - started


def layer_sizes(client: docker.DockerClient, image_id: str) -> list[tuple[str, int]]:
    """(created by, size) of each non-empty layer, from the image's history."""
    history = client.images.get(image_id).history()
    return [
        (str(entry.get("CreatedBy", ""))[-90:], int(entry.get("Size", 0)))
        for entry in history
        if entry.get("Size")
    ]


def size_against_floor(client: docker.DockerClient, result: BuildResult) -> tuple[Figure, list[str]]:
    """Image size against base + installed packages; list every layer beyond them."""
    image = client.images.get(result.image_id)
    base = client.images.get(result.base_image)
    venv_bytes = int(run_in_image(client, result.image_id, ["du", "-sb", "/opt/vllm"], {}).split()[0])
    total, base_bytes = int(image.attrs["Size"]), int(base.attrs["Size"])
    beyond = total - base_bytes - venv_bytes
    own_layers = layer_sizes(client, result.image_id)[: -len(layer_sizes(client, str(base.id))) or None]
    listing = [f"{size / 1e6:10.1f} MB  {created}" for created, size in own_layers]
    figure = Figure(
        f"image size vs floor ({result.image.split(':')[-1]})",
        round(100 * beyond / total, 2),
        "% over",
        "< 3 %",
        beyond / total < 0.03,
        f"image {total / 1e9:.2f} GB = base {base_bytes / 1e9:.2f} GB + venv {venv_bytes / 1e9:.2f} GB"
        f" + {beyond / 1e6:.1f} MB beyond (du counts apparent sizes: about 1 % either way is noise)",
    )
    return figure, listing


def startup_overhead(blueprint: Blueprint) -> tuple[Figure, Figure]:
    """Probe's own overhead: when /health was seen answering, against when vLLM logged it was up."""
    image = blueprint.image
    with running(
        image, blueprint.vendor, blueprint.server, ["--tensor-parallel-size", "1"], "bench"
    ) as started:
        wrapped = started.container.get_wrapped_container()
        healthy_s = wait_healthy(started.health_url, started.name, 600, started.state, poll_s=0.1)
        seen_at = time.time()
        answer = chat(started.base_url, image.served_model_name)
        logs = wrapped.logs(timestamps=True).decode(errors="replace").splitlines()
    ready = next(line for line in logs if "Application startup complete" in line)
    ready_at = datetime.fromisoformat(ready.split(" ", 1)[0][:26] + "+00:00").timestamp()
    overhead = seen_at - ready_at
    return (
        Figure(
            "probe overhead: /health seen after vLLM logged ready",
            round(overhead, 3),
            "s",
            "< 1 s",
            overhead < 1.0,
            f"healthy after {healthy_s:.1f} s from container start",
        ),
        Figure(
            "first chat completion after healthy",
            round(answer.seconds, 3),
            "s",
            "(reported)",
            None,
            f"{answer.completion_tokens} tokens",
        ),
    )


def regenerate_time(root: Path) -> Figure:
    with tempfile.TemporaryDirectory(prefix="factory-regen-") as folder:
        copy = Path(folder)
        for name in ("recipes", "catalog"):
            shutil.copytree(root / name, copy / name)
        started = time.monotonic()
        files = generate(load_project(copy)).files
        seconds = time.monotonic() - started
    return Figure(
        "regenerate every file for the whole catalog",
        round(seconds, 3),
        "s",
        "< 1 s",
        seconds < 1.0,
        f"{len(files)} files: load, plan, render, write",
    )


def untag(client: docker.DockerClient, repository: str) -> None:
    for image in client.images.list(name=repository):
        for tag in image.tags:
            with contextlib.suppress(ImageNotFound):
                client.images.remove(tag, noprune=False)


def run(root: Path) -> tuple[list[Figure], list[str]]:
    client = connect()
    settings = load_settings(root)
    figures: list[Figure] = []
    listing: list[str] = []
    cache = root / ".bench-pip-cache"
    try:
        with scratch_project(root) as project:
            blueprint = tiny(project)
            # Warm pip's download cache first, as the build's cache mount is warm.
            floor_install(blueprint.image, settings, cache)
            cold = build_image(project.root, blueprint, settings, no_cache=True)
            floor = floor_install(blueprint.image, settings, cache)
            figures.append(
                Figure(
                    "cold CPU build vs pip-install floor",
                    round(cold.duration_s / floor, 2),
                    "x",
                    "(reported)",
                    None,
                    f"build {cold.duration_s:.1f} s, floor {floor:.1f} s",
                )
            )
            again = build_image(project.root, blueprint, settings)
            figures.append(
                Figure(
                    "no-change rebuild / cold build",
                    round(100 * again.duration_s / cold.duration_s, 2),
                    "%",
                    "< 2 %",
                    again.duration_s / cold.duration_s < 0.02,
                    f"{again.duration_s:.2f} s, {again.cached_steps}/{again.total_steps} steps cached",
                )
            )
            size, listing = size_against_floor(client, cold)
            figures.append(size)
        with scratch_project(root, ["--max-num-seqs", "4"]) as changed_project:
            changed = build_image(changed_project.root, tiny(changed_project), settings)
            figures.append(
                Figure(
                    "serve-argument rebuild / cold build",
                    round(100 * changed.duration_s / cold.duration_s, 2),
                    "%",
                    "< 5 %",
                    changed.duration_s / cold.duration_s < 0.05,
                    f"{changed.duration_s:.2f} s, {changed.cached_steps}/{changed.total_steps} cached",
                )
            )
            healthy, first_chat = startup_overhead(tiny(changed_project))
            figures += [healthy, first_chat]
        main = load_project(root)
        kimi = main.catalog.build_recipe("h200")
        h200 = build_image(root, select(main, kimi, "h200", "default")[0], settings)
        h100 = build_image(root, select(main, kimi, "h100", "default")[0], settings)
        h200_layers = set(client.images.get(h200.image_id).attrs["RootFS"]["Layers"])
        added = [
            layer
            for layer in client.images.get(h100.image_id).attrs["RootFS"]["Layers"]
            if layer not in h200_layers
        ]
        figures.append(
            Figure(
                "layers H100 adds to H200",
                float(len(added)),
                "layers",
                "0 bytes (< 1 MB)",
                not added,
                f"{h100.cached_steps}/{h100.total_steps} steps cached; only labels/env/entrypoint differ",
            )
        )
        h200_size, h200_listing = size_against_floor(client, h200)
        figures.append(h200_size)
        listing += ["", "H200 image:", *h200_listing]
        figures.append(regenerate_time(root))
    finally:
        untag(client, f"vllm-factory/{BENCH_SLUG}")
        shutil.rmtree(cache, ignore_errors=True)
    return figures, listing


def table(figures: list[Figure]) -> str:
    rows = [f"{'figure':58} {'value':>10} {'unit':6} {'goal':16} {'met':5} detail"]
    for f in figures:
        met = "-" if f.met is None else ("yes" if f.met else "NO")
        rows.append(f"{f.name:58} {f.value:>10} {f.unit:6} {f.goal:16} {met:5} {f.detail}")
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", type=Path, default=Path("reports/bench.json"))
    args = parser.parse_args()
    root = Path.cwd()
    figures, listing = run(root)
    print(table(figures))
    print("\nlayers beyond the base, largest first (CPU image):")
    print("\n".join(listing))
    machine = {"cores": os.cpu_count(), "platform": sys.platform}
    figures_json = json.dumps({"machine": machine, "figures": [asdict(f) for f in figures]}, indent=2)
    write_text_atomic(args.json, figures_json + "\n")
    print(f"\nwritten: {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
