"""A release that cannot be installed is passed over, on a real index: a PEP 503 index served here holds a
vLLM-like package whose newest release requires a package no index serves (as vLLM 0.34.0 requires
flashinfer-python 0.7.3, which the package index never had). `factory lock` takes the newest release that
installs, records the one passed over with its cause, and `list`, `show` and the matrix say so; a second
lock with nothing changed asks no index and writes the same bytes; once the missing package is published,
`factory lock --refresh` moves up to the newer release. The wheels are small ones this test writes (real
wheel files, real metadata), since no real vLLM release is small enough to serve here."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import assert_same_files, folder_bytes, recipes_tree
from tests.test_local_index import LocalIndex, simple_repository, small_cpu_recipe
from tests.test_local_index import write_catalog as local_index_catalog

pytestmark = [pytest.mark.index]

PACKAGE = "fakevllm"
MISSING = "fakeflashinfer==2.0"


def wheel(folder: Path, name: str, version: str, requires: list[str]) -> Path:
    """A pure-Python wheel with real metadata: what a resolver reads to know its requirements."""
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": f'__version__ = "{version}"\n',
        f"{dist}/METADATA": "Metadata-Version: 2.1\n"
        f"Name: {name}\nVersion: {version}\n" + "".join(f"Requires-Dist: {r}\n" for r in requires),
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: factory-test\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    record.append(f"{dist}/RECORD,,")
    target = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(target, "w") as archive:
        for path, text in {**files, f"{dist}/RECORD": "\n".join(record) + "\n"}.items():
            archive.writestr(path, text)
    return target


def write_catalog(root: Path, index_url: str) -> None:
    """The project's catalog with its CPU target installing the fake package from the local index only."""
    local_index_catalog(root, index_url, PACKAGE)


@pytest.fixture
def index(tmp_path: Path) -> Iterator[tuple[LocalIndex, Path]]:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    wheel(wheels, PACKAGE, "2.0", [])
    wheel(wheels, PACKAGE, "2.1", [MISSING])  # the newest: its requirement is on no index
    wheel(wheels, "fakeflashinfer", "1.9", [])  # a neighbour of the missing release, as 0.7.4 is
    simple_repository(wheels, tmp_path / "index")
    served = LocalIndex(tmp_path / "index", tmp_path / "index-access.log")
    served.start()
    try:
        yield served, wheels
    finally:
        served.stop()


def factory(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # The catalog alone names the index: this machine's settings for the +cpu torch do not apply.
    machine = {"FACTORY_FIND_LINKS", "FACTORY_PIP_EXTRA_INDEX_URL"}
    env = {k: v for k, v in os.environ.items() if k not in machine}
    return subprocess.run(
        [sys.executable, "-m", "factory", "--root", str(root), *args],
        capture_output=True, text=True, env=env, check=False, timeout=600,
    )  # fmt: skip


def test_the_newest_release_that_installs_is_chosen_and_a_refresh_moves_up_once_it_can(
    index: tuple[LocalIndex, Path], tmp_path: Path
) -> None:
    served, wheels = index
    project = tmp_path / "project"
    write_catalog(project, served.url)
    tree = recipes_tree(tmp_path / "tree", {"acme/Small": small_cpu_recipe()})
    out = tmp_path / "out"
    where = ("--recipes", str(tree), "--out", str(out))

    locked = factory(project, "lock", *where)
    assert locked.returncode == 0, locked.stderr
    lock = json.loads((out / "lock" / "vllm.lock.json").read_text(encoding="utf-8"))
    release = lock["releases"]["acme/Small"]["default"]["cpu-pypi"]
    assert release["vllm"] == "2.0", "2.1 cannot be installed: the newest that can is chosen"
    key = f"{PACKAGE}-2.1-cpu-amd64-py3.11"
    assert release["passed_over"] == [key]
    record = lock["passed_over"][key]
    assert record["requirement"] == MISSING and record.get("answer") is None
    assert record["served"] == ["1.9"], "what the index does serve of that package, for people"
    cause = f"{PACKAGE} 2.1 passed over on linux/amd64: it requires {MISSING}, which no index serves"
    assert f"passed over: acme/Small default cpu-pypi: {cause}" in locked.stdout

    # list, show and the matrix say which release was passed over, and why.
    assert factory(project, "generate", *where).returncode == 0
    listed = factory(project, "list", *where)
    row = next(line for line in listed.stdout.splitlines() if "vllm2.0-cpu-default" in line)
    assert cause in row.split("\t")[3], row
    assert "1 images take an older release" in listed.stderr
    shown = factory(project, "show", "acme/Small", "--hardware", "cpu", *where)
    assert shown.returncode == 0, shown.stderr
    assert cause in shown.stdout
    reports = tmp_path / "reports"
    matrix = factory(project, "matrix", *where, "--reports", str(reports))
    assert matrix.returncode == 0, matrix.stderr
    page = "\n".join(p.read_text(encoding="utf-8") for p in reports.rglob("matrix*.html"))
    assert cause in page, "the matrix cell's tooltip names the release passed over"

    # A second lock with nothing changed asks no index (it is down) and writes the same bytes.
    before = folder_bytes(out / "lock")
    served.stop()
    again = factory(project, "lock", *where)
    assert again.returncode == 0, again.stderr
    assert_same_files(before, folder_bytes(out / "lock"), "a second lock with nothing changed")
    served.start()

    # Nothing published yet: a refresh asks the index again, gets the same answer and moves nothing.
    refreshed = factory(project, "lock", "--refresh", *where)
    assert refreshed.returncode == 0, refreshed.stderr
    assert (
        json.loads((out / "lock" / "vllm.lock.json").read_text())["releases"]["acme/Small"]["default"][
            "cpu-pypi"
        ]["vllm"]
        == "2.0"
    )

    # The missing package is published: the next refresh moves up to 2.1 and records nothing passed over.
    wheel(wheels, "fakeflashinfer", "2.0", [])
    served.stop()
    (tmp_path / "index").rename(tmp_path / "index-before")
    simple_repository(wheels, tmp_path / "index")
    served.start()
    moved = factory(project, "lock", "--refresh", *where)
    assert moved.returncode == 0, moved.stderr
    assert "acme/Small default cpu-pypi: 2.0 -> 2.1" in moved.stdout, moved.stdout
    lock = json.loads((out / "lock" / "vllm.lock.json").read_text(encoding="utf-8"))
    assert lock["releases"]["acme/Small"]["default"]["cpu-pypi"]["vllm"] == "2.1"
    assert not lock.get("passed_over"), "nothing is passed over any more"
    requirements = (out / "lock" / lock["sets"][key]["requirements"]).read_text(encoding="utf-8")
    assert "fakeflashinfer==2.0" in requirements and f"{PACKAGE}==2.1" in requirements


def test_a_release_asked_for_exactly_stays_unbuildable_with_its_cause(
    index: tuple[LocalIndex, Path], tmp_path: Path
) -> None:
    served, _ = index
    project = tmp_path / "project"
    write_catalog(project, served.url)
    recipe = small_cpu_recipe()
    # A recipe pins vLLM; the catalog's install says which package that release is of (here the fake one).
    recipe["dependencies"] = [{"command": "uv pip install vllm==2.1"}]
    tree = recipes_tree(tmp_path / "tree", {"acme/Small": recipe})
    out = tmp_path / "out"
    where = ("--recipes", str(tree), "--out", str(out))
    locked = factory(project, "lock", *where)
    assert locked.returncode == 0, locked.stderr
    lock = json.loads((out / "lock" / "vllm.lock.json").read_text(encoding="utf-8"))
    assert lock["releases"]["acme/Small"]["default"]["cpu-pypi"]["vllm"] == "2.1", "the pin is kept"
    assert lock["sets"][f"{PACKAGE}-2.1-cpu-amd64-py3.11"]["missing"] == MISSING
    listed = factory(project, "list", *where)
    row = next(line for line in listed.stdout.splitlines() if "vllm2.1-cpu-default" in line)
    assert "not built (requirement not served)" in row and MISSING in row, row
