"""Image builds: a cold build against pip's floor on the same locked set, a rebuild's cost, layers shared
between targets and releases, and an image's size against its contents. The CPU figures always; the CUDA
figures with --cuda (two 11 GB images, many minutes, about 35 GB of free disk)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
from figures import Figure, blueprint, scratch_project
from registry import bump_share_on_disk, registry_figures

from factory.base.settings import BuildSettings
from factory.builder.builder import BuildResult, build_image
from factory.generate.run import generate
from factory.lock.locker import lock
from factory.plan.models import ImagePlan
from factory.project import Project, load_project
from factory.validate.static import run_in_image


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
    with locked_now(root, settings, kimi) as project:
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
                f"build {cold.duration_s:.1f} s (nothing cached); {floor.describe()}",
            )
        )
        h100 = build_image(project.root, blueprint(project, "h100"), settings)
        # The builder's cache holds the cold build's layers: the H100 image and the 0.11.1 image are built
        # on them and compared with them.
        shared = set(client.images.get(cold.image_id).attrs["RootFS"]["Layers"])
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
        size, layers = size_against_floor(client, cold)
        figures.append(size)
        listing += ["", "H200 image:", *layers]
    older = older_release(root, settings, kimi)
    figures.append(bump_share_on_disk(client, older, cold))
    if registry is None:
        print("registry figures skipped: no registry answers at FACTORY_BENCH_REGISTRY")
    else:
        figures += registry_figures(client, registry, older, cold, (floor.wheels, floor.wheel_bytes))


def older_release(root: Path, settings: BuildSettings, kimi: str) -> BuildResult:
    """The same H200 image at vLLM 0.11.1 (torch 2.9.0, as 0.11.2), locked and built in one builder."""

    def older(data: dict[str, Any]) -> None:
        data["model"]["min_vllm_version"] = "0.11.1"
        data["dependencies"][0]["command"] = "uv pip install vllm==0.11.1"

    with locked_now(root, settings, kimi, older) as project:
        return build_image(project.root, blueprint(project, "h200"), settings)


@contextlib.contextmanager
def locked_now(
    root: Path, settings: BuildSettings, kimi: str, change: Callable[[dict[str, Any]], None] | None = None
) -> Iterator[Project]:
    """A copy of the project (Kimi under its bench name, changed by `change`) locked anew, its images
    generated. Both releases of the bump are locked in the same run: the committed lock was made days
    before, and a dependency the index has released since made the bump rebuild torch's layer (95 %)."""
    with scratch_project(root, kimi, change) as project:
        shutil.rmtree(project.root / "recipes" / "lock")
        lock(project, settings)
        relocked = load_project(project.root)  # the project read before lock() holds the old lock
        generate(relocked)
        yield relocked
