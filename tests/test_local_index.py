"""Install sources as data, proved on this machine: a PEP 503 simple-repository index served here (Python's
http.server over a folder of real wheels downloaded from PyPI) is named as an install's only index in a test
catalog; `factory lock` resolves from it and records it as the index of every file; `factory build` builds
the image `factory generate` wrote for that catalog and installs the locked set from it with hashes
required; with the index down, the set is "not resolvable here" and says which index and why.

The index listens on 127.0.0.1 only, as a mirror on a build host would: the build reaches it through the
`network = "host"` build setting (the project's .factory.local.toml), so the URL `factory lock` resolved
against is the very URL the build's RUN steps ask, and nothing outside this machine sees it. In BuildKit's
default network a RUN step has a loopback of its own, where nothing listens."""

from __future__ import annotations

import contextlib
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
from docker.errors import ImageNotFound

from factory.base.settings import ENV_NAMES
from factory.lockfile.model import canonical_name
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

    def __init__(self, root: Path, access_log: Path) -> None:
        self.root = root
        self.access_log = access_log  # http.server's log: one line per request, with its status
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/simple"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        command = [sys.executable, "-m", "http.server", str(self.port), "--bind", "127.0.0.1"]
        with self.access_log.open("ab") as log:
            self.process = subprocess.Popen(
                [*command, "--directory", str(self.root)], stdout=subprocess.DEVNULL, stderr=log
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
    index = LocalIndex(tmp_path / "index", tmp_path / "index-access.log")
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


def small_cpu_recipe(slug: str = "small") -> dict[str, object]:
    """A recipe for the CPU target only, whose floor the package's releases satisfy."""
    return {
        "meta": {"title": "Small", "slug": slug, "hardware": {"cpu": "verified"}},
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


def write_machine_settings(project: Path) -> None:
    """The project's .factory.local.toml, as a user with a mirror on the build host writes it: the local
    base image, the TLS proxy's CA bundle (pip fetches uv from the machine's default index), the host
    network."""
    lines = ["[build]", f'base_image = "{BASE}"', 'network = "host"']
    bundle = os.environ.get("PIP_CERT") or os.environ.get("SSL_CERT_FILE")
    if bundle and Path(bundle).is_file():
        lines.append(f'ca_bundle = "{bundle}"')
    (project / ".factory.local.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")


def fetched(access_log: str, wheel: Path) -> bool:
    """Whether the index served this wheel (http.server logs `"GET /simple/<name>/<file> HTTP/1.1" 200`)."""
    return f'"GET /simple/{wheel.parent.name}/{wheel.name} HTTP/1.1" 200' in access_log


# Every distribution in the image's venv, by its normalized name (PEP 503), with its version.
INSTALLED = (
    "import importlib.metadata as m, json, re; print(json.dumps("
    "{re.sub(r'[-_.]+', '-', d.metadata['Name']).lower(): d.version for d in m.distributions()}))"
)


def test_lock_resolves_from_a_local_index_records_it_and_factory_build_installs_from_it_with_hashes(
    local_index: LocalIndex, tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    project = tmp_path / "project"
    write_catalog(project, local_index.url)
    write_machine_settings(project)
    slug = f"local-index-{uuid.uuid4().hex[:8]}"  # its own image name: the test moves no tag anyone uses
    tree = recipes_tree(tmp_path / "tree", {"acme/Small": small_cpu_recipe(slug)})
    out = tmp_path / "out"
    # The catalog and the project's settings alone name the index and the network.
    env = {k: v for k, v in os.environ.items() if k not in ENV_NAMES.values()}
    where = ["--recipes", str(tree), "--out", str(out)]

    def factory(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "factory", "--root", str(project), *args, *where]
        return subprocess.run(command, capture_output=True, text=True, env=env, check=False, timeout=900)

    locked = factory("lock")
    assert locked.returncode == 0, locked.stderr
    lock = lock_of(out)
    release = lock["releases"]["acme/Small"]["default"]["cpu-pypi"]  # type: ignore[index]
    assert release["vllm"] == VERSION, "the release list came from the local index (it holds only this one)"
    key = f"{PACKAGE}-{VERSION}-cpu-amd64-py3.11"
    locked_set = lock["sets"][key]  # type: ignore[index]
    assert locked_set["indexes"] == {"local": local_index.url}
    wheels = sorted((local_index.root / "simple").glob("*/*.whl"))
    assert locked_set["served"] == {w.parent.name: "local" for w in wheels}, "every file, served by the index"
    requirements = (out / "lock" / locked_set["requirements"]).read_text(encoding="utf-8")
    assert requirements.count("--hash=sha256:") >= len(wheels)
    pins = {  # package -> the locked version, from the requirements file `factory lock` wrote
        canonical_name(line.split("==")[0]): line.split("==")[1].split()[0]
        for line in requirements.splitlines()
        if "==" in line and not line.startswith((" ", "#"))
    }
    assert len(pins) == len(wheels)

    # `factory build` builds what `factory generate` wrote for this catalog: the real Dockerfile, its
    # context, the three hash-checked install steps; the RUN steps reach the index on the host network.
    generated = factory("generate")
    assert generated.returncode == 0, generated.stderr
    before = local_index.access_log.stat().st_size
    report = tmp_path / "build.json"
    built = factory("build", "acme/Small", "--hardware", "cpu", "--report", str(report))
    results = json.loads(report.read_text(encoding="utf-8")) if report.exists() else []
    tags = [tag for result in results for tag in result["tags"]]
    try:
        assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
        assert [result["network"] for result in results] == ["host"]
        assert "on the host network" in built.stdout, "the summary says so"
        served = local_index.access_log.read_bytes()[before:].decode(errors="replace")
        assert all(fetched(served, wheel) for wheel in wheels), f"the build fetched every file:\n{served}"
        installed = docker_client.containers.run(
            tags[0], ["-c", INSTALLED], entrypoint="/opt/vllm/bin/python", remove=True,
            labels={TEST_LABEL: "local-index"},
        )  # fmt: skip
        venv = json.loads(installed)
        assert venv[PACKAGE] == VERSION
        # The locked set and nothing else, beside what `python -m venv` puts in every venv.
        assert {name: venv[name] for name in pins if name in venv} == pins
        assert set(venv) - set(pins) <= {"pip", "setuptools"}, sorted(venv)
    finally:
        for tag in tags:
            with contextlib.suppress(ImageNotFound):
                docker_client.images.remove(tag, noprune=False)

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
