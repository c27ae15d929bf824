"""Multi-platform tags: one manifest list over a recipe's images that differ only in CPU platform.

B200 (linux/amd64) and GB200 (linux/arm64, Grace) serve the same GPU architecture with the same
recipe; a user on either pulls one tag and gets the right image. Each member must already be
published (and so validated); platforms are read from what the registry holds, not assumed."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from factory.base.errors import DockerError, InputError, RefusedError
from factory.lockfile.published import PublishedImage, read_record, record_published
from factory.plan.models import ImagePlan
from factory.publish.registry import (
    MANIFEST_TYPES,
    Credentials,
    credentials_for,
    manifest_digest,
    registry_request,
    split_registry,
)

DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"


@dataclass(frozen=True)
class PlatformGroup:
    tag: str  # the multi-platform tag, e.g. vllm0.11.2-sm_100-default
    members: tuple[ImagePlan, ...]


@dataclass(frozen=True)
class Member:
    tag: str
    digest: str
    media_type: str
    size: int
    platform: dict[str, str]

    @property
    def platform_name(self) -> str:
        return "/".join(
            filter(None, (self.platform["os"], self.platform["architecture"], self.platform.get("variant")))
        )


def platform_groups(images: list[ImagePlan]) -> list[PlatformGroup]:
    """Images of one recipe, variant, vLLM and GPU architecture that exist for more than one platform."""
    groups: dict[tuple[str, ...], list[ImagePlan]] = {}
    for image in images:
        if image.gpu_arch is None or image.vllm_version is None:
            continue
        key = (image.recipe_id, image.variant, image.vllm_version, image.vendor, image.gpu_arch)
        groups.setdefault(key, []).append(image)
    found = []
    for (_, variant, version, _, arch), members in groups.items():
        first_per_platform = {image.platform: image for image in reversed(members)}
        if len(first_per_platform) > 1:
            ordered = tuple(sorted(first_per_platform.values(), key=lambda image: image.platform))
            found.append(PlatformGroup(f"vllm{version}-{arch}-{variant}", ordered))
    return found


def describe(registry: str, repository: str, tag: str, credentials: Credentials | None) -> Member:
    response = registry_request(
        "GET", registry, f"{repository}/manifests/{tag}", credentials, {"Accept": MANIFEST_TYPES}
    )
    if response.status_code == 404:
        raise DockerError(
            f"{registry}/{repository}:{tag} is not published; publish each platform's image first"
        )
    if response.status_code != 200:
        raise DockerError(f"the registry answered HTTP {response.status_code} for {repository}:{tag}")
    media_type = response.headers.get("Content-Type", "").split(";")[0]
    if media_type in (DOCKER_LIST, OCI_INDEX):
        raise DockerError(f"{repository}:{tag} is already a multi-platform list")
    manifest: dict[str, Any] = json.loads(response.content)
    config = registry_request(
        "GET", registry, f"{repository}/blobs/{manifest['config']['digest']}", credentials
    )
    if config.status_code != 200:
        raise DockerError(f"cannot read the config of {repository}:{tag} (HTTP {config.status_code})")
    settings = config.json()
    platform = {"os": settings["os"], "architecture": settings["architecture"]}
    if settings.get("variant"):
        platform["variant"] = settings["variant"]
    digest = (
        response.headers.get("Docker-Content-Digest")
        or "sha256:" + hashlib.sha256(response.content).hexdigest()
    )
    return Member(tag, digest, media_type, len(response.content), platform)


def push_platform_list(
    registry: str, repository: str, tag: str, member_tags: list[str], credentials: Credentials | None
) -> str:
    members = [describe(registry, repository, member, credentials) for member in member_tags]
    names = [member.platform_name for member in members]
    if len(set(names)) != len(names):
        raise InputError(
            "a multi-platform tag needs one image per platform",
            field="members",
            value=dict(zip(member_tags, names, strict=True)),
        )
    list_type = DOCKER_LIST if all(m.media_type == DOCKER_MANIFEST for m in members) else OCI_INDEX
    body = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": list_type,
            "manifests": [
                {"mediaType": m.media_type, "size": m.size, "digest": m.digest, "platform": m.platform}
                for m in members
            ],
        },
        separators=(",", ":"),
    ).encode()
    response = registry_request(
        "PUT", registry, f"{repository}/manifests/{tag}", credentials, {"Content-Type": list_type}, body
    )
    if response.status_code not in (200, 201):
        raise DockerError(
            f"the registry refused the list {repository}:{tag} (HTTP {response.status_code}):"
            f" {response.text[:300]}"
        )
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    served = manifest_digest(registry, repository, tag, credentials)
    if served != digest:
        raise DockerError(
            f"{repository}:{tag}: the registry serves {served}, but the list pushed was {digest}"
        )
    return digest


def recipe_groups(recipe_id: str, images: list[ImagePlan]) -> list[PlatformGroup]:
    """The platform groups of one recipe, by its recipe id (<org>/<file name>), never its model id: the
    two differ where a recipe's file is not named after its model."""
    return [group for group in platform_groups(images) if group.members[0].recipe_id == recipe_id]


def publish_platform_groups(registry: str, groups: list[PlatformGroup], record: Path) -> list[str]:
    """Join each platform group under its multi-platform tag, from the members `factory publish` pushed (and
    so validated) as the publish record holds them; note the list in the record, so that the compose files
    and manifests of every member run it by its digest. One line per list pushed."""
    credentials = credentials_for(split_registry(registry)[0])
    published = []
    for group in groups:
        repository = group.members[0].repository
        entries = _validated_members(registry, group, record, credentials)
        digest = push_platform_list(
            registry, repository, group.tag, [m.tag for m in group.members], credentials
        )
        for member, entry in zip(group.members, entries, strict=True):
            joined = entry.model_copy(update={"platforms_tag": group.tag, "platforms_digest": digest})
            record_published(record, member.reference, joined)
        pairs = zip(group.members, entries, strict=True)
        platforms = ", ".join(f"{m.hardware} {m.platform} {e.digest}" for m, e in pairs)
        published.append(f"published {registry}/{repository}:{group.tag} {digest} ({platforms})")
    return published


def _validated_members(
    registry: str, group: PlatformGroup, record: Path, credentials: Credentials | None
) -> list[PublishedImage]:
    """Each member as `factory publish` recorded it: pushed from these very inputs, and still what the
    registry serves under its tag (else a tag moved since: the list would join an image nobody validated)."""
    found = read_record(record)
    entries = []
    for member in group.members:
        entry = found.pinned(member.reference, member.immutable_tag)
        where = f"{registry}/{member.repository}"
        if entry is None or entry.repository != where:
            raise RefusedError(
                f"{member.reference} is not published to {registry} from these inputs"
                f" ({member.immutable_tag}) in {record}\n  hint: factory validate, then factory publish"
                f" {member.recipe_id} --hardware {member.hardware} --registry {registry}"
            )
        served = describe(registry, member.repository, member.tag, credentials).digest
        if served != entry.digest:
            raise RefusedError(
                f"{where}:{member.tag} is {served} in the registry, but `factory publish` pushed"
                f" {entry.digest} (the tag was moved since): publish it again"
            )
        entries.append(entry)
    return entries
