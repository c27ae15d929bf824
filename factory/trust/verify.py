"""`factory verify`: a published image checked against this tree (factory.trust.gate holds the rules).

By IMAGE@DIGEST (or IMAGE:TAG, resolved to the digest the registry serves now) with a public key: the signed
provenance names the recipe, hardware and variant, and this tree plans that image to know what it must be. By
recipe, hardware and variant: the publish record names the digest and the key. Either way the result is the
gate's checks, each failure one line.
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from factory.base.errors import DockerError, InputError
from factory.blueprint.select import select
from factory.lockfile.published import PublishedImage, read_record, record_file
from factory.project import Project
from factory.publish.registry import credentials_for, manifest_digest
from factory.trust.cosign import cosign_binary, registry_config
from factory.trust.expect import expected
from factory.trust.gate import PROVENANCE_TYPE, Check, Expected, attestations, verify

# registry[:port]/path[:tag][@sha256:digest]: what an image reference to verify may be.
REFERENCE = re.compile(
    r"^(?P<host>[a-z0-9.-]+(:[0-9]+)?)/(?P<path>[a-z0-9]+([._/-][a-z0-9]+)*)"
    r"(:(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?(@(?P<digest>sha256:[0-9a-f]{64}))?$"
)


@dataclass(frozen=True)
class Verdict:
    reference: str  # what was checked: registry/repository@sha256:...
    asked: str  # what the user named
    checks: list[Check]

    @property
    def ok(self) -> bool:
        return all(check.ok for check in self.checks)


def by_digest(reference: str) -> tuple[str, str]:
    """(registry/repository@digest, registry host) for a reference by digest or by tag; a tag is resolved to
    the digest the registry serves for it now."""
    found = REFERENCE.fullmatch(reference)
    if found is None:
        raise InputError(
            "not an image reference", value=reference, valid=["REGISTRY/REPOSITORY@sha256:...", "...:TAG"]
        )
    host, path = found["host"], found["path"]
    if found["digest"]:
        return f"{host}/{path}@{found['digest']}", host
    tag = found["tag"] or "latest"
    served = manifest_digest(host, path, tag, credentials_for(host))
    if served is None:
        raise DockerError(f"{host}/{path}:{tag}: the registry has no such tag")
    return f"{host}/{path}@{served}", host


def _identify(project: Project, key: Path, reference: str, env: dict[str, str]) -> Expected | str:
    """What the image must be, from the recipe its signed provenance names (planned by this tree); or why
    that cannot be known."""
    unknown = Expected(reference, "", "", "", {})
    predicates, missing = attestations(
        str(cosign_binary()), unknown.authority(str(key)), PROVENANCE_TYPE, unknown, env
    )
    if missing:
        return missing
    named = predicates[0].get("buildDefinition", {}).get("externalParameters", {})
    try:
        found = select(
            project,
            str(named["recipe"]),
            str(named["hardware"]),
            str(named["variant"]),
            bool(named.get("kvStore")),
        )
    except (KeyError, InputError) as exc:
        return f"its provenance names an image this tree does not plan ({named}): {str(exc).splitlines()[0]}"
    return expected(found[0].image, reference)


def verify_reference(project: Project, reference: str, key: Path) -> Verdict:
    if not key.is_file():
        raise InputError("no such public key file", field="--key", value=str(key))
    checked, host = by_digest(reference)
    with registry_config(host, credentials_for(host)) as env_extra:
        env = {**os.environ, **env_extra}
        wanted = _identify(project, key, checked, env)
        if isinstance(wanted, str):
            signature = verify(str(cosign_binary()), str(key), Expected(checked, "", "", "", {}), env)[0]
            return Verdict(checked, reference, [signature, Check("provenance", False, wanted)])
        return Verdict(checked, reference, verify(str(cosign_binary()), str(key), wanted, env))


def published_entry(
    project: Project, model: str, hardware: str, variant: str | None, kv: bool
) -> tuple[PublishedImage, Expected]:
    """The record's entry for the image this tree plans, and what it must be."""
    path = record_file(project.lock_path)
    record = read_record(path)
    blueprint = select(project, model, hardware, variant, kv)[0]
    image = blueprint.image
    entry = record.images.get(image.reference)
    if entry is None:
        raise InputError(f"{image.reference} is not published (nothing recorded)", file=path)
    if entry.signed is None:
        raise InputError(f"{image.reference} was published unsigned: nothing to verify", file=path)
    wanted = expected(image, entry.by_digest)
    if entry.signed.identity:
        wanted = replace(wanted, identity=entry.signed.identity, issuer=entry.signed.issuer or "")
    return entry, wanted


def verify_published(
    project: Project, model: str, hardware: str, variant: str | None, kv: bool, key: Path | None
) -> Verdict:
    """By recipe, hardware and variant: the digest and key the publish record names (or the key given)."""
    entry, wanted = published_entry(project, model, hardware, variant, kv)
    host = entry.repository.split("/", 1)[0]
    with (
        tempfile.TemporaryDirectory(prefix="factory-verify-") as folder,
        registry_config(host, credentials_for(host)) as env_extra,
    ):
        public = key
        if public is None and entry.signed is not None and entry.signed.public_key:
            public = Path(folder) / "cosign.pub"
            public.write_text(entry.signed.public_key)
        checks = verify(
            str(cosign_binary()), str(public) if public else None, wanted, {**os.environ, **env_extra}
        )
    return Verdict(wanted.reference, f"{model} on {hardware}", checks)
