"""Signing a published digest and attaching its SBOM and provenance (cosign, legacy layout), then proving it.

Everything a signature will vouch for is made before anything is pushed (`prepare`): the SBOM read from the
built image and checked against the lock, the provenance from the build record. After the push, `attach`
signs the digest and attests both, and verifies what it attached with the same gate `factory verify` and the
compose gate run: what cannot be proven is not recorded as signed.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from factory.base.errors import DockerError, RefusedError
from factory.blueprint import Blueprint
from factory.builder.record import RECORDS, read_record
from factory.engine.connect import connect
from factory.lockfile.published import Attestation, Signed
from factory.project import Project
from factory.publish.registry import Credentials
from factory.publish.sbom import cyclonedx
from factory.trust.cosign import OFFLINE_KEYED, cosign_binary, registry_config, run_cosign
from factory.trust.expect import expected
from factory.trust.gate import (
    PROVENANCE_PREDICATE,
    PROVENANCE_TYPE,
    SBOM_PREDICATE,
    SBOM_TYPE,
    package_differences,
    report_lines,
    sbom_packages,
    verify,
)
from factory.trust.keys import SigningKey, public_key
from factory.trust.provenance import predicate


@dataclass(frozen=True)
class Prepared:
    """The two predicates, as the bytes that will be attested."""

    sbom: bytes
    provenance: bytes


@dataclass
class Timings:
    """Seconds each cosign step took (reported, and in reports/publish.json)."""

    seconds: dict[str, float] = field(default_factory=dict)

    def timed(self, name: str, started: float) -> None:
        self.seconds[name] = round(time.monotonic() - started, 2)


def prepare(project: Project, blueprint: Blueprint, reports: Path) -> Prepared:
    """The SBOM (from inside the built image, checked against the lock) and the provenance (from the build
    record of this image ID): refused before any push when either cannot be made or does not hold."""
    image = blueprint.image
    client = connect()
    image_id = str(client.images.get(image.immutable_reference).id)
    record = read_record(reports / RECORDS, image_id)
    if record is None:
        raise RefusedError(
            f"{image.reference} ({image_id[:19]}) has no build record in {reports / RECORDS}: its provenance"
            f" would not be known\n  hint: factory build {image.recipe_id} --hardware {image.hardware}"
        )
    sbom = cyclonedx(client, image)
    differences = package_differences(sbom_packages(sbom), expected(image, "unpublished@sha256:"))
    if differences:
        raise RefusedError(
            f"{image.reference}: the image's Python packages are not its locked set: "
            + "; ".join(differences[:5])
        )
    provenance = predicate(project, blueprint, record)
    prepared = Prepared(_compact(sbom), _compact(provenance))
    # Beside the other reports, for people and CI to read: exactly the bytes that are attested.
    (reports / f"sbom-{image.slug}-{image.tag}.cdx.json").write_bytes(prepared.sbom)
    (reports / f"provenance-{image.slug}-{image.tag}.json").write_bytes(prepared.provenance)
    return prepared


def _compact(document: object) -> bytes:
    return json.dumps(document, separators=(",", ":"), sort_keys=True).encode()


def _cosign(arguments: list[str], host: str, credentials: Credentials | None, what: str) -> None:
    done = run_cosign(arguments, host, credentials)
    if not done.ok:
        raise DockerError(f"{what} failed: {done.error}")


# Keyless signing: a Sigstore certificate for the CI job's OIDC identity (GitHub Actions), recorded in Rekor.
GITHUB_ISSUER = "https://token.actions.githubusercontent.com"
KEYLESS = ("--new-bundle-format=false", "-y")  # the same legacy layout as the key's signatures


def keyless_identity() -> tuple[str, str]:
    """The certificate identity a keyless signature gets in GitHub Actions: the workflow file at its ref."""
    server, workflow = os.environ.get("GITHUB_SERVER_URL"), os.environ.get("GITHUB_WORKFLOW_REF")
    if not server or not workflow:
        raise RefusedError(
            "keyless signing needs GitHub Actions' OIDC token (GITHUB_WORKFLOW_REF is not set)"
        )
    return f"{server}/{workflow}", GITHUB_ISSUER


def attach(
    reference: str,
    prepared: Prepared,
    key: SigningKey | None,
    credentials: Credentials | None,
    blueprint: Blueprint,
    timings: Timings,
) -> Signed:
    """Sign `reference` (registry/repository@sha256:...) and attest the SBOM and the provenance on it, with
    the key (None: keyless); then verify all three. Returns what the publish record notes."""
    host = reference.split("/", 1)[0]
    signing = ["--key", key.argument, *OFFLINE_KEYED, "-y"] if key else list(KEYLESS)
    wanted = expected(blueprint.image, reference)
    if key is None:
        identity, issuer = keyless_identity()
        wanted = replace(wanted, identity=identity, issuer=issuer)
    with tempfile.TemporaryDirectory(prefix="factory-attest-") as folder:
        sbom, provenance = Path(folder) / "sbom.cdx.json", Path(folder) / "provenance.json"
        sbom.write_bytes(prepared.sbom)
        provenance.write_bytes(prepared.provenance)
        started = time.monotonic()
        _cosign(["sign", *signing, reference], host, credentials, f"signing {reference}")
        timings.timed("sign", started)
        for kind, path, step in (
            (SBOM_TYPE, sbom, "attest SBOM"),
            (PROVENANCE_TYPE, provenance, "attest provenance"),
        ):
            started = time.monotonic()
            arguments = ["attest", *signing, "--type", kind, "--predicate", str(path), reference]
            _cosign(arguments, host, credentials, f"attesting the {kind} of {reference}")
            timings.timed(step, started)
        public = public_key(key) if key else None
        (Path(folder) / "cosign.pub").write_text(public or "")
        started = time.monotonic()
        with registry_config(host, credentials) as env_extra:
            env = {**os.environ, **env_extra}
            checks = verify(str(cosign_binary()), str(Path(folder) / "cosign.pub"), wanted, env)
        timings.timed("verify", started)
    if not all(check.ok for check in checks):
        raise DockerError("; ".join(report_lines(reference, checks)) + " (right after attaching them)")
    signed = _signed(reference, prepared, public, blueprint)
    if wanted.identity:
        return signed.model_copy(update={"identity": wanted.identity, "issuer": wanted.issuer})
    return signed


def _note(predicate_type: str, data: bytes) -> Attestation:
    return Attestation(predicate_type=predicate_type, sha256=hashlib.sha256(data).hexdigest(), size=len(data))


def _signed(reference: str, prepared: Prepared, public: str | None, blueprint: Blueprint) -> Signed:
    image = blueprint.image
    digest = reference.rpartition("@sha256:")[2]
    return Signed(
        recipe=image.recipe_id,
        hardware=image.hardware,
        variant=image.variant,
        kv_store=blueprint.kv_store,
        public_key=public,
        signature=f"sha256-{digest}.sig",
        sbom=_note(SBOM_PREDICATE, prepared.sbom),
        provenance=_note(PROVENANCE_PREDICATE, prepared.provenance),
    )
