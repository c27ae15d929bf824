"""`factory publish`: push the readable and immutable tags of a validated image, then make sure the
registry serves exactly the digest that was pushed."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

from docker.errors import ImageNotFound
from docker.models.images import Image

from factory.base.errors import DockerError, InputError, RefusedError
from factory.base.files import write_text_atomic
from factory.base.reporter import Reporter, silent
from factory.engine.connect import connect
from factory.lockfile.published import PublishedImage, Signed, record_published
from factory.publish.pusher import push
from factory.publish.registry import credentials_for, manifest_digest, split_registry
from factory.validate.report import record_path


@dataclass(frozen=True)
class Published:
    reference: str
    digest: str
    image_id: str
    attempts: int
    validated: bool


def validation_record(records: Path, image_id: str) -> dict[str, object] | None:
    path = record_path(records, image_id)
    if not path.is_file():
        return None
    record: dict[str, object] = json.loads(path.read_text(encoding="utf-8"))
    return record


class Publishable(Protocol):
    """An image publish pushes: a vLLM image's plan, or the PD router's image."""

    @property
    def reference(self) -> str: ...
    @property
    def repository(self) -> str: ...
    @property
    def tag(self) -> str: ...
    @property
    def immutable_tag(self) -> str: ...
    @property
    def immutable_reference(self) -> str: ...
    @property
    def tag_values(self) -> dict[str, str]: ...
    @property
    def validate_command(self) -> str: ...


def expand_tags(image: Publishable, templates: list[str]) -> list[str]:
    """CI tag conventions as templates: '{tag}-1.2.0', '{tag}-sha-abc1234', 'latest-{hardware}-{variant}'."""
    values = image.tag_values
    try:
        return [template.format(**values) for template in templates]
    except (KeyError, IndexError, ValueError) as exc:
        raise InputError(
            f"bad tag template ({exc})",
            field="--tag",
            value=templates,
            valid=[f"{{{key}}}" for key in values],
        ) from None


def validated_image(
    image: Publishable,
    records: Path,
    force_unvalidated: bool,
    report: Reporter = silent,
    allow_no_gpu: bool = False,
) -> tuple[Image, bool]:
    """The built image, and whether a passing validation with live probes is recorded for its ID (or, with
    `allow_no_gpu`, one whose static checks passed where no GPU could run the probes); refused without one,
    unless forced."""
    client = connect()
    try:
        # By the tag naming this tree's inputs: the readable tag may since name a build of other inputs.
        local = client.images.get(image.immutable_reference)
    except ImageNotFound:
        raise DockerError(
            f"{image.immutable_reference} is not built on this engine; build and validate it first"
        ) from None
    record = validation_record(records, str(local.id))
    validated = _validated(record, str(local.id), allow_no_gpu)
    if not validated and not force_unvalidated:
        why = (
            "no validation record"
            if record is None
            else "its validation did not run the live probes or failed"
        )
        raise RefusedError(
            f"{image.reference} ({str(local.id)[:19]}) is not validated: {why}; looked in {records}\n"
            f"  hint: {image.validate_command} (a rebuilt image has a new ID and needs its own validation)"
        )
    if not validated:
        report(f"WARNING: publishing {image.reference} WITHOUT a passing validation (--force-unvalidated)")
    elif record is not None and not record.get("fully_validated"):
        report(f"note: {image.reference} is checked statically; its GPU probes were not run (--allow-no-gpu)")
    return local, validated


def publish_image(
    image: Publishable,
    registry: str,
    records: Path,
    extra_tags: list[str] | None = None,
    force_unvalidated: bool = False,
    attempts: int = 4,
    backoff_s: float = 1.0,
    report: Reporter = silent,
    allow_no_gpu: bool = False,
) -> list[Published]:
    """Push the image's tags (only when `validated_image` accepts it)."""
    client = connect()
    local, validated = validated_image(image, records, force_unvalidated, report, allow_no_gpu)
    credentials = credentials_for(split_registry(registry)[0])
    target = f"{registry}/{image.repository}"
    published = []
    for tag in dict.fromkeys([image.tag, image.immutable_tag, *expand_tags(image, extra_tags or [])]):
        local.tag(target, tag)
        pushed = push(client, target, tag, credentials, attempts=attempts, backoff_s=backoff_s, report=report)
        served = manifest_digest(registry, image.repository, tag, credentials)
        if served != pushed.digest:
            raise DockerError(
                f"{target}:{tag}: the registry serves {served}, but the push reported {pushed.digest}"
            )
        published.append(
            Published(f"{target}:{tag}", pushed.digest, str(local.id), pushed.attempts, validated)
        )
    return published


def _validated(record: dict[str, object] | None, image_id: str, allow_no_gpu: bool) -> bool:
    """Whether the record is a passing validation of this very image: with its live probes, or (allowed) of
    an image whose GPU probes could not run here."""
    if record is None or record.get("image_id") != image_id:
        return False
    return bool(record.get("fully_validated") or (allow_no_gpu and record.get("passed")))


def write_publish_report(results: list[Published], path: Path) -> None:
    write_text_atomic(path, json.dumps([asdict(result) for result in results], indent=2) + "\n")


def record_publish(
    image: Publishable, published: list[Published], path: Path, signed: Signed | None = None
) -> None:
    """Note in the publish record (committed, read by `factory generate`) where the image now lives, its
    digest, and how it is signed and attested, so the manifests run it by digest and compose verifies it."""
    readable = next(item for item in published if item.reference.endswith(f"/{image.reference}"))
    repository = readable.reference.removesuffix(f":{image.tag}")
    entry = PublishedImage(
        repository=repository, digest=readable.digest, immutable_tag=image.immutable_tag, signed=signed
    )
    record_published(path, image.reference, entry)
