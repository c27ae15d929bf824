"""The one-node CPU Deployment as a real consumer of Deployment YAML runs it: Debian's `podman kube play`
(podman 4.3) given exactly what `kubectl kustomize` prints for the committed folder, then a chat completion
sent to the pod's address. Needs podman and catatonit (testbench/up installs them; elsewhere this test is
skipped, saying so)."""

from __future__ import annotations

import contextlib
import hashlib
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
from tests.conftest import ROOT, STATE, TINY, blueprint_of, kubectl, missing_tool

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


# The store, kept between runs under the test bench's state: the image is 6.42 GB unpacked, and a fresh store
# pulled all of it every run. Kept, a run whose image is unchanged pulls a manifest and finds every layer
# there; a rebuilt image pulls only the layers that changed. Its key is what the store's format depends on
# (podman's release and the two configuration files): another key's store is removed, not read. A pull cut
# short leaves the layers it had written with no image to remove them by (5.7 GB left behind here once by a
# run that ran out of disk): a store whose last pull did not finish (no WHOLE file) is emptied first.
STORAGE_CONF = '[storage]\ndriver = "overlay"\ngraphroot = "{root}/graph"\nrunroot = "{root}/run"\n'
PODMAN_STATE = STATE / "podman"
WHOLE = "pulled-whole"


def _store(binary: str) -> Path:
    release = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True).stdout
    key = hashlib.sha256(f"{release}\0{STORAGE_CONF}\0{CONTAINERS_CONF}".encode()).hexdigest()[:12]
    return PODMAN_STATE / key


def _podman_env(folder: Path) -> dict[str, str]:
    """podman's environment for the store in `folder`: the store's configuration files are written there."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "containers.conf").write_text(CONTAINERS_CONF)
    (folder / "storage.conf").write_text(STORAGE_CONF.format(root=folder))
    return {
        **os.environ,
        "CONTAINERS_CONF": str(folder / "containers.conf"),
        "CONTAINERS_STORAGE_CONF": str(folder / "storage.conf"),
    }


def _remove_store(binary: str, folder: Path) -> None:
    # reset unmounts what the store mounted, then removes it; rmtree takes what reset leaves.
    env = _podman_env(folder)
    subprocess.run([binary, "system", "reset", "--force"], env=env, capture_output=True, check=False)
    shutil.rmtree(folder, ignore_errors=True)


def _remove_pods(binary: str, env: dict[str, str]) -> None:
    """Every pod, container and volume of the store: the test's, or those a killed run left in it."""
    for args in (
        ["pod", "rm", "--all", "--force"],
        ["rm", "--all", "--force"],
        ["volume", "prune", "--force"],
    ):
        subprocess.run([binary, *args], env=env, capture_output=True, check=False, timeout=300)


@pytest.fixture
def podman() -> Iterator[tuple[str, dict[str, str]]]:
    """podman on the kept store (STATE/podman/KEY): empty of pods before and after the test; its images
    are the podman_image fixture's to bound."""
    _tool("catatonit")  # podman's pause image is built from it
    binary = _tool("podman")
    folder = _store(binary)
    if PODMAN_STATE.is_dir():
        for other in PODMAN_STATE.iterdir():
            if other != folder:
                _remove_store(binary, other)  # a store of another release or configuration
    if folder.is_dir() and not (folder / WHOLE).exists():
        _remove_store(binary, folder)
    env = _podman_env(folder)
    _remove_pods(binary, env)
    try:
        yield binary, env
    finally:
        _remove_pods(binary, env)


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
    """The image built here, pushed to the test bench's registry and pulled into the kept podman store
    (nothing to fetch when the store has it: the pull finds the manifest's layers there), which then
    holds that image alone (and podman's pause image): any other, an earlier build's, is removed."""
    try:
        requests.get(f"http://{TESTBENCH_REGISTRY}/v2/", timeout=5).raise_for_status()
    except requests.RequestException as error:
        pytest.skip(f"no registry on {TESTBENCH_REGISTRY} (testbench/up starts one): {error}")
    binary, env = podman
    held = (
        subprocess.run([binary, "image", "exists", tiny_built.image_id], env=env, check=False).returncode == 0
    )
    if not held:
        # An earlier build's image goes first: pulling beside it held two 6.75 GB images on a 92 GB disk.
        _remove_others(podman, tiny_built.image_id)
        size = int(
            subprocess.run(
                ["docker", "image", "inspect", "--format", "{{.Size}}", tiny_built.image_id],
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
    # By ID: the tag names whatever image was built under it last, on an engine that others may build on.
    subprocess.run(["docker", "tag", tiny_built.image_id, pushed], check=True)
    try:
        subprocess.run(["docker", "push", "-q", pushed], capture_output=True, check=True, timeout=1800)
    finally:
        subprocess.run(["docker", "rmi", pushed], capture_output=True, check=False)
    whole = _store(binary) / WHOLE
    whole.unlink(missing_ok=True)
    pulled = _run(podman, "pull", "-q", "--tls-verify=false", pushed, timeout=1800).strip()
    assert pulled == tiny_built.image_id.removeprefix("sha256:"), "podman holds the image built here"
    local = f"localhost/{tiny_built.image}"  # the name the manifest's image resolves to in podman
    _run(podman, "tag", pushed, local)
    # podman builds its pods' pause image (from catatonit) into the store when it lacks one: kept too.
    _remove_others(podman, pulled)
    whole.touch()
    yield local


def _remove_others(podman: tuple[str, dict[str, str]], kept: str) -> None:
    """Every image of the kept store but `kept` (an ID) and podman's pause image."""
    held_images = _run(podman, "images", "--no-trunc", "--format", "{{.ID}} {{.Repository}}").splitlines()
    for image, repository in {tuple(line.split()) for line in held_images}:
        if (
            image.removeprefix("sha256:") != kept.removeprefix("sha256:")
            and repository != "localhost/podman-pause"
        ):
            _run(podman, "rmi", "--force", image)


def _kubectl() -> str:
    return kubectl()


def _as_the_kubelet_mounts_empty_dirs(doc: dict[str, Any], folder: Path) -> dict[str, Any]:
    """The kubelet makes every emptyDir writable by any user (a folder of mode 0777, a tmpfs of 1777);
    podman kube play makes it a volume owned by root, mode 0755, and ignores fsGroup, so the pod's
    non-root user (issue 48) could not write /dev/shm ("Permission denied: '/psm_...'"). For podman only,
    each emptyDir becomes a host folder of the kubelet's mode; the manifest's containers are unchanged.
    (An init container doing the chmod raced podman's removal of once-init containers: "cannot remove
    container ... as it is running".)"""
    if doc.get("kind") != "Deployment":
        return doc
    pod = doc["spec"]["template"]["spec"]
    for volume in pod.get("volumes", []):
        if "emptyDir" in volume:
            host = folder / volume["name"]
            host.mkdir(parents=True, exist_ok=True)
            host.chmod(0o1777)
            del volume["emptyDir"]
            volume["hostPath"] = {"path": str(host), "type": "Directory"}
    return doc


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
    played.write_text(
        yaml.safe_dump_all([_as_the_kubelet_mounts_empty_dirs(doc, tmp_path / "volumes") for doc in objects])
    )
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
