"""What `factory publish` pushed: per image, the registry repository and the digest the registry serves.

A committed file beside the lock (published.json), written by `factory publish` and read by
`factory generate`, so that generated Kubernetes manifests run an image by digest once it is published and
`generate --check` finds manifests that do not say so yet. Like the lock, it pins: a digest holds only for
the image built from the inputs it was published from (its immutable tag); an image planned from other
inputs since is not pinned by it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from pydantic import Field

from factory.base.errors import InputError
from factory.base.files import write_text_atomic
from factory.base.models import Strict
from factory.base.yamlfile import load_json_model

RECORD_NAME = "published.json"
COMMENT = "written by `factory publish`: what it pushed, by image reference; read by `factory generate`"
# Docker's reference grammar, loosely: a registry host (a port, a namespace), then the repository's path.
REPOSITORY = r"^[a-z0-9]([a-z0-9._:-]*[a-z0-9])?(/[a-z0-9]+([._-]+[a-z0-9]+)*)+$"
TAG = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$"
# An image as the factory names it, repo:tag (vllm-factory/<slug>:<tag>): the record's keys.
REFERENCE = re.compile(r"^[a-z0-9]+([._-]+[a-z0-9]+)*(/[a-z0-9]+([._-]+[a-z0-9]+)*)*:" + TAG[1:])


# A public key as cosign writes it (PEM, base64 lines): printed into generated compose files, so nothing else.
PUBLIC_KEY = r"^-----BEGIN PUBLIC KEY-----\n([A-Za-z0-9+/=]{1,76}\n){1,40}-----END PUBLIC KEY-----\n$"
NAME = r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$"  # a recipe id, hardware or variant as the grammar allows them


class Attestation(Strict):
    """One attestation attached to the digest: its predicate's type, and the predicate's digest and size."""

    predicate_type: str = Field(pattern=r"^https://[A-Za-z0-9._/-]+$")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    size: int


class Signed(Strict):
    """How a published image is signed and attested (cosign's legacy layout, on its digest), and what it was
    planned from: what `factory verify` and the compose gate check it against."""

    recipe: str = Field(pattern=NAME)
    hardware: str = Field(pattern=NAME)
    variant: str = Field(pattern=NAME)
    kv_store: bool = False
    public_key: str | None = Field(None, pattern=PUBLIC_KEY)  # signed with a key: its public half
    identity: str | None = Field(None, pattern=r"^https://[A-Za-z0-9._/@:-]+$")  # signed keyless: who
    issuer: str | None = Field(None, pattern=r"^https://[A-Za-z0-9._/-]+$")  # and their OIDC issuer
    signature: str = Field(pattern=r"^sha256-[0-9a-f]{64}\.sig$")  # the tag cosign keeps it under
    sbom: Attestation
    provenance: Attestation


DIGEST = r"^sha256:[0-9a-f]{64}$"


class PublishedImage(Strict):
    """One image as published: where it was pushed and the digest the registry served for it; and, once
    `factory publish-platforms` joined it with its twins of other platforms, the list's tag and digest."""

    repository: str = Field(pattern=REPOSITORY)  # registry/namespace/repository, without a tag
    digest: str = Field(pattern=DIGEST)
    immutable_tag: str = Field(pattern=TAG)  # the tag that names the inputs the image was built from
    platforms_tag: str | None = Field(None, pattern=TAG)  # the multi-platform tag (vllm0.20.2-sm_100-default)
    platforms_digest: str | None = Field(None, pattern=DIGEST)  # that list's digest
    signed: Signed | None = None  # None: published without a signature (`--unsigned`)

    @property
    def run_digest(self) -> str:
        """What a deployment runs it by: a signed image by its own digest, the one its signature, SBOM and
        provenance are attached to (the compose gate and the admission policy check that digest; a deployment
        is for one hardware, so for one platform); an unsigned one joined in a multi-platform list by the
        list's digest (each engine pulls its own platform's member); else its own digest."""
        if self.signed is not None:
            return self.digest
        return self.platforms_digest or self.digest

    @property
    def by_digest(self) -> str:
        return f"{self.repository}@{self.digest}"


class PublishRecord(Strict):
    comment: str = COMMENT
    images: dict[str, PublishedImage] = {}  # by the image's reference as the factory names it (repo:tag)

    def pinned(self, reference: str, immutable_tag: str) -> PublishedImage | None:
        """The published image for `reference`, if it was published from the same inputs."""
        found = self.images.get(reference)
        return found if found is not None and found.immutable_tag == immutable_tag else None

    def run_reference(self, reference: str, immutable_tag: str) -> str | None:
        """`registry/repository:tag@digest` to run the image by, once published from the same inputs."""
        found = self.pinned(reference, immutable_tag)
        tag = reference.rpartition(":")[2]
        return None if found is None else f"{found.repository}:{tag}@{found.run_digest}"


def record_file(lock_path: Path) -> Path:
    """The record lives beside the lock: the project's recipes/lock/, or the output folder's lock/."""
    return lock_path.parent / RECORD_NAME


def read_record(path: Path) -> PublishRecord:
    """The record at `path`; an empty one when nothing was published yet."""
    if not path.is_file():
        return PublishRecord()
    record = load_json_model(PublishRecord, path, "publish record", hint="publish again, or delete it")
    for reference in record.images:
        if not REFERENCE.fullmatch(reference):  # printed into generated YAML: nothing else may get there
            raise InputError(
                "not an image reference with a tag",
                file=path,
                field="images",
                value=reference,
                valid=["vllm-factory/<name>:<tag>"],
            )
    return record


def record_published(path: Path, reference: str, published: PublishedImage) -> None:
    """Add or replace one image's entry (the last publish wins), written whole, keys sorted."""
    record = read_record(path)
    images = dict(record.images) | {reference: published}
    body = PublishRecord(images=dict(sorted(images.items())))
    write_text_atomic(path, json.dumps(body.model_dump(exclude_none=True), indent=1) + "\n")
