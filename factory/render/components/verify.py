"""k8s/_verify/: a kustomize Component that has the cluster run the published images only when they verify.

A user opts in from a kustomization of their own (the generated ones are not edited):

    resources: [<a deployment's folder under k8s/>]
    components: [<k8s/>_verify]

It adds cluster-wide admission objects (admission.yaml), printed from the publish record (the repositories
`factory publish` pushed to) and the public keys in the trusted-keys folder beside it:
- two ClusterImagePolicies for sigstore's policy-controller, each matching those repositories, each with one
  authority per trusted key: `vllm-factory-signature` wants cosign's signature, `vllm-factory-provenance` a
  signed SLSA provenance v1 attestation whose predicate names the image's inputs hash. Not one policy per
  key: policy-controller admits an image only when EVERY policy that matches it passes (its validator.go,
  validatePolicies) and one authority of a policy is enough, so a policy per key would demand every key's
  signature while a key is rotated. Signatures in cosign's legacy layout (`.sig`/`.att` tags):
  policy-controller v0.13.1 verifies the bundle layout only with keyless authorities;
- a floor the API server enforces by itself, with no webhook (ValidatingAdmissionPolicy, CEL): in a namespace
  labelled for verification every image of a pod is pinned by digest and comes from one of those
  repositories; and a workload the factory generated is refused in a namespace without that label, where
  policy-controller would check nothing.
With no trusted key or nothing published it holds the floor alone, which then refuses every image in a
labelled namespace: verification fails closed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import PurePosixPath
from typing import Any

from factory.base import yaml_text
from factory.base.outputs import OutputFile
from factory.base.yaml_text import Block
from factory.lockfile.published import read_record, record_file
from factory.lockfile.trusted_keys import TrustedKey, keys_folder, read_trusted_keys
from factory.project import Project
from factory.render.bake import BakeTarget
from factory.render.kubernetes import LWS_API, MANAGED_BY, ROOT

VERIFY_COMPONENT = PurePosixPath(ROOT) / "_verify"
INCLUDE_LABEL = "policy.sigstore.dev/include"  # policy-controller judges only namespaces labelled "true"
PROVENANCE = "https://slsa.dev/provenance/v1"
# Where `factory publish` writes the image's inputs hash in its provenance (64 hex digits, as the image's
# label ai.vllm.factory.inputs-hash).
INPUTS_HASH = ("predicate", "buildDefinition", "internalParameters", "inputsHash")
# policy-controller evaluates Rego v0 over the statement (`input`); an answer that is an object carries the
# refusal's words (cosign v2.5.0's pkg/cosign/rego, evaluateRegoEvalMapResult). Not CUE: it is validated
# without asking for concrete values (pkg/policy/eval.go), so a constraint on a missing field passes (tried:
# a provenance without the inputs hash was admitted).
REGO = """package sigstore

hashes := {h | h := object.get(input, $PATH, null); is_string(h); regex.match("^[0-9a-f]{64}$", h)}

isCompliant[response] {
  response := {"result": count(hashes) == 1, "error": "$WHY", "warning": ""}
}
"""
TAG = "(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"  # the webhook pins a tag as name:tag@sha256:...
IMAGES = """{o}.spec.containers.map(c, c.image)
+ (has({o}.spec.initContainers) ? {o}.spec.initContainers.map(c, c.image) : [])
+ (has({o}.spec.ephemeralContainers) ? {o}.spec.ephemeralContainers.map(c, c.image) : [])
"""
ADMISSION = "admissionregistration.k8s.io/v1"
POD_RULE = {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods", "pods/ephemeralcontainers"]}
USAGE = [
    "# The cluster admits a published image only when it verifies: signed, with a signed SLSA provenance",
    "# naming its inputs hash, by a trusted key (sigstore policy-controller; cosign's legacy layout),",
    "# pinned by digest, from the repositories published to (ValidatingAdmissionPolicy: the API server).",
    "# Apply admission.yaml first (policy-controller installed), then from a kustomization of yours:",
    "#   resources: [<a deployment's folder under k8s/>]",
    f"#   components: [<k8s/>{VERIFY_COMPONENT.name}]",
    f"# in a namespace labelled {INCLUDE_LABEL}=true.",
]


def _authority(key: TrustedKey) -> dict[str, Any]:
    return {
        "name": key.name,
        "key": {"hashAlgorithm": "sha256", "data": Block(key.pem)},
        "signatureFormat": "legacy",
    }


def _image_policies(repositories: Sequence[str], keys: Sequence[TrustedKey]) -> list[dict[str, Any]]:
    globs = [{"glob": f"{repository}{mark}*"} for repository in repositories for mark in (":", "@")]
    why = f"the provenance names no inputs hash ({'.'.join(INPUTS_HASH)}: 64 hex digits)"
    rego = REGO.replace("$PATH", json.dumps(list(INPUTS_HASH))).replace("$WHY", why)
    provenance = {
        "name": "provenance",
        "predicateType": PROVENANCE,
        "policy": {"type": "rego", "data": Block(rego)},
    }
    wants = {
        "signature": [_authority(key) for key in keys],
        "provenance": [_authority(key) | {"attestations": [provenance]} for key in keys],
    }
    return [
        {
            "apiVersion": "policy.sigstore.dev/v1beta1",
            "kind": "ClusterImagePolicy",
            "metadata": {"name": f"vllm-factory-{what}", "labels": dict(MANAGED_BY)},
            "spec": {"images": globs, "authorities": authorities},
        }
        for what, authorities in wants.items()
    ]


def _message(what: str, variable: str) -> dict[str, str]:
    return {
        "expression": f"size(variables.{variable}) == 0",
        "messageExpression": f"'{what}: ' + variables.{variable}.join(', ')",
        "reason": "Forbidden",
    }


def _pinned_images(repositories: Sequence[str]) -> dict[str, Any]:
    # A repository name holds [a-z0-9._:/-] only (the record's pattern): a dot is the one character to escape.
    published = "|".join(repository.replace(".", "[.]") for repository in repositories)
    elsewhere = (
        f"variables.added.filter(i, !i.matches('^({published}){TAG}@'))"
        if repositories
        else "variables.added"
    )
    names = ", ".join(repositories) or "none yet"
    before = IMAGES.format(o="oldObject").rstrip("\n").replace("\n", "\n  ")
    return {
        "failurePolicy": "Fail",
        "matchConstraints": {"resourceRules": [POD_RULE | {"operations": ["CREATE", "UPDATE"]}]},
        "variables": [
            {"name": "images", "expression": Block(IMAGES.format(o="object"))},
            # An update is judged by the images it adds: a pod admitted before may still be labelled.
            {
                "name": "before",
                "expression": Block(f"request.operation != 'UPDATE' ? [] : (\n  {before}\n)\n"),
            },
            {"name": "added", "expression": "variables.images.filter(i, !(i in variables.before))"},
            {
                "name": "unpinned",
                "expression": "variables.added.filter(i, !i.matches('@sha256:[0-9a-f]{64}$'))",
            },
            {"name": "elsewhere", "expression": elsewhere},
        ],
        "validations": [
            _message("not pinned by digest (name@sha256:...)", "unpinned"),
            _message(f"not from a repository the factory published to ({names})", "elsewhere"),
        ],
    }


def _verified_namespace() -> dict[str, Any]:
    rules = [
        POD_RULE,
        {"apiGroups": ["apps"], "apiVersions": ["v1"], "resources": ["deployments", "statefulsets"]},
        {"apiGroups": [LWS_API.partition("/")[0]], "apiVersions": ["*"], "resources": ["leaderworkersets"]},
    ]
    labels, name = "namespaceObject.metadata.labels", "namespaceObject.metadata.name"
    unlabelled = f"is not labelled {INCLUDE_LABEL}=true, so no image of it would be verified"
    return {
        "failurePolicy": "Fail",
        "matchConstraints": {
            "resourceRules": [rule | {"operations": ["CREATE"]} for rule in rules],
            "objectSelector": {"matchLabels": dict(MANAGED_BY)},
        },
        "validations": [
            {
                "expression": f"has({labels}) && {labels}[?'{INCLUDE_LABEL}'] == optional.of('true')",
                "messageExpression": f"'namespace ' + {name} + ' {unlabelled}: kubectl label namespace '"
                f" + {name} + ' {INCLUDE_LABEL}=true'",
                "reason": "Forbidden",
            }
        ],
    }


def _floor(repositories: Sequence[str]) -> list[dict[str, Any]]:
    """Each ValidatingAdmissionPolicy with its binding."""
    policies = {
        "vllm-factory-pinned-images": (_pinned_images(repositories), {INCLUDE_LABEL: "true"}),
        "vllm-factory-verified-namespace": (_verified_namespace(), None),
    }
    documents: list[dict[str, Any]] = []
    for name, (spec, namespaces) in policies.items():
        metadata = {"name": name, "labels": dict(MANAGED_BY)}
        binding: dict[str, Any] = {"policyName": name, "validationActions": ["Deny"]}
        if namespaces:
            binding["matchResources"] = {"namespaceSelector": {"matchLabels": namespaces}}
        for kind, body in (
            ("ValidatingAdmissionPolicy", spec),
            ("ValidatingAdmissionPolicyBinding", binding),
        ):
            documents.append({"apiVersion": ADMISSION, "kind": kind, "metadata": metadata, "spec": body})
    return documents


def component(repositories: Sequence[str], keys: Sequence[TrustedKey], sources: str) -> list[OutputFile]:
    """The component's two files: its kustomization and the admission objects it adds."""
    missing = [
        why for why, gone in (("no trusted key", not keys), ("nothing published", not repositories)) if gone
    ]
    header = [
        f"# DO NOT EDIT: generated by `factory generate` from {sources}.",
        f"# Trusted keys: {', '.join(key.name for key in keys) or 'none'}. See kustomization.yaml beside it.",
        *([f"# No ClusterImagePolicy ({', '.join(missing)}): every image in a labelled namespace is refused."]
          if missing else []),
    ]  # fmt: skip
    documents = [*(_image_policies(repositories, keys) if not missing else []), *_floor(repositories)]
    admission = "".join(f"{line}\n" for line in header) + "---\n".join(map(yaml_text.dump, documents))
    body = {
        "apiVersion": "kustomize.config.k8s.io/v1alpha1",
        "kind": "Component",
        "resources": ["admission.yaml"],
    }
    usage = "".join(f"{line}\n" for line in [header[0], *USAGE]) + yaml_text.dump(body)
    return [
        OutputFile(VERIFY_COMPONENT / "kustomization.yaml", usage.encode()),
        OutputFile(VERIFY_COMPONENT / "admission.yaml", admission.encode()),
    ]


def files(project: Project, targets: Sequence[BakeTarget]) -> list[OutputFile]:
    """The component as this run prints it, from the record and the keys, read on every run."""
    record_path, folder = record_file(project.lock_path), keys_folder(project.lock_path)
    repositories = sorted({image.repository for image in read_record(record_path).images.values()})
    sources = f"{project.named(record_path)} and {project.named(folder)}/*.pub"
    return component(repositories, read_trusted_keys(folder), sources)
