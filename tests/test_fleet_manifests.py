"""Fleet-grade serving in the committed Kubernetes manifests, offline: kube-score (v1.20.0, built from its Go
module) finds no critical an object does not ignore with a written reason; every pod runs as the images'
non-root user on a read-only root, every emptyDir sized, liveness more tolerant than readiness; the Pod
Security level each vendor's pods run under; who the NetworkPolicies let in (evaluated by Kubernetes' rules:
no network plugin runs here); and the components (monitoring, autoscale, inference-pool) select the pods
that serve, scale whole groups of a multi-node deployment, and validate against the CRDs their projects
ship. tests/test_fleet_control_plane.py applies them to a real API server."""

from __future__ import annotations

import os
import subprocess
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from factory.plan.deployment import Deployment
from factory.plan.pod_security import strictest
from factory.project import Project
from factory.render import kubernetes, network_policy
from factory.render.components import autoscale, inference_pool, monitoring
from factory.render.kubernetes import lint
from tests import fleet_checks
from tests.conftest import ROOT, go_tool, kubectl
from tests.fleet_checks import Pod, kube_score, reaches
from tests.kubernetes_checks import core_problems, pod_templates
from tests.test_kubernetes import _deployments

K8S = ROOT / "k8s"
DOCS = ROOT / "docs" / "fleet.md"


LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.load_all(path.read_text(), Loader=LOADER) if doc] if path.exists() else []


def _folders() -> list[Path]:
    return sorted(path.parent for path in K8S.rglob("manifest.yaml"))


@cache
def _committed() -> list[dict[str, Any]]:
    """Every object of every deployment's manifest and network policy, read once (tests read, never write)."""
    return [
        doc
        for folder in _folders()
        for name in ("manifest.yaml", kubernetes.NETWORK_POLICY_FILE)
        for doc in _documents(folder / name)
    ]


def _deployable(project: Project) -> list[Deployment]:
    return [d for d in _deployments(project) if kubernetes.deployable(d)]


def test_kube_score_finds_no_critical_that_is_not_ignored_with_a_written_reason() -> None:
    """kube-score over every deployment's manifest.yaml with its network-policy.yaml (what its kustomization
    applies): no critical finding; each object that opts out of a check says why beside it, and the docs
    page gives the same reason for the check."""
    binary = go_tool("kube-score", "kube-score")
    folders = _folders()
    files = [
        folder / name for folder in folders for name in ("manifest.yaml", kubernetes.NETWORK_POLICY_FILE)
    ]
    found, report = kube_score(binary, files)
    assert not found, "\n".join(f"{f.where} {f.check}: {f.comment}" for f in found[:20])
    ignored: Counter[str] = Counter()
    docs = DOCS.read_text()
    for doc in _committed():
        notes = doc["metadata"].get("annotations") or {}
        for check in filter(None, notes.get(lint.IGNORE, "").split(",")):
            ignored[check] += 1
            assert f"{check}: " in notes[lint.WHY], (doc["metadata"]["name"], check)
            assert f"`{check}`" in docs, f"the docs page gives no reason for ignoring {check}"
    print(
        f"kube-score: {len(folders)} deployments, {len(report)} objects, 0 criticals;"
        f" ignored: {dict(ignored)}"
    )
    assert len(folders) >= 100


def _pods(doc: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return list(pod_templates(doc))


def test_every_pod_runs_as_the_images_non_root_user_on_a_read_only_root_with_every_volume_sized(
    project: Project,
) -> None:
    """Every pod template: the catalog's user (uid and gid above 10000, fsGroup so a claim is writable,
    runAsNonRoot), RuntimeDefault seccomp but where the vendor needs it unconfined (AMD); every container, the
    init containers too: no privilege escalation, every capability dropped, a read-only root, a memory limit
    equal to its request, ephemeral storage requested and limited alike; every emptyDir with a size limit,
    and a volume on HOME and /tmp, which the server writes."""
    user = project.catalog.server.user
    assert user.uid > 10000 and user.gid > 10000
    templates = 0
    for doc in _committed():
        for role, template in _pods(doc):
            where = f"{doc['metadata']['name']} {role}"
            pod = template["spec"]
            context = pod["securityContext"]
            assert context["runAsNonRoot"] is True and context["runAsUser"] == user.uid, where
            assert context["runAsGroup"] == user.gid and context["fsGroup"] == user.gid, where
            amd = any("amd.com/gpu" in c["resources"].get("limits", {}) for c in pod["containers"])
            seccomp = "Unconfined" if amd else "RuntimeDefault"
            assert context["seccompProfile"] == {"type": seccomp}, where
            for container in [*pod.get("initContainers", []), *pod["containers"]]:
                security = container["securityContext"]
                assert security["allowPrivilegeEscalation"] is False, where
                assert security["readOnlyRootFilesystem"] is True, where
                assert security["capabilities"] == {"drop": ["ALL"]}, where
                limits, asked = container["resources"]["limits"], container["resources"]["requests"]
                assert limits["memory"] == asked["memory"], where
                assert limits["ephemeral-storage"] == asked["ephemeral-storage"], where
            empty = [v for v in pod["volumes"] if "emptyDir" in v]
            assert all("sizeLimit" in v["emptyDir"] for v in empty), where
            mounts = {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
            assert "/tmp" in mounts, where
            if pod["containers"][0]["name"] == "vllm":
                assert {user.home, project.catalog.server.volumes[0].target} <= mounts, where
            templates += 1
    assert templates > 200


def test_liveness_is_more_tolerant_than_readiness() -> None:
    """A busy server whose /health answers slowly leaves its Service long before it is restarted: the
    liveness probe allows more time per check and in all than the readiness probe, on every container."""
    checked = 0
    for doc in _committed():
        for _, template in _pods(doc):
            for container in template["spec"]["containers"]:
                ready, live = container.get("readinessProbe"), container.get("livenessProbe")
                if not (ready and live):
                    continue
                assert live["timeoutSeconds"] > ready["timeoutSeconds"]
                ready_s = ready["periodSeconds"] * ready["failureThreshold"]
                live_s = live["periodSeconds"] * live["failureThreshold"]
                assert live_s >= 3 * ready_s, (doc["metadata"]["name"], ready_s, live_s)
                checked += 1
    assert checked > 100


def test_each_vendors_pods_run_under_the_pod_security_level_the_kustomization_names(project: Project) -> None:
    """The CPU and NVIDIA pods under `restricted`; AMD's under `privileged` (ROCm's unconfined seccomp, which
    baseline refuses too): the plan's level, printed at the head of every kustomization."""
    levels: dict[str, set[str]] = {}
    for deployment in _deployable(project):
        level, _ = strictest([group.spec for group in deployment.run])
        levels.setdefault(deployment.image.vendor, set()).add(level)
        header = (ROOT / kubernetes.directory(deployment) / "kustomization.yaml").read_text()
        assert f"# Pod Security: the pods run under the `{level}` standard" in header
    assert levels == {"cpu": {"restricted"}, "nvidia": {"restricted"}, "amd": {"privileged"}}, levels


def _templates_of(deployment: Deployment) -> list[dict[str, Any]]:
    return [template for doc in kubernetes.objects(deployment) for _, template in _pods(doc)]


CLIENTS = {
    "picker": Pod({"inferencepool": "{name}-epp"}, "gateway-system"),
    "gateway": Pod({"gateway.networking.k8s.io/gateway-name": "inference"}, "gateway-system"),
    "metrics": Pod({"app.kubernetes.io/name": "prometheus"}, "monitoring"),
}
STRANGER = Pod({"app": "curious"}, "serving")
RANK_PORT = 29501  # vLLM's --master-port: a rank port, not the API
API_PORT = 8000


def _labels(template: dict[str, Any]) -> dict[str, str]:
    return dict(template["metadata"]["labels"])


def test_only_its_own_pods_its_router_and_the_fleets_clients_reach_a_deployments_servers(
    project: Project,
) -> None:
    """Per project deployment, by Kubernetes' NetworkPolicy rules: each server (every rank) is reached on
    every port by the deployment's own pods (its ranks, its router), on the API port only by the picker,
    the gateway's proxy and the metrics scraper, and not at all by a pod of the same namespace or another
    deployment's; the router by anyone on its port; the Mooncake master and store only by the deployment's
    instances and store."""
    deployments = _deployable(project)
    for deployment in deployments:
        policies = network_policy.policies(deployment)
        name = kubernetes.object_name(deployment)
        clients = {
            k: Pod({a: b.format(name=name) for a, b in c.labels.items()}, c.namespace)
            for k, c in CLIENTS.items()
        }
        own = [Pod(_labels(t)) for t in _templates_of(deployment)]
        other = next(d for d in deployments if kubernetes.object_name(d) != name)
        foreign = Pod(_labels(_templates_of(other)[0]))
        for template in _templates_of(deployment):
            target = Pod(_labels(template))
            component = target.labels[kubernetes.COMPONENT_LABEL]
            # its own port; a headless rank serves none: the deployment's API port is the one clients know
            ports = template["spec"]["containers"][0].get("ports") or [{"containerPort": API_PORT}]
            api = ports[0]["containerPort"]
            if component == kubernetes.SERVER_COMPONENT:
                assert all(reaches(policies, pod, target, RANK_PORT) for pod in own), name
                assert all(reaches(policies, pod, target, api) for pod in clients.values()), name
                assert not any(reaches(policies, pod, target, RANK_PORT) for pod in clients.values()), name
                assert not reaches(policies, STRANGER, target, api), name
                assert not reaches(policies, foreign, target, api), name
            elif component == kubernetes.ROUTER:
                assert reaches(policies, STRANGER, target, api) and not reaches(policies, STRANGER, target, 1)
            else:  # a Mooncake process
                instances = [
                    p for p in own if p.labels[kubernetes.COMPONENT_LABEL] == kubernetes.SERVER_COMPONENT
                ]
                assert instances and all(reaches(policies, p, target, api) for p in instances), name
                routers = [p for p in own if p.labels[kubernetes.COMPONENT_LABEL] == kubernetes.ROUTER]
                assert not any(reaches(policies, p, target, api) for p in routers), name
                assert not any(reaches(policies, p, target, api) for p in clients.values()), name
        kustomization = yaml.safe_load(
            (ROOT / kubernetes.directory(deployment) / "kustomization.yaml").read_text()
        )
        assert kubernetes.NETWORK_POLICY_FILE in kustomization["resources"]


def _serving(deployment: Deployment) -> list[dict[str, str]]:
    """The labels of each pod template that serves the API (a vLLM container with a readiness probe)."""
    return [
        _labels(t)
        for t in _templates_of(deployment)
        if t["spec"]["containers"][0]["name"] == "vllm" and "readinessProbe" in t["spec"]["containers"][0]
    ]


def test_the_components_select_the_serving_pods_and_a_multi_node_deployment_scales_by_whole_groups(
    project: Project,
) -> None:
    """The PodMonitor and the InferencePool select exactly the pod templates that serve the API (no headless
    rank, no router, no Mooncake process), at the port they serve on; the ScaledObject and the HPA target the
    Deployment of a one-node deployment and the LeaderWorkerSet of a multi-node one (its scale subresource
    counts groups), on the waiting queue; prefill/decode and KV stores get no autoscaler (their router names
    its workers) and prefill/decode no pool (the plan says why). Each object passes its project's CRD."""
    kinds: Counter[str] = Counter()
    for deployment in _deployable(project):
        serving, others = _serving(deployment), [_labels(t) for t in _templates_of(deployment)]
        monitor = monitoring.pod_monitor(deployment)
        selector = monitor["spec"]["selector"]
        assert [labels for labels in others if fleet_checks.selects(selector, labels)] == serving
        assert fleet_checks.crd_problems(monitor) == []
        scaling = deployment.fleet.scaling
        if deployment.deploy_type in ("single_node", "multi_node"):
            assert scaling is not None
            scaled = autoscale.scaled_object(deployment, scaling)
            hpa = autoscale.autoscaler(deployment, scaling)
            kind = "Deployment" if deployment.deploy_type == "single_node" else "LeaderWorkerSet"
            assert scaled["spec"]["scaleTargetRef"]["kind"] == hpa["spec"]["scaleTargetRef"]["kind"] == kind
            assert "vllm:num_requests_waiting" in scaled["spec"]["triggers"][0]["metadata"]["query"]
            assert fleet_checks.crd_problems(scaled) == [] and core_problems(hpa, "1.37.0") == []
            kinds[kind] += 1
        else:
            assert scaling is None and deployment.fleet.scaling_why_not
            assert autoscale.files(deployment) == []
        if deployment.deploy_type == "pd_cluster":
            assert deployment.fleet.picker is None and "prefill" in deployment.fleet.pool_why_not
            assert inference_pool.files(deployment) == []
            continue
        pool = inference_pool.pool(deployment)
        assert [
            labels for labels in others if fleet_checks.selects(pool["spec"]["selector"], labels)
        ] == serving
        assert pool["spec"]["targetPorts"] == [{"number": 8000}]
        assert fleet_checks.crd_problems(pool) == []
    assert kinds["Deployment"] > 10 and kinds["LeaderWorkerSet"] > 10, kinds


def test_kustomize_builds_every_deployment_with_every_component_and_the_autoscaler_owns_the_replicas(
    project: Project, tmp_path: Path
) -> None:
    """A user's own kustomization of a project deployment of each shape (vendor, kind, node count) with its
    components: kustomize builds it, each core object passes Kubernetes 1.37's schema, and no scaled workload
    keeps a fixed `replicas` (a second apply would reset what the autoscaler chose). (The control plane test
    applies every deployment with its components.)"""
    overlay = tmp_path / "fleet"
    overlay.mkdir()
    resources, components = [], []
    shapes = {(d.image.vendor, d.deploy_type, d.nodes > 1): d for d in reversed(_deployable(project))}
    for deployment in shapes.values():
        folder = ROOT / kubernetes.directory(deployment)
        resources.append(os.path.relpath(folder, overlay))
        parts = ["monitoring", "inference-pool", autoscale.KEDA]
        components += [os.path.relpath(folder / part, overlay) for part in parts if (folder / part).is_dir()]
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump({"resources": resources, "components": components})
    )
    built = subprocess.run(
        [kubectl(), "kustomize", str(overlay)], capture_output=True, text=True, timeout=300
    )
    assert built.returncode == 0, built.stderr[-2000:]
    documents = [doc for doc in yaml.safe_load_all(built.stdout) if doc]
    kinds = Counter(doc["kind"] for doc in documents)
    targets = {
        (d["spec"]["scaleTargetRef"]["kind"], d["spec"]["scaleTargetRef"]["name"])
        for d in documents
        if d["kind"] == "ScaledObject"
    }
    for doc in documents:
        if (doc["kind"], doc["metadata"]["name"]) in targets:
            assert "replicas" not in doc["spec"], doc["metadata"]["name"]
        if doc["kind"] in ("Deployment", "Service", "ConfigMap", "NetworkPolicy"):
            assert core_problems(doc, "1.37.0") == [], doc["metadata"]["name"]
    print(dict(kinds))
    assert kinds["ScaledObject"] == len(targets) >= 6 and kinds["InferencePool"] >= 9, kinds


def test_every_image_runs_as_the_catalogs_user_made_after_its_install_layers(project: Project) -> None:
    """Every generated Dockerfile (the vLLM images of every vendor, the router's) runs its processes as the
    catalog's user, made after the last install layer (so those layers stay shared between images), with
    HOME and every cache its own and the ids in the label ai.vllm.factory.user."""
    user = project.catalog.server.user
    dockerfiles = sorted((ROOT / "images").rglob("Dockerfile"))
    assert len(dockerfiles) > 20
    for path in dockerfiles:
        text = path.read_text()
        assert f"USER {user.ids}" in text and f'ai.vllm.factory.user="{user.ids}"' in text, path
        installed = text.rfind("uv pip install")  # a vendor image installs nothing of its own
        assert installed < text.index("useradd"), path
        assert f"install -d -o {user.uid} -g {user.gid} " in text, path
        for name, value in user.cache_env.items():
            assert f"{name}={value}" in text, (path, name)


# Each command of docs/fleet.md's bash blocks, and the test that runs it as written.
DOCS_COMMANDS = {
    "chown -R 10001:10001 ~/.cache/huggingface": (
        "tests/test_fleet_live.py",
        "test_a_model_cache_a_root_image_filled_is_the_users_after_the_one_time_step",
    ),
    "mkdir -p my-fleet": ("tests/test_fleet_manifests.py", "test_the_docs_pages_fleet_kustomization_builds"),
    "kubectl kustomize my-fleet": (
        "tests/test_fleet_manifests.py",
        "test_the_docs_pages_fleet_kustomization_builds",
    ),
    "kubectl apply --server-side -k my-fleet": (
        "tests/test_fleet_control_plane.py",
        "test_the_docs_pages_fleet_kustomization_applies_to_a_cluster",
    ),
    "kubectl get podmonitors": (
        "tests/test_fleet_control_plane.py",
        "test_the_docs_pages_fleet_kustomization_applies_to_a_cluster",
    ),
    "kube-score score": (
        "tests/test_fleet_manifests.py",
        "test_the_docs_pages_kube_score_command_finds_nothing",
    ),
}


def _covering(command: str) -> tuple[str, str]:
    return next(test for start, test in DOCS_COMMANDS.items() if command.startswith(start))


def test_every_command_of_the_docs_page_is_run_by_a_test() -> None:
    commands = fleet_checks.docs_commands()
    assert len(commands) == len(DOCS_COMMANDS)
    for command in commands:
        path, name = _covering(command)
        assert f"def {name}(" in (ROOT / path).read_text(), (command, path, name)


def docs_env(tmp_path: Path) -> dict[str, str]:
    """The environment a reader of the docs has: kubectl and kube-score on the PATH, from a folder beside a
    checkout's k8s/ (linked here)."""
    (tmp_path / "k8s").symlink_to(K8S)
    tools = [str(Path(kubectl()).parent), str(go_tool("kube-score", "kube-score").parent)]
    return {**os.environ, "PATH": os.pathsep.join([*tools, os.environ["PATH"]])}


def test_the_docs_pages_fleet_kustomization_builds(tmp_path: Path) -> None:
    """The page's kustomization of the tiny model with monitoring, autoscale and inference-pool builds, and
    prints each kind the page names."""
    commands = [
        c
        for c in fleet_checks.docs_commands()
        if _covering(c)[1] == "test_the_docs_pages_fleet_kustomization_builds"
    ]
    printed = fleet_checks.run_docs_commands(commands, tmp_path, docs_env(tmp_path))
    kinds = [line.split(":", 1)[1].strip() for line in printed.splitlines()]
    assert sorted(kinds) == sorted(
        ["Service", "Deployment", "NetworkPolicy", "PodMonitor", "ScaledObject", "InferencePool"]
    ), kinds


def test_the_docs_pages_kube_score_command_finds_nothing(tmp_path: Path) -> None:
    commands = [c for c in fleet_checks.docs_commands() if c.startswith("kube-score")]
    printed = fleet_checks.run_docs_commands(commands, ROOT, docs_env(tmp_path))
    assert "[CRITICAL]" not in printed, printed
