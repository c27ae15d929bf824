"""Grace (linux/arm64) beside x86: the same recipe and release built cold for GB200 on this amd64 machine (its
locked set installed on the build's own platform, its own steps under QEMU) and for B200 natively, each
time and size; the GB200 image's steps by where they ran. Two images of 8 to 11 GB and the GB200 install
stage's cache beside them (about 30 GB of free disk); `--only grace`."""

from __future__ import annotations

from pathlib import Path

import docker
from figures import Figure, blueprint, scratch_project

from factory.base.settings import BuildSettings
from factory.builder.builder import BuildResult, build_image
from factory.project import load_project
from images import forget_download_caches, layer_sizes


def cold(root: Path, client: docker.DockerClient, settings: BuildSettings, hardware: str) -> BuildResult:
    recipe = load_project(root).catalog.build_recipe("gb200")  # the project's Grace recipe (MiniMax-M2.5)
    with scratch_project(root, recipe) as project:
        forget_download_caches(client)
        return build_image(project.root, blueprint(project, hardware), settings, no_cache=True)


def grace_figures(
    root: Path,
    client: docker.DockerClient,
    settings: BuildSettings,
    figures: list[Figure],
    listing: list[str],
) -> None:
    arm = cold(root, client, settings, "gb200")
    listing += ["", "GB200 (linux/arm64) image:"]
    listing += [f"{size / 1e6:10.1f} MB  {created}" for created, size in layer_sizes(client, arm.image_id)]
    client.images.remove(arm.tags[0], noprune=False)  # one 8 GB image on the disk at a time
    x86 = cold(root, client, settings, "b200")
    figures.append(
        Figure(
            "cold GB200 (arm64, QEMU) build / cold B200 build, same recipe and release",
            round(arm.duration_s / x86.duration_s, 2),
            "x",
            "(reported)",
            None,
            f"GB200 {arm.duration_s:.0f} s, {arm.size_bytes / 1e9:.2f} GB ({arm.total_steps} steps);"
            f" B200 {x86.duration_s:.0f} s, {x86.size_bytes / 1e9:.2f} GB; nothing cached, download caches"
            " emptied",
        )
    )
    figures.append(
        Figure(
            "GB200 image size / B200 image size",
            round(arm.size_bytes / x86.size_bytes, 2),
            "x",
            "(reported)",
            None,
            f"{arm.image.split(':')[-1]} {arm.size_bytes / 1e9:.2f} GB, {x86.image.split(':')[-1]}"
            f" {x86.size_bytes / 1e9:.2f} GB",
        )
    )
