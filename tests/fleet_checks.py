"""What the fleet tests read from manifests as a cluster would: whether a NetworkPolicy lets a pod reach
another's port (Kubernetes' own rules, since kwok enforces none), and kube-score's criticals over a set of
files (its JSON output: grade 1 is critical)."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from tests.kubernetes_checks import _closed

Manifest = Mapping[str, Any]
CRITICAL = 1


@dataclass(frozen=True)
class Pod:
    """A pod as a policy sees it: its labels, its namespace and that namespace's labels."""

    labels: Mapping[str, str]
    namespace: str = "serving"
    namespace_labels: Mapping[str, str] = field(default_factory=dict)


def selects(selector: Manifest, labels: Mapping[str, str]) -> bool:
    """A label selector (matchLabels; matchExpressions In, NotIn, Exists, DoesNotExist) against labels."""
    if not dict(selector.get("matchLabels") or {}).items() <= dict(labels).items():
        return False
    for expression in selector.get("matchExpressions") or []:
        key, operator = expression["key"], expression["operator"]
        present = key in labels
        found = {
            "In": present and labels.get(key) in expression.get("values", []),
            "NotIn": not present or labels.get(key) not in expression.get("values", []),
            "Exists": present,
            "DoesNotExist": not present,
        }[operator]
        if not found:
            return False
    return True


def _peer_admits(peer: Manifest, source: Pod, policy_namespace: str) -> bool:
    if "ipBlock" in peer:
        return False  # pods are not named by address here
    namespaces = peer.get("namespaceSelector")
    if namespaces is None and source.namespace != policy_namespace:
        return False  # a podSelector alone selects pods of the policy's own namespace
    if namespaces is not None and not selects(namespaces, dict(source.namespace_labels or {})):
        return False
    return selects(peer.get("podSelector") or {}, source.labels)


def _rule_admits(rule: Manifest, source: Pod, port: int, policy_namespace: str) -> bool:
    ports = rule.get("ports") or []
    if ports and not any(p.get("port") == port and p.get("protocol", "TCP") == "TCP" for p in ports):
        return False
    peers = rule.get("from")
    return not peers or any(_peer_admits(peer, source, policy_namespace) for peer in peers)


def reaches(policies: Sequence[Manifest], source: Pod, target: Pod, port: int) -> bool:
    """Whether `source` may open a TCP connection to `target` at `port`: allowed unless a policy selecting the
    target isolates it for ingress, then only if one of those policies' rules admits it."""
    selecting = [
        p
        for p in policies
        if p["metadata"].get("namespace", target.namespace) == target.namespace
        and selects(p["spec"]["podSelector"], target.labels)
        and "Ingress" in p["spec"].get("policyTypes", ["Ingress"])
    ]
    if not selecting:
        return True
    return any(
        _rule_admits(rule, source, port, target.namespace)
        for policy in selecting
        for rule in policy["spec"].get("ingress") or []
    )


@dataclass(frozen=True)
class Finding:
    where: str  # kind/name of the object
    check: str  # kube-score's check id
    comment: str


def kube_score(binary: Path, files: Iterable[Path]) -> tuple[list[Finding], list[dict[str, Any]]]:
    """kube-score's critical findings (checks an object does not ignore) over these files, and its whole
    JSON report."""
    result = subprocess.run(
        [str(binary), "score", "--output-format", "json", *map(str, files)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    if result.returncode not in (0, 1):  # 1: it found something
        raise AssertionError(f"kube-score failed: {result.stderr[-2000:]}")
    report = json.loads(result.stdout)
    found = [
        Finding(obj["object_name"], check["check"]["id"], comment.get("summary", ""))
        for obj in report
        for check in obj["checks"]
        if check["grade"] == CRITICAL and not check.get("skipped")
        for comment in check.get("comments") or [{}]
    ]
    return found, report


# --- the fleet's CRDs, as the repositories ship them (../shared/k8s) ---------------------------------------

SHARED_K8S = Path(__file__).resolve().parents[2] / "shared" / "k8s"
CRDS = {
    "InferencePool": "inference-extension/v1.6.0/inference.networking.k8s.io_inferencepools.yaml",
    "ScaledObject": "keda/v2.20.2/keda.sh_scaledobjects.yaml",
    "PodMonitor": "prometheus-operator/v0.93.0/monitoring.coreos.com_podmonitors.yaml",
}


def crd_files() -> list[Path]:
    """The CRD files, where this machine has them (../shared/k8s beside the checkout, or where
    FACTORY_SHARED_K8S points)."""
    import os

    root = Path(os.environ.get("FACTORY_SHARED_K8S", SHARED_K8S))
    return [root / path for path in CRDS.values()]


@cache
def crd_validator(path: Path, version: str) -> jsonschema.protocols.Validator:
    crd = yaml.safe_load(path.read_text())
    served = next(v for v in crd["spec"]["versions"] if v["name"] == version)
    schema = _closed(served["schema"]["openAPIV3Schema"])
    return jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)(schema)


def crd_problems(document: Manifest) -> list[str]:
    """What the shipped CRD of the object's kind refuses in it (its OpenAPI schema, closed as the API server
    prunes unknown fields and `--validate=strict` refuses them)."""
    path = dict(zip(CRDS, crd_files(), strict=True))[document["kind"]]
    validator = crd_validator(path, document["apiVersion"].rsplit("/", 1)[1])
    where = f"{document['kind']} {document['metadata']['name']}"
    return [
        f"{where}: {'.'.join(map(str, e.absolute_path))}: {e.message}"
        for e in validator.iter_errors(dict(document))
    ]


# --- the docs page's commands ---------------------------------------------------------------------------

DOCS = Path(__file__).resolve().parents[1] / "docs" / "fleet.md"


def docs_commands() -> list[str]:
    """Each command of the docs page's ```bash blocks, in order (comment lines dropped)."""
    blocks = re.findall(r"^```bash\n(.*?)^```", DOCS.read_text(), flags=re.S | re.M)
    return [line for block in blocks for line in block.splitlines() if line and not line.startswith("#")]


def run_docs_commands(commands: list[str], cwd: Path, env: Mapping[str, str]) -> str:
    """The commands as a user types them, in bash from `cwd`, one after another; their output."""
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", "\n".join(commands)],
        cwd=cwd, env=dict(env), capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return result.stdout
