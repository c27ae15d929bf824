"""`factory publish` as a whole: validated, then what the signature will vouch for made (SBOM, provenance),
then pushed, then signed and attested by digest and verified, then recorded. A failure before the push pushes
nothing; a failure after it records nothing (the tags pushed stay, unsigned; a second publish signs them)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from factory.base.files import write_text_atomic
from factory.base.reporter import Reporter, silent
from factory.blueprint import Blueprint
from factory.blueprint.router import RouterBlueprint
from factory.lockfile.published import Signed
from factory.project import Project
from factory.publish.publisher import Published, publish_image, record_publish, validated_image
from factory.publish.registry import credentials_for
from factory.trust.attach import Timings, attach, prepare
from factory.trust.keys import SigningKey, signing_key


@dataclass(frozen=True)
class Signing:
    """How to sign: with a key (a file, else FACTORY_SIGNING_KEY), keyless (CI's OIDC identity), or not at
    all (`--unsigned`). The key is looked for once the image is known to be validated."""

    key_file: Path | None = None
    keyless: bool = False
    unsigned: bool = False

    def key(self, project: Project) -> SigningKey | None:
        """The key to sign with (None: keyless, or unsigned); refused here when there is none."""
        if self.keyless or self.unsigned:
            return None
        return signing_key(self.key_file, [project.root, project.out])


@dataclass(frozen=True)
class PublishOptions:
    registry: str
    reports: Path
    tags: list[str]
    signing: Signing
    force_unvalidated: bool = False
    allow_no_gpu: bool = False  # a static validation suffices where no GPU could run the probes


@dataclass(frozen=True)
class Outcome:
    published: list[Published]
    signed: Signed | None
    seconds: dict[str, float]


def publish_one(
    project: Project,
    blueprint: Blueprint | RouterBlueprint,
    options: PublishOptions,
    record: Path,
    report: Reporter = silent,
) -> Outcome:
    image = blueprint.image
    records = options.reports / "validated"
    # Refused here, before the SBOM and provenance are made; publish_image checks it again and says the
    # warning or note once (this early check reports nothing: the same line twice read as two images).
    validated_image(image, records, options.force_unvalidated, silent, options.allow_no_gpu)
    key = options.signing.key(project)
    timings = Timings()
    # What is attested is made from a recipe's locked set: the router's image is published unsigned so far.
    signs = not options.signing.unsigned and isinstance(blueprint, Blueprint)
    prepared = (
        prepare(project, blueprint, options.reports) if isinstance(blueprint, Blueprint) and signs else None
    )
    published = publish_image(
        image,
        options.registry,
        records,
        options.tags,
        options.force_unvalidated,
        report=report,
        allow_no_gpu=options.allow_no_gpu,
    )
    signed = None
    if prepared is not None and isinstance(blueprint, Blueprint):
        reference = published[0].reference.rpartition(":")[0] + "@" + published[0].digest
        host = reference.split("/", 1)[0]
        signed = attach(reference, prepared, key, credentials_for(host), blueprint, timings)
        report(
            f"signed and attested {reference} (SBOM {len(prepared.sbom):,} bytes, provenance "
            f"{len(prepared.provenance):,} bytes): "
            + ", ".join(f"{k} {v:.2f} s" for k, v in timings.seconds.items())
        )
    record_publish(image, published, record, signed)
    return Outcome(published, signed, timings.seconds)


def write_outcomes(outcomes: list[Outcome], path: Path) -> None:
    """reports/publish.json: each tag pushed, and per image its signature, attestations and their timings."""
    body = [
        {
            **asdict(item),
            "signed": outcome.signed.model_dump(exclude_none=True) if outcome.signed else None,
            "seconds": outcome.seconds,
        }
        for outcome in outcomes
        for item in outcome.published
    ]
    write_text_atomic(path, json.dumps(body, indent=2) + "\n")
