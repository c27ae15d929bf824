"""What signing costs: the tiny CPU image published three times (each time to a namespace of its own on the
loopback registry, its manifests deleted after) with a fresh key, and verified three times through the publish
record: the seconds cosign takes to sign, attest the SBOM, attest the provenance and verify (as `factory
publish` times them itself), `factory verify`'s seconds, and the size of each attestation's predicate."""

from __future__ import annotations

import contextlib
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
from figures import Figure, blueprint, scratch_project

from factory.base.settings import BuildSettings
from factory.builder.builder import build_image
from factory.builder.record import RECORDS, record_of, write_record
from factory.engine.connect import engine_facts
from factory.lockfile.published import read_record, record_file
from factory.publish.registry import MANIFEST_TYPES, registry_request
from factory.publish.signed import PublishOptions, Signing, publish_one
from factory.trust.keys import generate_key_pair
from factory.trust.verify import verify_published

ROUNDS = 3
STEPS = ("sign", "attest SBOM", "attest provenance", "verify")


@contextlib.contextmanager
def bench_passphrase() -> Iterator[None]:
    """COSIGN_PASSWORD for the bench's own key (made and thrown away here), restored after."""
    before = os.environ.get("COSIGN_PASSWORD")
    os.environ["COSIGN_PASSWORD"] = uuid.uuid4().hex
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("COSIGN_PASSWORD", None)
        else:
            os.environ["COSIGN_PASSWORD"] = before


def delete_namespace(registry: str, repository: str) -> None:
    tags = registry_request("GET", registry, f"{repository}/tags/list", None).json().get("tags") or []
    for tag in tags:
        answer = registry_request(
            "HEAD", registry, f"{repository}/manifests/{tag}", None, {"Accept": MANIFEST_TYPES}
        )
        digest = answer.headers.get("Docker-Content-Digest")
        if digest:
            registry_request("DELETE", registry, f"{repository}/manifests/{digest}", None)


def trust_figures(
    root: Path, client: docker.DockerClient, settings: BuildSettings, registry: str
) -> list[Figure]:
    seconds: dict[str, list[float]] = {step: [] for step in (*STEPS, "factory verify")}
    sizes: dict[str, int] = {}
    tiny = "factory/tiny-random-llama"
    with scratch_project(root, tiny) as project, tempfile.TemporaryDirectory() as folder, bench_passphrase():
        plan = blueprint(project, "cpu")
        reports = Path(folder) / "reports"
        built = build_image(project.root, plan, settings)
        write_record(record_of(client, built, engine_facts(client).version), reports / RECORDS)
        key, _ = generate_key_pair(Path(folder) / "keys", [project.root])
        for _ in range(ROUNDS):
            namespace = f"{registry}/factory-bench-trust-{uuid.uuid4().hex[:8]}"
            options = PublishOptions(namespace, reports, [], Signing(key_file=key), force_unvalidated=True)
            try:
                outcome = publish_one(project, plan, options, record_file(project.lock_path))
                for step in STEPS:
                    seconds[step].append(outcome.seconds[step])
                started = time.monotonic()
                verdict = verify_published(project, tiny, "cpu", "default", False, None)
                seconds["factory verify"].append(time.monotonic() - started)
                assert verdict.ok, verdict.checks
                signed = read_record(record_file(project.lock_path)).images[plan.image.reference].signed
                assert signed is not None
                sizes = {"SBOM": signed.sbom.size, "provenance": signed.provenance.size}
            finally:
                delete_namespace(
                    namespace.split("/", 1)[0], f"{namespace.split('/', 1)[1]}/{plan.image.repository}"
                )
    figures = [
        Figure(
            f"signing: {step} (median of {ROUNDS})",
            round(statistics.median(values), 2),
            "s",
            "(reported)",
            None,
            f"each: {', '.join(f'{v:.2f}' for v in values)}",
        )
        for step, values in seconds.items()
    ]
    figures += [
        Figure(
            f"signing: the {name} attested, the tiny CPU image",
            size,
            "bytes",
            "(reported)",
            None,
            "predicate",
        )
        for name, size in sizes.items()
    ]
    return figures
