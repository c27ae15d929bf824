"""The cluster refuses an image that does not verify (issue 46), judged by the real API server calling the
real webhook: the verify component (k8s/_verify, printed by `factory generate` from the publish record and
the keys in recipes/lock/trusted-keys/) on the control plane of tests/cluster.py, with sigstore
policy-controller v0.13.1 beside it (testbench/policy-webhook, built from testbench/go/policy-controller)
and the API server's own ValidatingAdmissionPolicy floor.

The image is the tiny CPU deployment's, published to a registry of the test's own: a one-file stand-in
under the image's own name (kwok runs no container, so the 4 GB image is not needed to be judged), signed
and attested with cosign as `factory publish` is to sign (tests/signing.py)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator

import pytest

from factory.lockfile.published import PublishedImage, record_file, record_published
from factory.project import load_project
from factory.render import kubernetes
from tests.cluster import ControlPlane
from tests.conftest import ROOT, TINY, blueprint_of, go_tool
from tests.registry import LocalRegistry, running_registry
from tests.signing import Cosign, Registry, provenance
from tests.trust import Trust, wait_for

DENIED = 'admission webhook "url.policy.sigstore.dev" denied the request'
ONE_NODE = "single_node_tp"
GROUP = "multi_node_tp_dp"


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRegistry]:
    with running_registry(tmp_path_factory.mktemp("admission-registry")) as started:
        yield started


def _signed_images(trust: Trust, cosign: Cosign, inputs_hash: str, tag: str) -> None:
    """One image per case, all in the published repository: what each was signed and attested with."""
    api, repository = Registry(trust.registry), trust.repository.split("/", 1)[1]
    signers = {
        "signed": "release-1",
        "rotated": "release-2",
        "other-key": "stranger",
        "tampered": "release-1",
    }
    for case in ("signed", "rotated", "unsigned", "other-key", "tampered", "no-inputs-hash"):
        trust.digests[case] = api.push_image(repository, tag if case == "signed" else f"case-{case}")
        key = trust.keys[signers.get(case, "release-1")]
        if case != "unsigned":
            cosign.sign(key, trust.image(case))
            hashed = provenance(None if case == "no-inputs-hash" else inputs_hash)
            cosign.attest(key, trust.image(case), hashed)
    api.tamper_provenance(repository, trust.digests["tampered"], "f" * 64)


@pytest.fixture(scope="module")
def trust(
    control_plane: ControlPlane, registry: LocalRegistry, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Trust]:
    """The project's copy with the tiny CPU image published and signed; the webhook beside the control
    plane; removed after (the cluster-wide admission objects with it: other modules share the plane)."""
    root = tmp_path_factory.mktemp("admission-project")
    for name in ("recipes", "catalog", "images", "compose", "k8s"):
        shutil.copytree(ROOT / name, root / name)
    image = blueprint_of(load_project(root), TINY, "cpu").image
    cosign = Cosign(go_tool("cosign", "cosign"), tmp_path_factory.mktemp("cosign"), registry)
    keys = {name: cosign.key_pair(name) for name in ("release-1", "release-2", "stranger")}
    trust = Trust(control_plane, root, registry, f"{registry.address}/{image.repository}", keys)
    _signed_images(trust, cosign, image.inputs_hash, image.tag)
    published = PublishedImage(
        repository=trust.repository, digest=trust.digests["signed"], immutable_tag=image.immutable_tag
    )
    record_published(record_file(load_project(root).lock_path), image.reference, published)
    try:
        trust.webhook("up")
        yield trust
    finally:
        kinds = "validatingadmissionpolicies,validatingadmissionpolicybindings"
        floor = trust.run("delete", kinds, "-l", "app.kubernetes.io/managed-by=vllm-factory")
        trust.webhook("down")  # the ClusterImagePolicies go with its CRDs
        assert floor.returncode == 0, f"the floor is left on the shared control plane: {floor.stderr}"


def _folder(trust: Trust, strategy: str) -> str:
    blueprint = blueprint_of(load_project(trust.root), TINY, "cpu")
    return kubernetes.directory(blueprint.deployment(strategy)).relative_to(kubernetes.ROOT).as_posix()


def _images_of(pods: list[dict[str, object]]) -> set[str]:
    return {c["image"] for p in pods for c in p["spec"]["containers"]}  # type: ignore[index]


def test_the_committed_component_with_nothing_published_and_no_key_refuses_every_image(trust: Trust) -> None:
    """The project's own k8s/_verify (no record, no key) fails closed: the floor allows no repository."""
    applied = trust.run("apply", "--server-side", "-f", str(ROOT / "k8s/_verify/admission.yaml"))
    assert applied.returncode == 0, applied.stderr
    trust.trusted = None  # the floor now allows nothing: the next trust_only applies the copy's again
    namespace = trust.namespace("nothing-published")

    def refused() -> str | None:
        answer = trust.pod(namespace, "signed", trust.image("signed"), "--dry-run=server").stderr
        return answer if "(none yet)" in answer else None  # once the API server enforces the new version

    said = str(wait_for("the floor allowing no repository", refused))
    assert "ValidatingAdmissionPolicy 'vllm-factory-pinned-images'" in said
    assert "not from a repository the factory published to (none yet)" in said


def test_the_published_deployment_is_admitted_and_runs_by_its_signed_digest(trust: Trust) -> None:
    trust.trust_only("release-1")
    namespace = trust.namespace("admitted")
    applied = trust.apply(trust.overlay("admitted", _folder(trust, ONE_NODE)), namespace)
    assert applied.returncode == 0, applied.stderr
    pods = trust.wait_pods(namespace, 1)
    assert _images_of(pods) == {trust.image("signed")}


REFUSALS = {
    "unsigned": ("no signatures found",),
    "other-key": ("vllm-factory-signature", "invalid signature when validating ASN.1 encoded signature"),
    "tampered": ("vllm-factory-provenance", "no matching attestations"),
    "no-inputs-hash": ("vllm-factory-provenance", "the provenance names no inputs hash"),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_the_deployment_and_a_pod_are_refused_when_the_image_does_not_verify(trust: Trust, case: str) -> None:
    """The same deployment with the image of another digest of the published repository (unsigned, signed
    with another key, its provenance changed after signing, a provenance without the inputs hash): the API
    server's answer to `kubectl apply` names the policy and the reason, and nothing is created; a pod
    created directly gets the same answer."""
    trust.trust_only("release-1")
    namespace = trust.namespace(f"refused-{case}")
    swapped = [{"name": trust.repository, "digest": trust.digests[case]}]
    applied = trust.apply(
        trust.overlay(f"refused-{case}", _folder(trust, ONE_NODE), images=swapped), namespace
    )
    assert applied.returncode != 0 and DENIED in applied.stderr, applied.stderr
    assert all(words in applied.stderr for words in REFUSALS[case]), applied.stderr
    assert trust.plane.items("deployments", namespace) == []
    direct = trust.pod(namespace, "direct", trust.image(case))
    assert direct.returncode != 0 and DENIED in direct.stderr
    assert all(words in direct.stderr for words in REFUSALS[case]), direct.stderr
    assert trust.plane.items("pods", namespace) == []


def _worker_image(image: str) -> list[dict[str, object]]:
    """A kustomize patch giving an LWS's workers another image than its leader."""
    path = "/spec/leaderWorkerTemplate/workerTemplate/spec/containers/0/image"
    operation = {"op": "replace", "path": path, "value": image}
    return [{"target": {"kind": "LeaderWorkerSet"}, "patch": json.dumps([operation])}]


def test_an_lws_leader_and_its_workers_are_judged_alike(trust: Trust) -> None:
    """The two-node LWS: signed, its leader and worker pods run the signed digest; unsigned, the LWS
    controller's leader StatefulSet is refused (the LWS's events say why) and no pod is made; a signed
    leader with unsigned workers: the leader runs and the workers' StatefulSet is refused."""
    trust.trust_only("release-1")
    folder = _folder(trust, GROUP)
    signed = trust.namespace("group-signed")
    assert trust.apply(trust.overlay("group-signed", folder), signed).returncode == 0
    assert _images_of(trust.wait_pods(signed, 2)) == {trust.image("signed")}

    unsigned = trust.namespace("group-unsigned")
    swapped = [{"name": trust.repository, "digest": trust.digests["unsigned"]}]
    assert trust.apply(trust.overlay("group-unsigned", folder, images=swapped), unsigned).returncode == 0
    said = trust.warning(unsigned, "LeaderWorkerSet", "tiny", "Failed to create leader statefulset", DENIED)
    assert "no signatures found" in said
    assert trust.plane.items("pods", unsigned) == []
    described = trust.shell(f"kubectl describe leaderworkerset -n {unsigned}").stdout
    assert "Failed to create leader statefulset" in described and "no signatures found" in described

    mixed = trust.namespace("group-mixed")
    patches = _worker_image(trust.image("unsigned"))
    assert trust.apply(trust.overlay("group-mixed", folder, patches=patches), mixed).returncode == 0
    said = trust.warning(mixed, "LeaderWorkerSet", "tiny", "Failed to create worker statefulset", DENIED)
    assert "no signatures found" in said
    assert _images_of(trust.wait_pods(mixed, 1)) == {trust.image("signed")}
    assert len(trust.plane.items("pods", mixed)) == 1, "the leader alone"


def test_a_tag_is_resolved_to_its_signed_digest_or_refused(trust: Trust) -> None:
    """By tag: the webhook pins the signed image to the digest it verified (tag@digest, which the floor
    admits); an unsigned image's tag is refused."""
    trust.trust_only("release-1")
    namespace = trust.namespace("by-tag")
    tag = blueprint_of(load_project(trust.root), TINY, "cpu").image.tag
    assert trust.pod(namespace, "signed", f"{trust.repository}:{tag}").returncode == 0
    (pod,) = trust.plane.items("pods", namespace)
    assert pod["spec"]["containers"][0]["image"] == f"{trust.repository}:{tag}@{trust.digests['signed']}"
    refused = trust.pod(namespace, "unsigned", f"{trust.repository}:case-unsigned")
    assert refused.returncode != 0 and DENIED in refused.stderr and "no signatures found" in refused.stderr


def test_a_factory_workload_in_a_namespace_without_the_label_is_refused(trust: Trust) -> None:
    """policy-controller judges only labelled namespaces: the floor refuses the factory's workloads
    anywhere else, saying which label to set; once it is set, the deployment is admitted."""
    trust.trust_only("release-1")
    namespace = trust.namespace("unlabelled", labelled=False)
    overlay = trust.overlay("unlabelled", _folder(trust, ONE_NODE))
    refused = trust.apply(overlay, namespace)
    assert refused.returncode != 0 and "vllm-factory-verified-namespace" in refused.stderr
    assert f"kubectl label namespace {namespace} policy.sigstore.dev/include=true" in refused.stderr
    trust.plane.kubectl("label", "namespace", namespace, "policy.sigstore.dev/include=true")
    assert trust.apply(overlay, namespace).returncode == 0
    trust.wait_pods(namespace, 1)


def test_with_the_webhook_stopped_new_pods_are_refused_not_admitted(trust: Trust) -> None:
    """Fail closed: with the webhook's process gone (its configurations still registered), the API server
    refuses a pod it cannot have judged, and the ReplicaSet cannot make its pod again."""
    trust.trust_only("release-1")
    namespace = trust.namespace("stopped")
    assert trust.apply(trust.overlay("stopped", _folder(trust, ONE_NODE)), namespace).returncode == 0
    trust.wait_pods(namespace, 1)
    trust.webhook("stop")  # the next test to need it starts it again (Trust.trust_only)
    direct = trust.pod(namespace, "direct", trust.image("signed"))
    assert direct.returncode != 0 and 'failed calling webhook "url.policy.sigstore.dev"' in direct.stderr
    trust.run("delete", "pod", "-n", namespace, "--all", "--wait=false")
    assert "connection refused" in trust.warning(namespace, "ReplicaSet", "tiny", "failed calling webhook")
    listed = trust.shell(f"kubectl get events -n {namespace} --field-selector type=Warning").stdout
    assert "FailedCreate" in listed and "failed calling webhook" in listed
    wait_for("the deleted pod gone, and no other running", lambda: trust.pods(namespace) == [])


def test_while_a_key_rotates_both_keys_are_trusted_and_after_it_the_old_one_is_refused(trust: Trust) -> None:
    """Rotation as the docs give it: add the new key's file, then delete the old one's, each time
    `factory generate` and apply. During it an image signed with the old key is admitted; after it the
    same image is refused, also where a controller makes the pod again (the ReplicaSet's and the worker
    StatefulSet's events say why)."""
    trust.trust_only("release-1")
    namespace, group = trust.namespace("rotation"), trust.namespace("rotation-group")
    assert trust.apply(trust.overlay("rotation", _folder(trust, ONE_NODE)), namespace).returncode == 0
    assert trust.apply(trust.overlay("rotation-group", _folder(trust, GROUP)), group).returncode == 0
    trust.wait_pods(namespace, 1)
    trust.wait_pods(group, 2)

    trust.trust_only("release-1", "release-2")
    assert trust.pod(namespace, "old-key-while-rotating", trust.image("signed")).returncode == 0
    assert trust.pod(namespace, "new-key-while-rotating", trust.image("rotated")).returncode == 0

    trust.trust_only("release-2")
    after = trust.pod(namespace, "old-key-after", trust.image("signed"))
    assert after.returncode != 0 and DENIED in after.stderr and "no matching signatures" in after.stderr
    assert trust.pod(namespace, "new-key-after", trust.image("rotated")).returncode == 0
    server = f"{kubernetes.COMPONENT_LABEL}={kubernetes.SERVER_COMPONENT}"
    trust.run("delete", "pod", "-n", namespace, "-l", server, "--wait=false")
    assert "no matching signatures" in trust.warning(namespace, "ReplicaSet", "tiny", DENIED)
    described = trust.shell(f"kubectl describe replicaset -n {namespace}").stdout  # what an operator reads
    assert "FailedCreate" in described and DENIED in described and "no matching signatures" in described
    trust.run("delete", "pod", "-n", group, "-l", f"{kubernetes.LWS_INDEX_LABEL}=1", "--wait=false")
    assert "no matching signatures" in trust.warning(group, "StatefulSet", "tiny", DENIED)


def test_the_floor_refuses_what_is_not_pinned_or_is_from_elsewhere_with_and_without_the_webhook(
    trust: Trust,
) -> None:
    """The API server's own ValidatingAdmissionPolicy, in a labelled namespace: with the webhook, an
    image from another registry is refused by the floor first; with no webhook at all, a tag is refused
    (nothing resolves it) and so is another registry. What the floor cannot do alone: an unsigned image,
    pinned, from the published repository passes it; only the webhook checks signatures."""
    trust.any_policy()
    namespace = trust.namespace("floor")
    floor = "ValidatingAdmissionPolicy 'vllm-factory-pinned-images'"
    elsewhere = "127.0.0.1:1/vllm-factory/tiny-random-llama@" + trust.digests["signed"]
    refused = trust.pod(namespace, "elsewhere", elsewhere)
    assert refused.returncode != 0 and floor in refused.stderr and "not from a repository" in refused.stderr

    trust.webhook("down")
    by_tag = trust.pod(namespace, "by-tag", f"{trust.repository}:case-unsigned")
    assert by_tag.returncode != 0 and floor in by_tag.stderr and "not pinned by digest" in by_tag.stderr
    refused = trust.pod(namespace, "elsewhere", elsewhere)
    assert refused.returncode != 0 and floor in refused.stderr and "not from a repository" in refused.stderr
    assert trust.pod(namespace, "unsigned", trust.image("unsigned")).returncode == 0
