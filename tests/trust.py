"""What the admission tests share: a copy of the project with the tiny CPU image published (to a registry of
the test's own) and trusted keys in recipes/lock/trusted-keys/; the control plane with policy-controller's
webhook beside it (testbench/policy-webhook); namespaces that pull from the registry; and the commands a user
runs, with their answers read back."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from factory.lockfile.trusted_keys import keys_folder
from factory.project import load_project
from tests.cluster import ControlPlane
from tests.conftest import ROOT, kubectl
from tests.registry import LocalRegistry
from tests.signing import Key

WEBHOOK = ROOT / "testbench" / "policy-webhook"
INCLUDE = "policy.sigstore.dev/include"
PULL_SECRET = "registry-login"
POLICIES = ("vllm-factory-signature", "vllm-factory-provenance")
# The commands docs/admission.md gives for trusting a key and for retiring one, run as written.
APPLY = "kubectl apply --server-side -f k8s/_verify/admission.yaml\n"
TRUST_KEY = (
    """mkdir -p recipes/lock/trusted-keys
cp {public} recipes/lock/trusted-keys/{name}.pub
factory generate
"""
    + APPLY
)
RETIRE_KEY = (
    """rm recipes/lock/trusted-keys/{name}.pub
factory generate
"""
    + APPLY
)


def wait_for(what: str, check: Callable[[], Any], timeout: float = 30, every: float = 0.3) -> Any:
    """`check()`'s first truthy answer; a failure naming `what` at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        answer = check()
        if answer or time.monotonic() > deadline:
            assert answer, f"{what}: not within {timeout:.0f} s"
            return answer
        time.sleep(every)


@dataclass
class Trust:
    plane: ControlPlane
    root: Path  # the project's copy, with its publish record
    registry: LocalRegistry
    repository: str  # where the tiny CPU image is published: <registry>/vllm-factory/tiny-random-llama
    keys: dict[str, Key]
    digests: dict[str, str] = field(default_factory=dict)  # case -> digest in `repository`
    trusted: tuple[str, ...] | None = None  # the keys the cluster trusts now (None: no policy applied)

    def run(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        """kubectl against the control plane, its answer kept whether it succeeded or not."""
        return subprocess.run(
            [kubectl(), "--kubeconfig", str(self.plane.folder / "kubeconfig"), *args],
            input=stdin, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip

    def image(self, case: str) -> str:
        return f"{self.repository}@{self.digests[case]}"

    # --- the webhook ---------------------------------------------------------------------------------

    def webhook(self, action: str) -> None:
        done = subprocess.run([str(WEBHOOK), action, str(self.plane.folder)], capture_output=True, text=True,
                              timeout=600)  # fmt: skip
        assert done.returncode == 0, f"testbench/policy-webhook {action}: {done.stderr[-3000:]}"
        if action == "down":
            self.trusted = None  # its CRDs went, and the policies with them

    def webhook_running(self) -> bool:
        pid = self.plane.folder / "policy-webhook" / "pid"
        return pid.exists() and Path(f"/proc/{pid.read_text().strip()}").exists()

    # --- the policy ----------------------------------------------------------------------------------

    def shell(self, script: str) -> subprocess.CompletedProcess[str]:
        """Commands as a user types them, in the project's copy: `factory` and `kubectl` on PATH, KUBECONFIG
        naming the control plane."""
        tools = Path(kubectl()).parent
        env = {**os.environ, "KUBECONFIG": str(self.plane.folder / "kubeconfig"), "PYTHONPATH": str(ROOT),
               "PATH": f"{tools}{os.pathsep}{os.environ.get('PATH', '')}"}  # fmt: skip
        prelude = f'set -euo pipefail\nfactory() {{ "{sys.executable}" -m factory "$@"; }}\n'
        return subprocess.run(["bash", "-c", prelude + script], cwd=self.root, env=env, capture_output=True,
                              text=True, timeout=300)  # fmt: skip

    def trust_only(self, *names: str) -> None:
        """Trust exactly these keys, by the commands docs/admission.md gives (a key's file added or removed,
        `factory generate`, the admission objects applied); returns once the webhook and the API server
        judge by them."""
        if not self.webhook_running():
            self.webhook("up")
        if self.trusted == names:
            return
        folder = keys_folder(load_project(self.root).lock_path)
        present = {path.stem for path in folder.glob("*.pub")}
        scripts = [TRUST_KEY.format(public=self.keys[n].public, name=n) for n in names if n not in present]
        scripts += [RETIRE_KEY.format(name=n) for n in sorted(present - set(names))]
        for script in scripts or [APPLY]:
            done = self.shell(script)
            assert done.returncode == 0, f"{script}: {done.stderr[-2000:]}"
        wait_for(
            f"the webhook's policies naming {names}",
            lambda: self._loaded() == {p: set(names) for p in POLICIES},
        )
        self.trusted = names
        self.wait_for_floor()

    def any_policy(self) -> None:
        """A policy in place and the webhook running, whichever keys it trusts."""
        self.trust_only(*(self.trusted or ("release-1",)))

    def _loaded(self) -> dict[str, set[str]]:
        """The authorities of each policy the webhook has loaded (its reconciler's ConfigMap)."""
        got = self.run("get", "configmap", "config-image-policies", "-n", "cosign-system", "-o", "json")
        data = json.loads(got.stdout).get("data") or {} if got.returncode == 0 else {}
        return {name: {a["name"] for a in json.loads(body)["authorities"]} for name, body in data.items()}

    def wait_for_floor(self) -> None:
        """The API server enforces a ValidatingAdmissionPolicy about a second after it is applied: once it
        enforces this one, a server-side dry run of a pod from elsewhere is refused by it, and one from the
        published repository passes it (to be refused by the webhook: no such digest is signed)."""
        namespace = self.namespace("floor-probe", exist_ok=True)
        digest = "@sha256:" + "0" * 64
        floor = "vllm-factory-pinned-images"

        def enforced() -> bool:
            elsewhere = self.pod(namespace, "elsewhere", f"127.0.0.1:1/elsewhere{digest}", "--dry-run=server")
            published = self.pod(namespace, "published", f"{self.repository}{digest}", "--dry-run=server")
            return floor in elsewhere.stderr and published.returncode != 0 and floor not in published.stderr

        wait_for("the floor (ValidatingAdmissionPolicy) enforced as applied", enforced)

    # --- namespaces, objects, answers ----------------------------------------------------------------

    def namespace(self, name: str, labelled: bool = True, exist_ok: bool = False) -> str:
        """A namespace that pulls from the test's registry (its default service account names the pull
        secret, which policy-controller reads as a kubelet does), labelled for verification or not."""
        if exist_ok and self.run("get", "namespace", name).returncode == 0:
            return name
        self.plane.kubectl("create", "namespace", name)
        if labelled:
            self.plane.kubectl("label", "namespace", name, f"{INCLUDE}=true")
        login = base64.b64encode(f"{self.registry.user}:{self.registry.password}".encode()).decode()
        config = {"auths": {self.registry.address: {"auth": login}}}
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": PULL_SECRET, "namespace": name},
            "type": "kubernetes.io/dockerconfigjson",
            "data": {".dockerconfigjson": base64.b64encode(json.dumps(config).encode()).decode()},
        }
        self.plane.kubectl("apply", "-f", "-", stdin=json.dumps(secret))  # never in an argument
        account = ("get", "serviceaccount", "default", "-n", name)
        wait_for(f"{name}'s default service account", lambda: self.run(*account).returncode == 0)
        patch = json.dumps({"imagePullSecrets": [{"name": PULL_SECRET}]})
        self.plane.kubectl("patch", "serviceaccount", "default", "-n", name, "-p", patch)
        return name

    def overlay(self, name: str, folder: str, **extra: Any) -> Path:
        """A user's kustomization: one deployment's folder under the copy's k8s/, the verify component,
        and whatever else is given (images:, patches:)."""
        overlay = self.root / "overlays" / name
        overlay.mkdir(parents=True)
        body = {"resources": [f"../../k8s/{folder}"], "components": ["../../k8s/_verify"], **extra}
        (overlay / "kustomization.yaml").write_text(yaml.safe_dump(body))
        return overlay

    def apply(self, overlay: Path, namespace: str) -> subprocess.CompletedProcess[str]:
        return self.run("apply", "-k", str(overlay), "--server-side", "-n", namespace)

    def pod(self, namespace: str, name: str, image: str, *flags: str) -> subprocess.CompletedProcess[str]:
        return self.run("run", name, "-n", namespace, f"--image={image}", "--restart=Never", *flags)

    def pods(self, namespace: str, *selector: str) -> list[dict[str, Any]]:
        return [
            p for p in self.plane.items("pods", namespace, *selector) if p["status"].get("phase") == "Running"
        ]

    def wait_pods(self, namespace: str, count: int, *selector: str) -> list[dict[str, Any]]:
        def running() -> list[dict[str, Any]] | None:
            pods = self.pods(namespace, *selector)
            return pods if len(pods) >= count else None

        return list(wait_for(f"{count} running pods in {namespace}", running, timeout=60, every=0.5))

    def warning(self, namespace: str, kind: str, name: str, *words: str, timeout: float = 60) -> str:
        """The message of the first Warning event about kind/name that holds every one of `words`."""

        def found() -> str | None:
            events = self.plane.items(
                "events", namespace, "--field-selector", f"type=Warning,involvedObject.kind={kind}"
            )
            for event in events:
                message = str(event.get("message", ""))
                if event["involvedObject"]["name"].startswith(name) and all(w in message for w in words):
                    return message
            return None

        return str(wait_for(f"a Warning event on {kind} {name} saying {words}", found, timeout, every=1))
