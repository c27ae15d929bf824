"""`nox -s bench`: build cost, rebuild cost, layer sharing, image size against its floor, time to healthy,
and generate at corpus scale. `nox -s bench -- --cuda` adds the CUDA figures (tens of GB, many minutes).

Every figure is a ratio of two measurements taken back to back in one run, because these machines are
noisy. The benchmark builds under its own image names (a scratch copy of the project), so it never
moves a real tag, and removes what it tagged. A development tool, not part of the installed package.
Run: python benchmarks/bench.py [--cuda] [--json PATH].
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from unittest import mock

import docker
import requests
import yaml
from docker.errors import ImageNotFound

from factory.base.files import write_text_atomic
from factory.base.settings import BuildSettings, load_settings
from factory.build.builder import BuildResult, build_image
from factory.engine.connect import connect
from factory.generate.blueprint import Blueprint
from factory.generate.run import generate
from factory.generate.select import select
from factory.lock.locker import lock
from factory.plan.models import ImagePlan
from factory.project import Project, load_project
from factory.publish.pusher import push
from factory.publish.registry import MANIFEST_TYPES, api_base, registry_request
from factory.router.lock import lock_router
from factory.validate.container import running
from factory.validate.probes import chat, wait_healthy
from factory.validate.static import run_in_image

BENCH_SLUG = "{slug}-bench"
BENCH_REPOSITORY = "factory-bench"


@dataclass(frozen=True)
class Figure:
    name: str
    value: float
    unit: str
    goal: str
    met: bool | None
    detail: str


@contextlib.contextmanager
def scratch_project(
    root: Path, model: str, change: Callable[[dict[str, Any]], None] | None = None
) -> Iterator[Project]:
    """A copy of the project whose recipe `model` builds under <slug>-bench: no real tag ever moves."""
    with tempfile.TemporaryDirectory(prefix="factory-bench-") as folder:
        copy = Path(folder)
        for name in ("recipes", "catalog", "images", "compose"):
            shutil.copytree(root / name, copy / name)
        if (root / ".factory.local.toml").exists():  # this machine's build settings
            shutil.copy(root / ".factory.local.toml", copy)
        path = copy / "recipes" / "models" / f"{model}.yaml"
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        data["meta"]["slug"] = BENCH_SLUG.format(slug=data["meta"]["slug"])
        if change:
            change(data)
        path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
        generate(load_project(copy))
        yield load_project(copy)


def blueprint(project: Project, hardware: str) -> Blueprint:
    return select(project, project.catalog.build_recipe(hardware), hardware, "default")[0]


@dataclass(frozen=True)
class Floor:
    """pip on this machine with exactly an image's locked set, from nothing: a build's floor."""

    download_s: float
    install_s: float
    wheels: int
    wheel_bytes: int

    @property
    def seconds(self) -> float:
        return self.download_s + self.install_s

    def describe(self) -> str:
        return (
            f"pip from nothing {self.seconds:.1f} s (download {self.download_s:.1f} s of {self.wheels}"
            f" wheels, {self.wheel_bytes / 1e9:.2f} GB; install into an empty venv {self.install_s:.1f} s)"
        )


def pip_floor(image: ImagePlan, settings: BuildSettings) -> Floor:
    """`pip download` then `pip install` of the image's locked set, hashes required, no pip cache: what
    `pip install` into an empty venv does (it downloads every wheel, then installs), timed in its two
    halves so that the wheels' total size is measured on the way."""
    assert image.install is not None
    with tempfile.TemporaryDirectory(prefix="factory-floor-") as folder:
        venv, wheels = Path(folder) / "venv", Path(folder) / "wheels"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        locked = ["--require-hashes", "--no-deps"]
        for name, text in image.install.layers:
            (Path(folder) / name).write_text(text)
            locked += ["-r", str(Path(folder) / name)]
        if settings.find_links and image.install.local_wheels:
            locked += ["--find-links", str(settings.find_links)]
        env = {**os.environ, "PIP_NO_CACHE_DIR": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
        pip = [sys.executable, "-m", "pip"]
        started = time.monotonic()
        subprocess.run([*pip, "download", "-q", "-d", str(wheels), *locked], check=True, env=env)
        downloaded = time.monotonic()
        install = [str(venv / "bin" / "pip"), "install", "-q", "--no-index", "--find-links", str(wheels)]
        subprocess.run([*install, *locked], check=True, env=env)
        installed = time.monotonic()
        files = list(wheels.iterdir())
        return Floor(
            downloaded - started,
            installed - downloaded,
            len(files),
            sum(f.stat().st_size for f in files),
        )


def forget_download_caches(client: docker.DockerClient) -> None:
    """Empty the builder's cache mounts (uv's download cache), so that a no-cache build is cold as a
    fresh machine's is: `no_cache` alone keeps cache mounts."""
    # The engine takes a `type` filter (API 1.39+); the SDK's stubs list only dangling and until.
    client.api.prune_builds(filters={"type": ["exec.cachemount"]}, all=True)  # type: ignore[arg-type]


def layer_sizes(client: docker.DockerClient, image_id: str) -> list[tuple[str, int]]:
    """(created by, size) of each non-empty layer, from the image's history."""
    history = client.images.get(image_id).history()
    return [(str(e.get("CreatedBy", ""))[-90:], int(e.get("Size", 0))) for e in history if e.get("Size")]


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


def startup_overhead(plan: Blueprint) -> tuple[Figure, Figure]:
    """Probe's own overhead: when /health was seen answering, against when vLLM logged it was up."""
    image = plan.image
    deployment = next(d for d in plan.deployments if d.nodes == 1)
    cache = Path(tempfile.mkdtemp(prefix="factory-bench-cache-"))
    with running(deployment.spec(deployment.roles[0]), "bench", cache) as started:
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


ROUNDS = 3  # corpus rounds: each runs generate cold, unchanged and --check, with and without manifests
PHASES = (("cold", False), ("unchanged", False), ("check", True))
GOALS = {"cold": 10.0, "unchanged": 2.0, "check": 2.0}  # seconds, with manifests
MANIFEST_GOALS = {"cold": 1.3, "unchanged": 1.2, "check": 1.2}  # with / without manifests (issue 20)


def without_manifests() -> contextlib.AbstractContextManager[object]:
    """generate as it was before Kubernetes manifests: every other file the same, k8s/ left out."""
    return mock.patch("factory.generate.blueprint.kubernetes_outputs", lambda deployment: [])


def corpus_figures(root: Path, upstream: Path) -> list[Figure]:
    """generate over a whole recipes tree: cold, again with nothing changed, and --check; with the Kubernetes
    manifests and without them, the two in turn in every round (the machine's speed drifts), the median
    of ROUNDS rounds, and the ratio taken round by round."""
    with tempfile.TemporaryDirectory(prefix="factory-corpus-") as folder:
        seed = Path(folder) / "seed"
        # Locked as `factory lock` locks it, the PD router included (without it no prefill/decode
        # deployment gets manifests): not timed, it asks the package index.
        project = load_project(root, upstream, seed)
        lock(project, load_settings(root))
        lock_router(project)
        timings: dict[tuple[str, bool], list[float]] = {}
        counts: dict[bool, int] = {}
        for round_number, manifests in itertools.product(range(ROUNDS), (True, False)):
            out = Path(folder) / f"out-{round_number}-{manifests}"
            shutil.copytree(seed / "lock", out / "lock")
            with contextlib.nullcontext() if manifests else without_manifests():
                for name, check in PHASES:
                    started = time.monotonic()
                    result = generate(load_project(root, upstream, out), check=check)
                    timings.setdefault((name, manifests), []).append(time.monotonic() - started)
                    counts[manifests] = result.files
            shutil.rmtree(out)
    figures = []
    for name, _ in PHASES:
        with_k8s, without = timings[(name, True)], timings[(name, False)]
        seconds = statistics.median(with_k8s)
        ratio = statistics.median(a / b for a, b in zip(with_k8s, without, strict=True))
        spread = f"{min(with_k8s):.2f}-{max(with_k8s):.2f} s over {ROUNDS} rounds"
        figures += [
            Figure(
                f"generate the corpus: {name}",
                round(seconds, 2),
                "s",
                f"< {GOALS[name]:g} s",
                seconds < GOALS[name],
                f"{counts[True]} files, {counts[True] / seconds:,.0f} files/s ({spread})",
            ),
            Figure(
                f"generate the corpus: {name}, with manifests / without",
                round(ratio, 2),
                "x",
                f"<= {MANIFEST_GOALS[name]:g}x",
                ratio <= MANIFEST_GOALS[name],
                f"{statistics.median(without):.2f} s without, for {counts[False]} files (median, pairwise)",
            ),
        ]
    size = Figure("corpus size", counts[True], "files", "> 10,000", counts[True] > 10_000, str(upstream))
    return [*figures, size]


def alias_bomb_figures() -> list[Figure]:
    """Reading a few kB of nested YAML anchors (a billion nodes once expanded, issue 18): refused before
    it expands, in about the time a sound recipe of the same size takes to read."""
    from factory.base.errors import InputError
    from factory.base.yamlfile import read_yaml

    levels = "abcdefghi"
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{name}: &{name} [{', '.join([f'*{previous}'] * 9)}]\n"
        for previous, name in itertools.pairwise(levels)
    )
    sound = "".join(f"{name}: [x, x, x, x, x, x, x, x, x]\n" for name in levels)
    timings = {}
    with tempfile.TemporaryDirectory(prefix="factory-bomb-") as folder:
        for name, text in (("bomb", bomb), ("sound", sound)):
            path = Path(folder) / f"{name}.yaml"
            path.write_text(text)
            started = time.monotonic()
            for _ in range(100):
                with contextlib.suppress(InputError):
                    read_yaml(path)
            timings[name] = (time.monotonic() - started) / 100
    ratio = timings["bomb"] / timings["sound"]
    return [
        Figure(
            "alias bomb refused",
            round(timings["bomb"] * 1000, 3),
            "ms",
            "< 10x a sound file of its size",
            ratio < 10,
            f"{len(bomb)} bytes; a sound file of {len(sound)} bytes: {timings['sound'] * 1000:.3f} ms",
        )
    ]


def untag(client: docker.DockerClient, repository: str) -> None:
    for image in client.images.list(name=repository):
        for tag in image.tags:
            with contextlib.suppress(ImageNotFound):
                client.images.remove(tag, noprune=False)


def cpu_figures(
    root: Path,
    client: docker.DockerClient,
    settings: BuildSettings,
    figures: list[Figure],
    listing: list[str],
) -> None:
    tiny = load_project(root).catalog.build_recipe("cpu")
    with scratch_project(root, tiny) as project:
        plan = blueprint(project, "cpu")
        floor = pip_floor(plan.image, settings)
        forget_download_caches(client)
        cold = build_image(project.root, plan, settings, no_cache=True)
        figures.append(
            Figure(
                "cold CPU build vs pip floor (same locked set)",
                round(cold.duration_s / floor.seconds, 2),
                "x",
                "(reported)",
                None,
                f"build {cold.duration_s:.1f} s; {floor.describe()}",
            )
        )
        again = build_image(project.root, plan, settings)
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
        size, layers = size_against_floor(client, cold)
        figures.append(size)
        listing += ["", "tiny CPU image:", *layers]
    with scratch_project(
        root, tiny, lambda d: d["model"]["base_args"].extend(["--max-num-seqs", "4"])
    ) as changed:
        plan = blueprint(changed, "cpu")
        rebuilt = build_image(changed.root, plan, settings)
        figures.append(
            Figure(
                "serve-argument rebuild / cold build",
                round(100 * rebuilt.duration_s / cold.duration_s, 2),
                "%",
                "< 5 %",
                rebuilt.duration_s / cold.duration_s < 0.05,
                f"{rebuilt.duration_s:.2f} s, {rebuilt.cached_steps}/{rebuilt.total_steps} cached",
            )
        )
        figures += startup_overhead(plan)


def cuda_figures(
    root: Path,
    client: docker.DockerClient,
    settings: BuildSettings,
    registry: str | None,
    figures: list[Figure],
    listing: list[str],
) -> None:
    """H200 and H100: uv against pip on the same locked set, layers shared, size; a vLLM bump on one torch,
    and both images' compressed sizes in a registry."""
    kimi = load_project(root).catalog.build_recipe("h200")
    with scratch_project(root, kimi) as project:
        h200 = blueprint(project, "h200")
        floor = pip_floor(h200.image, settings)
        forget_download_caches(client)
        cold = build_image(project.root, h200, settings, no_cache=True)
        figures.append(
            Figure(
                "cold CUDA build (uv) vs pip floor (same locked set)",
                round(cold.duration_s / floor.seconds, 2),
                "x",
                "<= 0.5x",
                cold.duration_s / floor.seconds <= 0.5,
                f"build {cold.duration_s:.1f} s (uv's cache emptied first); {floor.describe()}",
            )
        )
        # Again with no layer cache, now that uv's cache mount holds every wheel: installers compared
        # without the network (pip's half of that is its install from the downloaded wheels).
        warm = build_image(project.root, h200, settings, no_cache=True)
        figures.append(
            Figure(
                "CUDA build, no layer cache, wheels local (uv) vs pip from local wheels",
                round(warm.duration_s / floor.install_s, 2),
                "x",
                "<= 0.5x",
                warm.duration_s / floor.install_s <= 0.5,
                f"build {warm.duration_s:.1f} s (uv's cache warm); pip install from the downloaded wheels"
                f" {floor.install_s:.1f} s",
            )
        )
        h100 = build_image(project.root, blueprint(project, "h100"), settings)
        # The no-cache rebuild made new layers (new timestamps): the builder's cache now holds the warm
        # build's, so that is what the H100 image and the 0.11.1 image are built on and compared with.
        shared = set(client.images.get(warm.image_id).attrs["RootFS"]["Layers"])
        added = [
            layer
            for layer in client.images.get(h100.image_id).attrs["RootFS"]["Layers"]
            if layer not in shared
        ]
        figures.append(
            Figure(
                "layers H100 adds to H200",
                float(len(added)),
                "layers",
                "0 bytes (< 1 MB)",
                not added,
                f"{h100.cached_steps}/{h100.total_steps} steps cached; only labels/env/cmd differ",
            )
        )
        size, layers = size_against_floor(client, warm)
        figures.append(size)
        listing += ["", "H200 image:", *layers]
    older = older_release(root, settings, kimi)
    figures.append(bump_share_on_disk(client, older, warm))
    if registry is None:
        print("registry figures skipped: no registry answers at FACTORY_BENCH_REGISTRY")
    else:
        figures += registry_figures(client, registry, older, warm, floor)


def older_release(root: Path, settings: BuildSettings, kimi: str) -> BuildResult:
    """The same H200 image at vLLM 0.11.1 (torch 2.9.0, as 0.11.2), locked and built in one builder."""

    def older(data: dict[str, Any]) -> None:
        data["model"]["min_vllm_version"] = "0.11.1"
        data["dependencies"][0]["command"] = "uv pip install vllm==0.11.1"

    with scratch_project(root, kimi, older) as project:
        lock(project, settings)
        relocked = load_project(project.root)  # the project read before lock() holds the old lock
        generate(relocked)
        return build_image(project.root, blueprint(relocked, "h200"), settings)


def bump_share_on_disk(client: docker.DockerClient, older: BuildResult, newer: BuildResult) -> Figure:
    """Uncompressed bytes of the newer image's layers that the older one does not have."""
    layers = dict(_layer_bytes(client, older.image_id))
    own = _layer_bytes(client, newer.image_id)
    new_bytes = sum(size for digest, size in own if digest not in layers)
    total = sum(size for _, size in own)
    return Figure(
        "vLLM bump on one torch (0.11.1 -> 0.11.2): new layer bytes / image, uncompressed",
        round(100 * new_bytes / total, 2),
        "%",
        "<= 15 %",
        new_bytes / total <= 0.15,
        f"{new_bytes / 1e9:.2f} GB of {total / 1e9:.2f} GB (one builder's cache)",
    )


def registry_figures(
    client: docker.DockerClient, registry: str, older: BuildResult, newer: BuildResult, floor: Floor
) -> list[Figure]:
    """Push 0.11.1, then 0.11.2, to a registry: what it had to receive for the bump, and what the H200
    image weighs there (compressed) against its locked wheels. The bench's manifests are deleted after;
    the registry's blobs stay until its garbage collection runs."""
    with (
        pushed(client, registry, "bench-older", older.image_id) as before,
        pushed(client, registry, "bench-newer", newer.image_id) as after,
    ):
        received = sum(size for digest, size in after.items() if digest not in before)
        total = sum(after.values())
    return [
        Figure(
            "vLLM bump on one torch (0.11.1 -> 0.11.2): bytes the registry receives / image",
            round(100 * received / total, 2),
            "%",
            "<= 15 %",
            received / total <= 0.15,
            f"{received / 1e9:.2f} GB of {total / 1e9:.2f} GB compressed ({registry})",
        ),
        Figure(
            "H200 image compressed in a registry / sum of its locked wheels",
            round(total / floor.wheel_bytes, 2),
            "x",
            "(reported)",
            None,
            f"registry {total / 1e9:.2f} GB (layers and config); {floor.wheels} wheels"
            f" {floor.wheel_bytes / 1e9:.2f} GB",
        ),
    ]


@contextlib.contextmanager
def pushed(client: docker.DockerClient, registry: str, tag: str, image_id: str) -> Iterator[dict[str, int]]:
    """Push the image as <registry>/factory-bench:<tag>; yield {blob digest: compressed size} from the
    manifest the registry serves (config included); delete that manifest and the local tag after."""
    repository = f"{registry}/{BENCH_REPOSITORY}"
    client.images.get(image_id).tag(repository, tag)
    try:
        push(client, repository, tag, None)
        answer = registry_request(
            "GET", registry, f"{BENCH_REPOSITORY}/manifests/{tag}", None, {"Accept": MANIFEST_TYPES}
        )
        answer.raise_for_status()
        manifest = answer.json()
        blobs = [manifest["config"], *manifest["layers"]]
        try:
            yield {blob["digest"]: int(blob["size"]) for blob in blobs}
        finally:
            digest = answer.headers["Docker-Content-Digest"]
            registry_request("DELETE", registry, f"{BENCH_REPOSITORY}/manifests/{digest}", None)
    finally:
        with contextlib.suppress(ImageNotFound):
            client.images.remove(f"{repository}:{tag}")


def registry_answering(address: str) -> str | None:
    try:
        return (
            address if requests.get(f"{api_base(address)}/v2/", timeout=5).status_code in (200, 401) else None
        )
    except requests.RequestException:
        return None


def _layer_bytes(client: docker.DockerClient, image_id: str) -> list[tuple[str, int]]:
    """(layer digest, uncompressed size), newest first: the history's non-empty steps, which are the
    RootFS layers in the same order (the base's layers come last in both)."""
    image = client.images.get(image_id)
    layers = list(reversed(image.attrs["RootFS"]["Layers"]))
    sizes = [int(entry.get("Size", 0)) for entry in image.history() if entry.get("Size")]
    return list(zip(layers, sizes, strict=False))


def table(figures: list[Figure]) -> str:
    rows = [f"{'figure':66} {'value':>10} {'unit':6} {'goal':16} {'met':5} detail"]
    for f in figures:
        met = "-" if f.met is None else ("yes" if f.met else "NO")
        rows.append(f"{f.name:66} {f.value:>10} {f.unit:6} {f.goal:16} {met:5} {f.detail}")
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", type=Path, default=Path("reports/bench.json"))
    parser.add_argument(
        "--cuda", action="store_true", help="add the CUDA figures (two 11 GB images, minutes)"
    )
    parser.add_argument("--only", choices=["cpu", "corpus", "cuda", "hostile"], help="one group of figures")
    args = parser.parse_args()
    root = Path.cwd()
    client, settings = connect(), load_settings(root)
    registry = registry_answering(os.environ.get("FACTORY_BENCH_REGISTRY", "127.0.0.1:5000"))
    figures: list[Figure] = []
    listing: list[str] = []
    upstream = os.environ.get("FACTORY_UPSTREAM_RECIPES")
    try:
        if args.only in (None, "hostile"):
            figures += alias_bomb_figures()
        if args.only in (None, "corpus"):
            if upstream:
                figures += corpus_figures(root, Path(upstream))
            else:
                print("corpus figures skipped: set FACTORY_UPSTREAM_RECIPES to a recipes tree")
        if args.only in (None, "cpu"):
            cpu_figures(root, client, settings, figures, listing)
        if args.cuda or args.only == "cuda":
            cuda_figures(root, client, settings, registry, figures, listing)
    finally:
        for repository in _bench_repositories(client):
            untag(client, repository)
        print(table(figures))  # what was measured, also when a later part failed
        print("\nlayers beyond the base, largest first:")
        print("\n".join(listing))
    machine = {"cores": os.cpu_count(), "platform": sys.platform}
    write_text_atomic(
        args.json, json.dumps({"machine": machine, "figures": [asdict(f) for f in figures]}, indent=2) + "\n"
    )
    print(f"\nwritten: {args.json}")
    return 0


def _bench_repositories(client: docker.DockerClient) -> set[str]:
    return {tag.rsplit(":", 1)[0] for image in client.images.list() for tag in image.tags if "-bench:" in tag}


if __name__ == "__main__":
    raise SystemExit(main())
