"""The one-node CPU Deployment as a real consumer of Deployment YAML runs it: Debian's `podman kube play`
(podman 4.3) given exactly what `kubectl kustomize` prints for the committed folder, then a chat completion
sent to the pod's address. Needs podman and catatonit (testbench/up installs them; elsewhere this test is
skipped, saying so)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from factory.project import Project
from factory.render import kubernetes
from tests.conftest import ROOT, TINY, blueprint_of, kubectl, missing_tool

pytestmark = [pytest.mark.docker, pytest.mark.e2e]

# podman as root raises RLIMIT_NOFILE and RLIMIT_NPROC for every container; where the engine itself runs
# in a container without CAP_SYS_RESOURCE, runc then fails ("error setting rlimit type 6: operation not
# permitted"). Lower defaults, given through podman's own configuration file, avoid it.
CONTAINERS_CONF = '[containers]\ndefault_ulimits = ["nofile=1024:1024", "nproc=1000:1000"]\n'


def _tool(name: str) -> str:
    found = shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists() else None)
    if found is None:
        missing_tool(name, "apt-get install podman catatonit; testbench/up does")
    return found


# The test's own store, removed after it: a failed `podman load` leaves the layers it had written in the
# store with no image to remove them by (5.7 GB left behind here by one run that ran out of disk).
STORAGE_CONF = '[storage]\ndriver = "overlay"\ngraphroot = "{root}/graph"\nrunroot = "{root}/run"\n'


@pytest.fixture
def podman(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    _tool("catatonit")  # podman's pause image is built from it
    binary = _tool("podman")
    conf = tmp_path / "containers.conf"
    conf.write_text(CONTAINERS_CONF)
    store = tmp_path / "podman-store"
    storage = tmp_path / "storage.conf"
    storage.write_text(STORAGE_CONF.format(root=store))
    env = {**os.environ, "CONTAINERS_CONF": str(conf), "CONTAINERS_STORAGE_CONF": str(storage)}
    try:
        yield binary, env
    finally:
        # reset unmounts what the store mounted, then removes it; rmtree takes what reset leaves.
        subprocess.run([binary, "system", "reset", "--force"], env=env, capture_output=True, check=False)
        shutil.rmtree(store, ignore_errors=True)


def _run(podman: tuple[str, dict[str, str]], *args: str, timeout: float = 600) -> str:
    binary, env = podman
    result = subprocess.run(
        [binary, *args], capture_output=True, text=True, env=env, timeout=timeout, check=False
    )
    assert result.returncode == 0, f"podman {' '.join(args)}: {result.stderr[-2000:]}"
    return result.stdout


# testbench/up's registry: the image goes to podman through it. (`docker save | podman load` wrote the
# archive to /var/tmp, a copy of each blob beside it, then the layers: three times the image on disk, and
# a CI run that ran it took about half an hour longer than one that skipped it.) The registry keeps the
# layers it was given, so a second run pushes only a manifest.
TESTBENCH_REGISTRY = "127.0.0.1:5000"


@pytest.fixture
def podman_image(podman: tuple[str, dict[str, str]], tiny_built: Any) -> Iterator[str]:
    """The image built here, pushed to the test bench's registry and pulled into the test's podman store."""
    try:
        requests.get(f"http://{TESTBENCH_REGISTRY}/v2/", timeout=5).raise_for_status()
    except requests.RequestException as error:
        pytest.skip(f"no registry on {TESTBENCH_REGISTRY} (testbench/up starts one): {error}")
    size = int(
        subprocess.run(
            ["docker", "image", "inspect", "--format", "{{.Size}}", tiny_built.image],
            capture_output=True, text=True, check=True,
        ).stdout
    )  # fmt: skip
    # podman pull keeps the compressed layers in /var/tmp while it unpacks them into its store.
    free = shutil.disk_usage("/var/tmp").free
    needed = int(1.5 * size) + 2**30
    if free < needed:
        pytest.skip(
            f"podman pull needs about {needed / 1e9:.1f} GB free, the disk has {free / 1e9:.1f} GB (the "
            f"image is {size / 1e9:.2f} GB: the stand-in torch's CUDA libraries)"
        )
    pushed = f"{TESTBENCH_REGISTRY}/factory-podman-test/{tiny_built.image.rpartition('/')[2]}"
    subprocess.run(["docker", "tag", tiny_built.image, pushed], check=True)
    try:
        subprocess.run(["docker", "push", "-q", pushed], capture_output=True, check=True, timeout=1800)
    finally:
        subprocess.run(["docker", "rmi", pushed], capture_output=True, check=False)
    _run(podman, "pull", "-q", "--tls-verify=false", pushed, timeout=1800)
    local = f"localhost/{tiny_built.image}"  # the name the manifest's image resolves to in podman
    _run(podman, "tag", pushed, local)
    yield local


def _kubectl() -> str:
    return kubectl()


def test_podman_kube_play_serves_a_chat_from_the_one_node_deployment(
    project: Project, podman: tuple[str, dict[str, str]], podman_image: str, tmp_path: Path
) -> None:
    deployment = blueprint_of(project, TINY, "cpu").deployment("single_node_tp")
    rendered = subprocess.run(
        [_kubectl(), "kustomize", str(ROOT / kubernetes.directory(deployment))],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    objects = [doc for doc in yaml.safe_load_all(rendered) if doc]
    workload = next(doc for doc in objects if doc["kind"] == "Deployment")
    assert workload["spec"]["template"]["spec"]["containers"][0]["image"] == deployment.image.reference
    played = tmp_path / "deployment.yaml"
    played.write_text(rendered)
    pod = f"{workload['metadata']['name']}-pod-0"  # podman names the Deployment's one pod so
    try:
        _run(podman, "kube", "play", str(played))
        infra = _run(podman, "pod", "inspect", pod, "--format", "{{.InfraContainerID}}").strip()
        networks = json.loads(
            _run(podman, "inspect", infra, "--format", "{{json .NetworkSettings.Networks}}")
        )
        address = next(iter(networks.values()))["IPAddress"]
        port = workload["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"]
        base = f"http://{address}:{port}"
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            with contextlib.suppress(requests.RequestException):
                if requests.get(f"{base}/health", timeout=5).status_code == 200:
                    break
            time.sleep(5)
        else:
            logs = _run(podman, "pod", "logs", pod)
            pytest.fail(f"the pod did not become healthy: {logs[-3000:]}")
        answer = requests.post(
            f"{base}/v1/chat/completions",
            json={
                "model": deployment.image.served_model_name,
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 8,
            },
            timeout=300,
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["usage"]["completion_tokens"] > 0
    finally:
        subprocess.run(
            [podman[0], "kube", "down", str(played)], env=podman[1], capture_output=True, check=False
        )
