"""The verify component (k8s/_verify) as `factory generate` prints it, offline: from the publish record and
the public keys in recipes/lock/trusted-keys/, what it asks of an image, and what it refuses to read. Its
effect on a real cluster is tests/test_admission.py's."""

from __future__ import annotations

import base64
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from factory.base.errors import InputError
from factory.lockfile.published import PublishedImage, record_file, record_published
from factory.lockfile.trusted_keys import keys_folder, read_trusted_keys
from factory.project import load_project
from factory.render import kubernetes
from tests.conftest import ROOT, TINY, blueprint_of, kubectl, run_factory

COMPONENT = Path("k8s/_verify")


def _documents(root: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((root / COMPONENT / "admission.yaml").read_text()) if d]


def _public_key(folder: Path, name: str) -> str:
    """A P-256 public key in PEM, as `cosign generate-key-pair` writes cosign.pub (made with openssl)."""
    private = folder / f"{name}.private.pem"
    subprocess.run(
        ["openssl", "ecparam", "-genkey", "-name", "prime256v1", "-noout", "-out", str(private)], check=True
    )
    pem = subprocess.run(["openssl", "ec", "-in", str(private), "-pubout"], capture_output=True, check=True)
    private.unlink()
    return pem.stdout.decode()


def test_with_nothing_published_and_no_key_the_component_is_the_floor_alone_refusing_every_image() -> None:
    """The project's own component: no record, no key. No ClusterImagePolicy can be written, and the floor
    allows no repository: in a labelled namespace every image is refused. It builds with kustomize."""
    kinds = [(d["kind"], d["metadata"]["name"]) for d in _documents(ROOT)]
    assert kinds == [
        ("ValidatingAdmissionPolicy", "vllm-factory-pinned-images"),
        ("ValidatingAdmissionPolicyBinding", "vllm-factory-pinned-images"),
        ("ValidatingAdmissionPolicy", "vllm-factory-verified-namespace"),
        ("ValidatingAdmissionPolicyBinding", "vllm-factory-verified-namespace"),
    ]
    variables = {v["name"]: v["expression"] for v in _documents(ROOT)[0]["spec"]["variables"]}
    assert variables["elsewhere"] == "variables.added"
    assert (
        "No ClusterImagePolicy (no trusted key, nothing published)"
        in (ROOT / COMPONENT / "admission.yaml").read_text()
    )


def test_a_published_image_and_two_keys_give_each_policy_the_repository_and_one_authority_per_key(
    scratch: Path, tmp_path: Path
) -> None:
    """Two keys (a rotation under way): each ClusterImagePolicy matches the published repository by tag and by
    digest and accepts either key; the provenance policy checks the inputs hash; the floor allows that
    repository. A key file removed leaves the component stale until generated again."""
    image = blueprint_of(load_project(scratch), TINY, "cpu").image
    repository = f"registry.example.com:5000/team/{image.repository}"
    published = PublishedImage(
        repository=repository, digest="sha256:" + "ab" * 32, immutable_tag=image.immutable_tag
    )
    record_published(record_file(load_project(scratch).lock_path), image.reference, published)
    folder = keys_folder(load_project(scratch).lock_path)
    folder.mkdir()
    pems = {name: _public_key(tmp_path, name) for name in ("release-1", "release-2")}
    for name, pem in pems.items():
        (folder / f"{name}.pub").write_text(pem)
    assert run_factory(scratch, "generate").returncode == 0
    policies = {
        d["metadata"]["name"]: d["spec"] for d in _documents(scratch) if d["kind"] == "ClusterImagePolicy"
    }
    assert sorted(policies) == ["vllm-factory-provenance", "vllm-factory-signature"]
    for spec in policies.values():
        assert spec["images"] == [{"glob": f"{repository}:*"}, {"glob": f"{repository}@*"}]
        assert [(a["name"], a["key"]["data"], a["signatureFormat"]) for a in spec["authorities"]] == [
            (name, pem, "legacy") for name, pem in pems.items()
        ]
    attestation = policies["vllm-factory-provenance"]["authorities"][0]["attestations"][0]
    assert attestation["predicateType"] == "https://slsa.dev/provenance/v1"
    assert (
        '["predicate", "buildDefinition", "internalParameters", "inputsHash"]'
        in attestation["policy"]["data"]
    )
    floor = {v["name"]: v["expression"] for v in _documents(scratch)[2]["spec"]["variables"]}
    assert "^(registry[.]example[.]com:5000/team/vllm-factory/tiny-random-llama)(:" in floor["elsewhere"]

    (folder / "release-1.pub").unlink()
    stale = run_factory(scratch, "generate", "--check")
    assert stale.returncode == 1 and "k8s/_verify/admission.yaml" in stale.stderr


def test_a_user_kustomization_with_the_component_adds_the_admission_objects_and_changes_no_other(
    tmp_path: Path,
) -> None:
    folder = ROOT / kubernetes.directory(
        blueprint_of(load_project(ROOT), TINY, "cpu").deployment("single_node_tp")
    )
    overlay = tmp_path
    body = {
        "resources": [os.path.relpath(folder, overlay)],
        "components": [os.path.relpath(ROOT / COMPONENT, overlay)],
    }
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(body))
    built = subprocess.run([kubectl(), "kustomize", str(overlay)], capture_output=True, text=True, check=True)
    plain = subprocess.run([kubectl(), "kustomize", str(folder)], capture_output=True, text=True, check=True)
    with_component = [d for d in yaml.safe_load_all(built.stdout) if d]
    without = [d for d in yaml.safe_load_all(plain.stdout) if d]
    added = [d for d in with_component if d not in without]
    assert sorted(d["kind"] for d in added) == sorted(d["kind"] for d in _documents(ROOT))
    assert len(with_component) == len(without) + len(added)


# The shape of cosign's private key file (cosign.key); the body is a stand-in that must never be shown.
SECRET = "eyJrZGYiOnsibmFtZSI6InNjcnlwdCJ9"
KIND = "ENCRYPTED SIGSTORE PRIVATE KEY"
PRIVATE = f"-----BEGIN {KIND}-----\n{SECRET}\n-----END {KIND}-----\n"
BAD_FILES = {
    "release-1.pub": (PRIVATE, "a private key"),
    "cosign.key": (PRIVATE, "only public keys named <name>.pub belong here"),
    "Release_1.pub": ("", "a key's name must be a DNS label"),
    "two.pub": ("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n" * 2, "not one PEM public key"),
    "garbled.pub": (
        "-----BEGIN PUBLIC KEY-----\n!!!!\n-----END PUBLIC KEY-----\n",
        "does not hold a DER public key",
    ),
}


@pytest.mark.parametrize("name", list(BAD_FILES))
def test_a_file_among_the_trusted_keys_that_is_not_a_public_key_is_an_error_naming_it(
    tmp_path: Path, name: str
) -> None:
    content, why = BAD_FILES[name]
    (tmp_path / name).write_text(content)
    with pytest.raises(InputError) as refused:
        read_trusted_keys(tmp_path)
    assert why in str(refused.value) and f"{tmp_path / name}" in str(refused.value)
    assert SECRET not in str(refused.value)


def test_generate_refuses_a_private_key_among_the_trusted_keys_shows_none_of_it_and_changes_nothing(
    scratch: Path,
) -> None:
    before = {p.name: p.read_bytes() for p in (scratch / COMPONENT).iterdir()}
    folder = keys_folder(load_project(scratch).lock_path)
    folder.mkdir()
    (folder / "release-1.pub").write_text(PRIVATE)
    result = run_factory(scratch, "generate")
    assert result.returncode != 0 and "a private key" in result.stderr, result.stderr
    assert "trusted-keys/release-1.pub" in result.stderr
    for shown in (result.stdout, result.stderr):
        assert SECRET not in shown and base64.b64decode(SECRET).decode() not in shown
    assert {p.name: p.read_bytes() for p in (scratch / COMPONENT).iterdir()} == before
