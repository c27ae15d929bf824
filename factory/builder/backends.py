"""BuildKit front ends. The Docker SDK cannot drive BuildKit (docker-py issue 2230), so builds go
through Compose v2's `build` (reaches the daemon's BuildKit with no buildx: the path tested here) or
`docker buildx bake` where the buildx plugin exists (multi-platform builds, attestations)."""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO

import yaml
from packaging.version import InvalidVersion, Version

from factory.base.errors import DockerError
from factory.base.tools import compose_binary
from factory.builder import network
from factory.builder.context import StagedContext
from factory.builder.display import BuildProgress
from factory.builder.progress import BuildLog


def docker_cli() -> str:
    """The Debian engine's own CLI builds with BuildKit; a newer CLI without buildx may not."""
    for candidate in ("/usr/bin/docker", shutil.which("docker")):
        if candidate and Path(candidate).is_file():
            return candidate
    raise DockerError("no docker CLI found on PATH")


def compose_command() -> list[str]:
    return [str(compose_binary())]


def has_buildx() -> bool:
    return buildx_version() is not None


def buildx_version() -> Version | None:
    """The buildx plugin's release, None without the plugin."""
    answer = _output([docker_cli(), "buildx", "version"])
    return None if answer is None else buildx_release(answer)


def buildx_release(answer: str) -> Version:
    """The release in `docker buildx version`'s answer (`github.com/docker/buildx v0.17.1 8c2d0b3`); one it
    does not print readably counts as 0, the oldest (a feature checked against it is then refused)."""
    words = answer.split()
    try:
        return Version(words[1].lstrip("v").split("-")[0])
    except (IndexError, InvalidVersion):
        return Version("0")


def _output(command: Sequence[str]) -> str | None:
    """What the command printed, None when it failed or did not run."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def compose_build_file(staged: StagedContext, tag: str) -> dict[str, object]:
    return {
        "name": "factory-build",
        "services": {
            "image": {
                "image": tag,
                "build": {
                    "context": str(staged.directory),
                    "dockerfile": "Dockerfile",
                    "args": staged.build_args,
                    "secrets": sorted(staged.secrets),
                    **network.compose_build_fields(staged.network),
                    # Another platform than the engine's: Compose asks the engine's BuildKit for it (QEMU).
                    **({"platforms": [staged.cross_platform]} if staged.cross_platform else {}),
                },
            }
        },
        "secrets": {secret_id: {"file": str(path)} for secret_id, path in staged.secrets.items()},
    }


def bake_file(staged: StagedContext, tag: str, platform: str) -> dict[str, object]:
    return {
        "group": {"default": {"targets": ["image"]}},
        "target": {
            "image": {
                "context": str(staged.directory),
                "dockerfile": "Dockerfile",
                "args": staged.build_args,
                "secret": [
                    f"id={secret_id},src={path}" for secret_id, path in sorted(staged.secrets.items())
                ],
                "tags": [tag],
                "platforms": [platform],
                "output": ["type=docker"],
                **network.bake_target_fields(staged.network),
            }
        },
    }


def _lines(stream: IO[str]) -> Iterator[str | None]:
    """The stream's lines, and None after each second in which none came (a reader thread waits)."""
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        for line in stream:
            lines.put(line)
        lines.put(None)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    while True:
        try:
            line = lines.get(timeout=1.0)
        except queue.Empty:
            yield None
            continue
        if line is None:
            return
        yield line


def build_command(staged: StagedContext, tag: str, backend: str, no_cache: bool = False) -> list[str]:
    """Write the backend's build file beside the staged context; the command that builds from it."""
    workdir = staged.directory.parent
    if backend == "bake":
        spec = workdir / f"{staged.image.tag}.bake.json"
        spec.write_text(json.dumps(bake_file(staged, tag, staged.image.platform), indent=2), encoding="utf-8")
        command = [docker_cli(), "buildx", "bake", "--progress", "plain", "-f", str(spec)]
        command += network.bake_flags(staged.network)
    else:
        spec = workdir / f"{staged.image.tag}.compose.yaml"
        spec.write_text(yaml.safe_dump(compose_build_file(staged, tag)), encoding="utf-8")
        command = [*compose_command(), "-f", str(spec), "--progress", "plain", "build"]
    return command + (["--no-cache"] if no_cache else [])


def run_build(
    staged: StagedContext,
    tag: str,
    backend: str,
    echo: bool,
    no_cache: bool = False,
    progress: BuildProgress | None = None,
) -> BuildLog:
    """Build `staged` into `tag`; raise DockerError with the failing step's log when it fails."""
    command = build_command(staged, tag, backend, no_cache)
    env = {**os.environ, "DOCKER_BUILDKIT": "1", "BUILDKIT_PROGRESS": "plain"}
    log = BuildLog()
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, errors="replace"
    ) as process:
        assert process.stdout is not None
        for line in _lines(process.stdout):
            if line is None:  # a second without output: the progress clock still moves
                if progress is not None:
                    progress.tick()
                continue
            log.feed(line.rstrip("\n"))
            if progress is not None:
                progress.feed(line.rstrip("\n"))
            if echo:
                print(line, end="", file=sys.stderr)
    if process.returncode != 0:
        raise DockerError(
            f"building {staged.image.reference} failed ({backend} backend, exit {process.returncode});\n"
            f"{log.error or 'see the log below'}\n{log.failure()}"
        )
    return log
