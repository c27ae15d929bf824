"""The build record: what made an image ID, kept for its provenance (factory.trust.provenance).

`factory build` writes one per image ID under reports/built/ (beside build.json), as validation writes its
record under reports/validated/: the base image it was built on, by the engine's ID and any registry digest,
the builder (the factory's release, the engine, the CI run when there is one), and when the build started and
finished. The first build of an ID is kept: a later build that found every step cached made nothing new.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import docker
from docker.errors import ImageNotFound

from factory import __version__
from factory.base.files import write_text_atomic
from factory.builder.builder import BuildResult

RECORDS = "built"  # the records' folder, beside the build report


@dataclass(frozen=True)
class BuildRecord:
    image: str
    image_id: str
    inputs_hash: str
    base_image: str  # as the build named it
    base_image_id: str | None  # the engine's ID of it (its config's digest); None when BuildKit pulled it
    base_image_digests: list[str]  # the registry digests the engine knows for it (none for a local image)
    builder_id: str  # a URI naming who built it: the CI workflow run, or this factory on this host
    builder_version: dict[str, str]
    backend: str
    started: str  # ISO 8601, UTC: this build's start and end
    finished: str
    # What the build found cached (all of it: the image existed, made by an earlier build), and when the
    # engine says the image was made.
    cached_steps: int = 0
    total_steps: int = 0
    image_created: str = ""


def builder_identity(backend: str) -> str:
    """The CI workflow's run where there is one (GitHub Actions sets these), else the factory on this host."""
    server, workflow = os.environ.get("GITHUB_SERVER_URL"), os.environ.get("GITHUB_WORKFLOW_REF")
    if server and workflow:
        return f"{server}/{workflow}"
    return f"urn:vllm-image-factory:{backend}@{socket.gethostname()}"


def record_of(client: docker.DockerClient, result: BuildResult, engine_version: str) -> BuildRecord:
    try:
        base = client.images.get(result.base_image)
        base_id: str | None = str(base.id)
        digests = sorted(str(d) for d in base.attrs.get("RepoDigests") or [])
    except ImageNotFound:
        base_id, digests = None, []
    finished = datetime.now(UTC).replace(microsecond=0)
    started = finished - timedelta(seconds=round(result.duration_s))
    run = os.environ.get("GITHUB_RUN_ID")
    return BuildRecord(
        image=result.image,
        image_id=result.image_id,
        inputs_hash=result.inputs_hash,
        base_image=result.base_image,
        base_image_id=base_id,
        base_image_digests=digests,
        builder_id=builder_identity(result.backend),
        builder_version={"factory": __version__, "engine": engine_version, **({"run": run} if run else {})},
        backend=result.backend,
        started=started.isoformat().replace("+00:00", "Z"),
        finished=finished.isoformat().replace("+00:00", "Z"),
        cached_steps=result.cached_steps,
        total_steps=result.total_steps,
        image_created=str(client.images.get(result.image_id).attrs.get("Created", "")),
    )


def record_path(records: Path, image_id: str) -> Path:
    return records / f"{image_id.replace(':', '-')}.json"


def write_record(record: BuildRecord, records: Path) -> Path:
    """Keep the first record of an image ID (a cached rebuild made nothing new)."""
    path = record_path(records, record.image_id)
    if not path.is_file():
        write_text_atomic(path, json.dumps(asdict(record), indent=2) + "\n")
    return path


def read_record(records: Path, image_id: str) -> BuildRecord | None:
    path = record_path(records, image_id)
    if not path.is_file():
        return None
    return BuildRecord(**json.loads(path.read_text(encoding="utf-8")))
