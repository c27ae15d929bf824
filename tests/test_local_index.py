"""Install sources as data, proved on this machine: a PEP 503 simple-repository index served here (Python's
http.server over a folder of real wheels downloaded from PyPI) is named as an install's only index in a test
catalog; `factory lock` resolves from it and records it as the index of every file; a real BuildKit build
installs the locked set from it with hashes required; with the index down, the set is "not resolvable here"
and says which index and why.

The build step reaches the index with host networking (`docker build --network host`): the index listens
on 127.0.0.1 only, so nothing outside this machine sees it, and the URL `factory lock` resolved against is
the very URL the build step asks. Through the bridge gateway the index would have to listen on the
docker0 address, reachable by every container, and the catalog would need a second URL for the build."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
import yaml

from factory.build.backends import docker_cli
from factory.lock.model import canonical_name
from tests.conftest import ROOT, recipes_tree, run_factory

pytestmark = [pytest.mark.docker, pytest.mark.index]

PACKAGE = "requests"  # pure Python with four dependencies: a small real set, not CUDA's
VERSION = "2.32.3"
BASE = "factory-local/debian:bookworm"  # testbench/up bootstraps it (Debian bookworm: Python 3.11)
TEST_LABEL = "ai.vllm.factory.test"


def simple_repository(wheels: Path, root: Path) -> None:
    """PEP 503 layout: /simple/ lists projects, /simple/<normalized name>/ links each file with its sha256."""
    projects: dict[str, list[Path]] = {}
    for wheel in sorted(wheels.glob("*.whl")):
        projects.setdefault(canonical_name(wheel.name.split("-")[0]), []).append(wheel)
    simple = root / "simple"
    for name, files in projects.items():
        folder = simple / name
        folder.mkdir(parents=True)
        links = []
        for wheel in files:
            shutil.copy(wheel, folder / wheel.name)
            digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
            links.append(f'<a href="{wheel.name}#sha256={digest}">{wheel.name}</a><br>')
        (folder / "index.html").write_text("<html><body>" + "".join(links) + "</body></html>\n")
    listing = "".join(f'<a href="{name}/">{name}</a><br>' for name in sorted(projects))
    (simple / "index.html").write_text(f"<html><body>{listing}</body></html>\n")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Real wheels from PyPI: the package and its dependencies, for this machine's Python 3.11 x86-64."""
    folder = tmp_path_factory.mktemp("wheels")
    download = [sys.executable, "-m", "pip", "download", "--quiet", f"{PACKAGE}=={VERSION}"]
    subprocess.run([*download, "--only-binary=:all:", "-d", str(folder)], check=True, timeout=300)
    return folder


class LocalIndex:
    """python -m http.server over a simple repository on 127.0.0.1; the fixture that starts it stops it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/simple"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        command = [sys.executable, "-m", "http.server", str(self.port), "--bind", "127.0.0.1"]
        self.process = subprocess.Popen(
            [*command, "--directory", str(self.root)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.1)
        raise AssertionError("the local index did not start listening")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=20)
            self.process = None


@pytest.fixture
def local_index(wheels: Path, tmp_path: Path) -> Iterator[LocalIndex]:
    simple_repository(wheels, tmp_path / "index")
    index = LocalIndex(tmp_path / "index")
    index.start()
    try:
        yield index
    finally:
        index.stop()


def write_catalog(root: Path, index_url: str, package: str = PACKAGE) -> None:
    """The project's catalog with one CPU target whose install of `package` takes every wheel from the
    local index (and nothing from this machine: no find_links, no stand-ins)."""
    (root / "catalog").mkdir(parents=True)
    shutil.copy(ROOT / "catalog" / "deviations.yaml", root / "catalog" / "deviations.yaml")
    data = yaml.safe_load((ROOT / "catalog" / "hardware.yaml").read_text(encoding="utf-8"))
    data["indexes"]["local"] = {
        "url": index_url,
        "source": "this test: python -m http.server over real wheels downloaded from PyPI",
    }
    install = data["installs"]["cpu-pypi"]
    install.update(package=package, indexes=[{"index": "local"}], local_wheels=False, remove_packages=[])
    install["stand_ins"] = []
    data["installs"] = {"cpu-pypi": install}
    data["hardware"] = {"cpu": data["hardware"]["cpu"]}
    data["only_hardware"], data["known_bad"] = {}, {}
    data["build_recipes"] = {"default": "acme/Small"}
    (root / "catalog" / "hardware.yaml").write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")


def small_cpu_recipe() -> dict[str, object]:
    """A recipe for the CPU target only, whose floor the package's releases satisfy."""
    return {
        "meta": {"title": "Small", "slug": "small", "hardware": {"cpu": "verified"}},
        "model": {
            "model_id": "acme/Small",
            "min_vllm_version": "2.0",
            "architecture": "dense",
            "parameter_count": "2M",
            "context_length": 512,
            "base_args": [],
        },
        "dependencies": [],
        "variants": {"default": {"precision": "bf16"}},
        "compatible_strategies": ["single_node_tp"],
    }


def lock_of(out: Path) -> dict[str, object]:
    return dict(json.loads((out / "lock" / "vllm.lock.json").read_text(encoding="utf-8")))


def test_lock_resolves_from_a_local_index_records_it_and_a_build_installs_from_it_with_hashes(
    local_index: LocalIndex, tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    project = tmp_path / "project"
    write_catalog(project, local_index.url)
    tree = recipes_tree(tmp_path / "tree", {"acme/Small": small_cpu_recipe()})
    out = tmp_path / "out"
    env = {"FACTORY_FIND_LINKS": "", "FACTORY_PIP_EXTRA_INDEX_URL": ""}
    env = {k: v for k, v in os.environ.items() if k not in env}  # the catalog alone names the index
    locked = subprocess.run(
        [sys.executable, "-m", "factory", "--root", str(project), "lock", "--recipes", str(tree), "--out",
         str(out)],
        capture_output=True, text=True, env=env, check=False, timeout=600,
    )  # fmt: skip
    assert locked.returncode == 0, locked.stderr
    lock = lock_of(out)
    release = lock["releases"]["acme/Small"]["default"]["cpu-pypi"]  # type: ignore[index]
    assert release["vllm"] == VERSION, "the release list came from the local index (it holds only this one)"
    key = f"{PACKAGE}-{VERSION}-cpu-amd64-py3.11"
    locked_set = lock["sets"][key]  # type: ignore[index]
    assert locked_set["indexes"] == {"local": local_index.url}
    wheels = {canonical_name(p.name.split("-")[0]) for p in (local_index.root / "simple").glob("*/*.whl")}
    assert locked_set["served"] == dict.fromkeys(sorted(wheels), "local"), "every file, served by the index"
    requirements = (out / "lock" / locked_set["requirements"]).read_text(encoding="utf-8")
    assert requirements.count("--hash=sha256:") >= len(wheels)

    # A real BuildKit build installs exactly that set from the index, hashes required, no resolving.
    context = tmp_path / "context"
    context.mkdir()
    (context / "requirements.txt").write_text(requirements, encoding="utf-8")
    (context / "Dockerfile").write_text(
        f"FROM {BASE}\n"
        "COPY requirements.txt /tmp/requirements.txt\n"
        "ARG INDEX_URL\n"
        "RUN python3 -m venv /opt/venv && /opt/venv/bin/pip install --no-cache-dir --isolated"
        ' --require-hashes --no-deps --index-url "${INDEX_URL}" -r /tmp/requirements.txt\n'
        f'RUN /opt/venv/bin/python -c "import {PACKAGE}; print({PACKAGE}.__version__)" > /version\n',
        encoding="utf-8",
    )
    tag = f"factory-test/local-index:{uuid.uuid4().hex[:12]}"
    build = [docker_cli(), "build", "--network", "host", "--progress", "plain", "--build-arg"]
    build += [f"INDEX_URL={local_index.url}", "--label", f"{TEST_LABEL}=local-index", "-t", tag, str(context)]
    try:
        built = subprocess.run(
            build, capture_output=True, text=True, env={**os.environ, "DOCKER_BUILDKIT": "1"}, timeout=600
        )
        assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
        log = built.stdout + built.stderr
        assert f"{local_index.url}/{PACKAGE}/{PACKAGE}-{VERSION}-py3-none-any.whl" in log, "from the index"
        version = docker_client.containers.run(tag, ["cat", "/version"], remove=True).decode().strip()
        assert version == VERSION
    finally:
        subprocess.run([docker_cli(), "image", "rm", "-f", tag], capture_output=True, check=False)

    # The index down, and the set needed again (a lock that never had it): the release is kept (the recipe
    # asks the same), the set is "not resolvable here", naming the index, its URL and why.
    local_index.stop()
    stale = lock_of(out)
    del stale["sets"][key]  # type: ignore[attr-defined]
    (out / "lock" / "vllm.lock.json").write_text(json.dumps(stale), encoding="utf-8")
    again = run_factory(project, "lock", "--recipes", str(tree), "--out", str(out))
    assert again.returncode == 0, again.stderr
    down = lock_of(out)["sets"][key]  # type: ignore[index]
    assert down["unreachable_index"] == "local" and "requirements" not in down
    why = f"not resolvable here: the index local ({local_index.url}) cannot be reached from this machine"
    assert why in down["unresolvable"]
    assert f"not buildable: {key}: not resolvable here" in again.stdout + again.stderr
