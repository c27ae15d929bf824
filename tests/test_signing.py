"""Every published image signed and attested, and refused wherever it does not verify (issue 45).

The built-in default (the tiny CPU image, validated by the run's main job) is published for real with
`factory publish --key` to the test bench's loopback registry, with cosign built from its Go module; then
`factory verify` and the compose gate (the generated compose.override.yaml, the verifier image, a real
`docker compose up` serving vLLM) check it, untampered and tampered in each way the issue lists."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import docker
import pytest

from factory.trust.gate import canonical
from tests.conftest import TINY, run_factory
from tests.trust_helpers import (
    PASSWORD,
    Published,
    attested,
    project_copy,
)

pytestmark = [pytest.mark.docker, pytest.mark.e2e]
REPOSITORY = "vllm-factory/tiny-random-llama"
SINGLE = Path("compose/tiny-random-llama/cpu-default/single_node_tp")


@pytest.fixture(scope="module")
def published(trust_published: Published) -> Published:
    return trust_published


def test_publish_signs_and_attests_the_digest_and_the_record_notes_all_three(published: Published) -> None:
    entry = published.entry
    signed = entry["signed"]
    assert signed["signature"] == published.tag_of("sig")
    assert signed["public_key"] == (published.keys / "cosign.pub").read_text()
    assert signed["sbom"]["predicate_type"] == "https://cyclonedx.org/bom"
    assert signed["provenance"]["predicate_type"] == "https://slsa.dev/provenance/v1"
    tags = published.namespace.tags(REPOSITORY)
    assert {published.tag_of("sig"), published.tag_of("att")} <= set(tags), tags
    component = (published.root / "k8s" / "_published" / "kustomization.yaml").read_text()
    assert f"as {published.tag_of('sig')}; attested" in component
    assert f"SBOM CycloneDX 1.6, {signed['sbom']['size']:,} bytes" in component
    assert f"SLSA provenance v1, {signed['provenance']['size']:,} bytes" in component
    report = json.loads((published.reports / "publish.json").read_text())
    assert {"sign", "attest SBOM", "attest provenance", "verify"} <= set(report[0]["seconds"])


def _key_material(published: Published) -> list[str]:
    """What must appear nowhere: the passphrase, and every line of the private keys' encrypted body."""
    lines = [PASSWORD]
    for folder in (published.keys, published.other_keys):
        text = (folder / "cosign.key").read_text()
        lines += [line for line in text.splitlines() if line and not line.startswith("-----")]
    return lines


def test_the_key_never_reaches_a_log_an_argv_an_image_or_the_output_tree(
    published: Published, docker_client: docker.DockerClient
) -> None:
    secrets = _key_material(published)
    places = {"publish's output": published.output, "cosign's command lines": published.argv_log.read_text()}
    for folder in ("recipes", "images", "compose", "k8s"):
        for path in (published.root / folder).rglob("*"):
            if path.is_file() and path.stat().st_size < 50_000_000:
                places[str(path.relative_to(published.root))] = path.read_bytes().decode(errors="replace")
    for path in published.reports.rglob("*"):
        if path.is_file():
            places[f"reports/{path.relative_to(published.reports)}"] = path.read_text(errors="replace")
    image = docker_client.images.get(f"{published.entry['repository']}@{published.entry['digest']}")
    places["the image's config"] = json.dumps(image.attrs)
    places["the image's history"] = json.dumps(image.history())
    assert len(places) > 100 and "--key" in places["cosign's command lines"]
    leaks = [(where, secret[:8]) for where, text in places.items() for secret in secrets if secret in text]
    assert not leaks, leaks
    assert not list(published.root.rglob("cosign.key")), "a private key in the output tree"


def test_the_sbom_lists_every_package_the_images_pip_and_dpkg_see_with_the_locks_hashes(
    published: Published, docker_client: docker.DockerClient
) -> None:
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    sbom_path = next(published.reports.glob("sbom-tiny-random-llama-*.cdx.json"))
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(sbom_path.read_text()) is None
    assert attested(published.cosign, published.keys / "cosign.pub", published.reference, "cyclonedx") == (
        json.loads(sbom_path.read_text())
    ), "the SBOM attested is the one in the reports"
    bom = json.loads(sbom_path.read_text())
    by_kind: dict[str, set[tuple[str, str]]] = {"pypi": set(), "deb": set()}
    for component in bom["components"]:
        kind = component["purl"].removeprefix("pkg:").split("/")[0]
        name = canonical(component["name"]) if kind == "pypi" else component["name"]
        by_kind[kind].add((name, component["version"]))
    image = f"{published.entry['repository']}@{published.entry['digest']}"
    pip = docker_client.containers.run(
        image, ["-m", "pip", "list", "--format", "json"], entrypoint="python3", remove=True
    )
    assert {(canonical(p["name"]), p["version"]) for p in json.loads(pip)} == by_kind["pypi"], "pip's view"
    dpkg = docker_client.containers.run(
        image,
        ["-W", "-f", "${db:Status-Abbrev} ${Package} ${Version}\\n"],
        entrypoint="dpkg-query",
        remove=True,
    ).decode()
    installed = {
        (name, version) for state, name, version in map(str.split, dpkg.splitlines()) if state == "ii"
    }
    assert len(installed) > 50 and installed == by_kind["deb"], "dpkg's view"
    assert len(bom["components"]) == len(by_kind["pypi"]) + len(installed), "nothing else, nothing twice"
    lock = (
        published.root / "images/tiny-random-llama/vllm0.32.0-cpu-default/requirements/heavy.txt"
    ).read_text()
    torch = next(c for c in bom["components"] if c["name"] == "torch")
    assert torch["hashes"] and all(f"sha256:{h['content']}" in lock for h in torch["hashes"])


def test_the_provenance_names_recipe_inputs_lock_base_dockerfile_builder_and_times(
    published: Published, docker_client: docker.DockerClient
) -> None:
    import hashlib

    provenance = attested(
        published.cosign, published.keys / "cosign.pub", published.reference, "slsaprovenance1"
    )
    definition, run = provenance["buildDefinition"], provenance["runDetails"]
    assert definition["externalParameters"]["recipe"] == TINY
    inputs = published.entry["immutable_tag"].rpartition("-")[2]
    assert definition["internalParameters"]["inputsHash"].startswith(inputs)
    by_name = {d["name"]: d for d in definition["resolvedDependencies"]}
    recipe = published.root / "recipes/models/factory/tiny-random-llama.yaml"
    assert by_name["recipe"]["digest"]["sha256"] == hashlib.sha256(recipe.read_bytes()).hexdigest()
    dockerfile = published.root / "images/tiny-random-llama/vllm0.32.0-cpu-default/Dockerfile"
    assert by_name["Dockerfile"]["digest"]["sha256"] == hashlib.sha256(dockerfile.read_bytes()).hexdigest()
    lock = json.loads((published.root / "recipes/lock/vllm.lock.json").read_text())
    locked = next(d for name, d in by_name.items() if name.startswith("lock: "))
    assert locked["digest"]["sha256"] == lock["sets"][locked["name"].removeprefix("lock: ")]["digest"]
    base = docker_client.images.get("factory-local/debian:bookworm").id
    assert by_name["base image"]["digest"]["sha256"] == base.removeprefix("sha256:")
    assert run["builder"]["id"] and run["metadata"]["startedOn"] <= run["metadata"]["finishedOn"]


def test_the_untampered_image_verifies_by_digest_by_tag_and_through_the_record(published: Published) -> None:
    key = str(published.keys / "cosign.pub")
    by_tag = f"{published.entry['repository']}:{published.entry['immutable_tag']}"
    for asked in ([published.reference, "--key", key], [by_tag, "--key", key], ["--hardware", "cpu"]):
        done = run_factory(published.root, "verify", *asked, "--json", env=published.env)
        assert done.returncode == 0, done.stdout + done.stderr
        verdict = json.loads(done.stdout)
        assert verdict["verified"] and verdict["reference"] == published.reference
        assert [c["check"] for c in verdict["checks"] if c["ok"]] == ["signature", "sbom", "provenance"]


def test_an_image_built_from_an_older_recipe_is_refused_naming_it(
    published: Published, tmp_path: Path
) -> None:
    """The recipe changed since the publish: this tree builds other inputs, so the published image is not
    what it would build now."""
    changed = project_copy(published.root, tmp_path / "changed")
    shutil.copy(published.root / "recipes/lock/published.json", changed / "recipes/lock/published.json")
    recipe = changed / "recipes/models/factory/tiny-random-llama.yaml"
    recipe.write_text(recipe.read_text().replace('- "512"', '- "256"', 1))  # --max-model-len: the CMD changes
    done = run_factory(changed, "verify", "--hardware", "cpu", env=published.env)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert "provenance: built from an older recipe: recipes/models/factory/tiny-random-llama.yaml" in lines[0]
