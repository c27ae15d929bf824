"""The model cache claim component (k8s/_model-cache-claim) on every committed deployment, offline: each
serving pod template mounts the claim where it had the emptyDir and nothing else in any object changes; the
router's pod is left alone. (tests/test_control_plane.py applies it to a real control plane.)"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import yaml

from factory.project import Project
from factory.render import kubernetes
from tests.conftest import ROOT, kubectl
from tests.test_kubernetes import _deployments


def _build(folder: Path) -> list[dict[str, Any]]:
    printed = subprocess.run(
        [kubectl(), "kustomize", str(folder)], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    return [doc for doc in yaml.safe_load_all(printed) if doc]


def test_every_deployment_with_the_component_mounts_the_claim_and_changes_nothing_else(
    project: Project, tmp_path: Path
) -> None:
    folders = [ROOT / kubernetes.directory(d) for d in _deployments(project) if kubernetes.deployable(d)]
    overlay = tmp_path / "with-claim"
    overlay.mkdir()
    body = {
        "resources": [os.path.relpath(f, overlay) for f in folders],
        "components": [os.path.relpath(ROOT / kubernetes.CLAIM_COMPONENT, overlay)],
    }
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(body))
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "kustomization.yaml").write_text(
        yaml.safe_dump({"resources": [os.path.relpath(f, plain) for f in folders]})
    )
    claimed, before = _build(overlay), _build(plain)
    assert len(claimed) == len(before) > 200
    templates = untouched = 0
    for old, new in zip(before, claimed, strict=True):
        serving = old["metadata"]["labels"].get(kubernetes.COMPONENT_LABEL) == kubernetes.SERVER_COMPONENT
        paths = kubernetes.TEMPLATE_PATHS.get(old["kind"], ())
        untouched += len(paths) * (not serving)  # a KV store's master, store service and router
        for path in paths if serving else ():
            keys = path.strip("/").split("/")
            old_pod, new_pod = old, new
            for key in keys:
                old_pod, new_pod = old_pod[key], new_pod[key]
            volume = old_pod["spec"]["volumes"][0]
            assert volume["name"] == "model-cache" and "emptyDir" in volume
            assert new_pod["spec"]["volumes"][0] == {
                "name": "model-cache",
                "persistentVolumeClaim": {"claimName": "model-cache"},
            }
            new_pod["spec"]["volumes"][0] = volume
            templates += 1
        assert new == old, f"{old['kind']}/{old['metadata']['name']} changed beyond its cache volume"
    print(
        f"{len(folders)} kustomizations, {len(claimed)} objects, {templates} pod templates on the claim, "
        f"{untouched} left alone"
    )
    assert untouched > 0, "the KV stores' Mooncake and router pods download no model: no claim"
