"""The tamperings of the trust tests (issue 45): each a context manager that changes what the registry holds
for the published digest the way an attacker (or an accident) would, and puts the original back after."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass

from tests.trust_helpers import OFFLINE, REPOSITORY, Published, attested, replaced, run_cosign


@dataclass(frozen=True)
class Stranger:
    """Two small images in the published image's repository: one signed with the key, one never signed."""

    signed: str  # repository@digest
    unsigned: str


Tamper = Callable[[Published, Stranger], AbstractContextManager[None]]


@contextmanager
def another_keys_signature(published: Published, stranger: Stranger) -> Iterator[None]:
    with replaced(published.namespace, REPOSITORY, published.tag_of("sig")):
        run_cosign(
            published.cosign,
            "sign",
            "--key",
            str(published.other_keys / "cosign.key"),
            *OFFLINE,
            published.reference,
        )
        yield


@contextmanager
def no_signature(published: Published, stranger: Stranger) -> Iterator[None]:
    with replaced(published.namespace, REPOSITORY, published.tag_of("sig")):
        yield


@contextmanager
def attestations_replaced(
    published: Published, sbom: dict[str, object], provenance: dict[str, object]
) -> Iterator[None]:
    """The .att tag replaced by attestations signed with the right key (by whoever holds it), lying."""
    folder = published.reports / f"tampered-{uuid.uuid4().hex[:8]}"
    folder.mkdir()
    (folder / "sbom.json").write_text(json.dumps(sbom))
    (folder / "provenance.json").write_text(json.dumps(provenance))
    with replaced(published.namespace, REPOSITORY, published.tag_of("att")):
        for kind, file in (("cyclonedx", "sbom.json"), ("slsaprovenance1", "provenance.json")):
            run_cosign(
                published.cosign,
                "attest",
                "--key",
                str(published.keys / "cosign.key"),
                *OFFLINE,
                "--type",
                kind,
                "--predicate",
                str(folder / file),
                published.reference,
            )
        yield


def _originals(published: Published) -> tuple[dict[str, object], dict[str, object]]:
    public = published.keys / "cosign.pub"
    return (
        attested(published.cosign, public, published.reference, "cyclonedx"),
        attested(published.cosign, public, published.reference, "slsaprovenance1"),
    )


@contextmanager
def sbom_listing_another_package(published: Published, stranger: Stranger) -> Iterator[None]:
    sbom, provenance = _originals(published)
    extra = {
        "type": "library",
        "name": "evil-package",
        "version": "6.6.6",
        "purl": "pkg:pypi/evil-package@6.6.6",
    }
    with attestations_replaced(published, {**sbom, "components": [*sbom["components"], extra]}, provenance):  # type: ignore[misc]
        yield


@contextmanager
def provenance_with_other_inputs(published: Published, stranger: Stranger) -> Iterator[None]:
    sbom, provenance = _originals(published)
    inputs = provenance["buildDefinition"]["internalParameters"]["inputsHash"]  # type: ignore[index]
    with attestations_replaced(published, sbom, json.loads(json.dumps(provenance).replace(inputs, "0" * 64))):
        yield


@contextmanager
def signature_of_another_digest(published: Published, stranger: Stranger) -> Iterator[None]:
    theirs = published.namespace.manifest(REPOSITORY, f"sha256-{stranger.signed.rpartition(':')[2]}.sig")
    assert theirs is not None
    with replaced(published.namespace, REPOSITORY, published.tag_of("sig")):
        published.namespace.put(REPOSITORY, published.tag_of("sig"), theirs)
        yield


CASES: dict[str, tuple[Tamper, str]] = {
    "another key's signature": (
        another_keys_signature,
        "signature: the signature does not verify with the key",
    ),
    "no signature": (no_signature, "signature: no signature: nothing is attached to this digest"),
    "an SBOM listing another package": (
        sbom_listing_another_package,
        "sbom: the SBOM's Python packages are not the lock's: evil-package 6.6.6 is not in the lock",
    ),
    "a provenance with another inputs hash": (
        provenance_with_other_inputs,
        "provenance: built from an older recipe: recipes/models/factory/tiny-random-llama.yaml "
        "(its provenance names inputs 000000000000",
    ),
    "a signature copied from another image's digest": (
        signature_of_another_digest,
        "signature: the signature is of another image (it signs sha256:",
    ),
}
