"""What a registry receives: a vLLM bump on one torch, and an image's compressed size against its wheels.
Pushed as <registry>/factory-bench:<tag>; the bench deletes its manifests after (the blobs stay until the
registry's garbage collection runs)."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import requests
from docker.errors import ImageNotFound
from figures import Figure

from factory.builder.builder import BuildResult
from factory.publish.pusher import push
from factory.publish.registry import MANIFEST_TYPES, api_base, registry_request

BENCH_REPOSITORY = "factory-bench"
TESTBENCH_REGISTRY = "127.0.0.1:5000"  # testbench/up's


def registry_figures(
    client: docker.DockerClient,
    registry: str,
    older: BuildResult,
    newer: BuildResult,
    wheels: tuple[int, int],
) -> list[Figure]:
    """Push 0.11.1, then 0.11.2, to a registry: what it had to receive for the bump, and what the H200
    image weighs there (compressed) against its locked wheels (`wheels`: how many, their bytes). The
    bench's manifests are deleted after; the registry's blobs stay until its garbage collection runs."""
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
            round(total / wheels[1], 2),
            "x",
            "(reported)",
            None,
            f"registry {total / 1e9:.2f} GB (layers and config); {wheels[0]} wheels {wheels[1] / 1e9:.2f} GB",
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


@contextlib.contextmanager
def bench_registry() -> Iterator[str | None]:
    """The registry the bench pushes to: FACTORY_BENCH_REGISTRY when set (None when it does not answer);
    else a registry of its own, on a free loopback port with its storage in a temporary folder, removed
    with everything pushed to it when the bench ends. (Pushing to the test bench's registry left the
    CUDA images' blobs there, 6 GB a run, until its garbage collection: a CI run after two benchmarks
    found its disk full.) Without the registry's binary, the test bench's registry, if it answers."""
    chosen = os.environ.get("FACTORY_BENCH_REGISTRY")
    binary = shutil.which("docker-registry") or shutil.which("registry")
    if chosen or binary is None:
        yield registry_answering(chosen or TESTBENCH_REGISTRY)
        return
    with tempfile.TemporaryDirectory(prefix="factory-bench-registry-") as folder:
        with socket.socket() as probe:  # a free port: the registry binds it a moment later
            probe.bind(("127.0.0.1", 0))
            address = f"127.0.0.1:{probe.getsockname()[1]}"
        config = Path(folder) / "config.yml"
        config.write_text(
            f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {folder}/data\n  delete:\n"
            f"    enabled: true\nhttp:\n  addr: {address}\n",
            encoding="utf-8",
        )
        with (Path(folder) / "registry.log").open("wb") as log:
            process = subprocess.Popen([binary, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT)
        try:
            for _ in range(100):
                if registry_answering(address) is not None or process.poll() is not None:
                    break
                time.sleep(0.1)
            yield registry_answering(address)
        finally:
            process.terminate()
            process.wait(timeout=30)


def registry_answering(address: str) -> str | None:
    try:
        return (
            address if requests.get(f"{api_base(address)}/v2/", timeout=5).status_code in (200, 401) else None
        )
    except requests.RequestException:
        return None


def _layer_bytes(client: docker.DockerClient, image_id: str) -> list[tuple[str, int]]:
    """(layer digest, uncompressed size), newest first, each size summed from the layer's own folder in the
    engine's overlay2 store (apparent sizes). The history's sizes cannot be paired with the layers: a step
    that only makes folders has a layer of size 0, as a step without a layer has, and pairing them shifted
    every size above it by one layer (a bump counted the dependencies' 2.8 GB for vLLM's own layer)."""
    image = client.images.get(image_id)
    layers = list(reversed(image.attrs["RootFS"]["Layers"]))
    driver = image.attrs["GraphDriver"]
    if driver["Name"] != "overlay2":
        raise SystemExit(
            f"the layer sizes are read from overlay2's folders; this engine stores {driver['Name']}"
        )
    lower = driver["Data"].get("LowerDir")
    folders = [driver["Data"]["UpperDir"], *(lower.split(":") if lower else [])]
    if len(folders) != len(layers):
        raise SystemExit(f"{image_id}: {len(layers)} layers but {len(folders)} layer folders")
    return [(digest, _apparent_size(folder)) for digest, folder in zip(layers, folders, strict=True)]


def _apparent_size(folder: str) -> int:
    total = 0
    for top, _, files in os.walk(folder):
        total += sum((Path(top) / name).lstat().st_size for name in files)
    return total


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
