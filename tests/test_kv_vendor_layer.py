"""Mooncake on AMD's vendor images: the layer is locked on its own per vendor-image install, platform and
Python (the wheel and everything it needs, with hashes), and the build fits it onto the vendor's environment
with factory/image_files/fit_layer.py: it installs only what the image lacks, keeps every package the image
holds at the image's version, and fails in one line naming a package that does not fit.

No ROCm image can be pulled or run here: the layer's script runs in a real Python environment standing in
for the vendor's (a venv with a package the layer also pins), and the generated Dockerfiles are read as
files."""

from __future__ import annotations

import json
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from factory.lockfile.model import canonical_name, requirement_blocks
from factory.lockfile.store import set_text
from factory.project import Project
from tests.conftest import ROOT

FIT = ROOT / "factory" / "image_files" / "fit_layer.py"
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"
HASH = "    --hash=sha256:" + "0" * 64


@pytest.fixture(scope="module")
def vendor_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Python environment standing in for a vendor image's: pip and setuptools, at the versions it holds."""
    where = tmp_path_factory.mktemp("vendor") / "env"
    venv.EnvBuilder(with_pip=True).create(where)
    return where / "bin" / "python"


def held(python: Path) -> dict[str, str]:
    out = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m, json; "
         "print(json.dumps({d.metadata['Name'].lower(): d.version for d in m.distributions()}))"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    found: dict[str, str] = json.loads(out.stdout)
    return found


def fit(python: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(python), str(FIT), *args], capture_output=True, text=True, timeout=120)


def install(python: Path, name: str, requires: str) -> None:
    """Install a distribution `name` 1.0 needing `requires`, as an installer leaves it: its .dist-info in the
    environment's site-packages (what importlib.metadata, and so fit_layer.py, reads)."""
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    info = Path(site) / f"{name}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\nRequires-Dist: {requires}\n"
    )


def test_the_layer_prints_only_what_the_image_lacks_and_keeps_what_it_holds(
    vendor_env: Path, tmp_path: Path
) -> None:
    versions = held(vendor_env)
    layer = tmp_path / "mooncake.txt"
    # The layer pins pip at another version than the image's, and a package the image lacks.
    layer.write_text(f"pip==1.0 \\\n{HASH}\n    # via x\nsix==1.17.0 \\\n{HASH}\n")
    record = tmp_path / "record.json"
    missing = fit(vendor_env, "missing", str(layer), "--python", PYTHON, "--record", str(record))
    assert missing.returncode == 0, missing.stderr
    assert missing.stdout.startswith("six==1.17.0") and "pip==" not in missing.stdout, missing.stdout
    assert HASH.strip() in missing.stdout and "# via" not in missing.stdout
    assert json.loads(record.read_text())["pip"] == versions["pip"], "every package the image holds recorded"


def test_a_layer_locked_for_another_python_stops_the_build_in_one_line(
    vendor_env: Path, tmp_path: Path
) -> None:
    layer = tmp_path / "mooncake.txt"
    layer.write_text(f"six==1.17.0 \\\n{HASH}\n")
    refused = fit(vendor_env, "missing", str(layer), "--python", "3.99", "--record", str(tmp_path / "r.json"))
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines() == [
        f"fit_layer: the image's python3 is Python {PYTHON}; the layer {layer} is locked for Python 3.99"
    ]


def test_the_check_passes_a_root_whose_needs_the_image_meets_and_names_one_it_does_not(
    tmp_path: Path,
) -> None:
    where = tmp_path / "env"
    venv.EnvBuilder(with_pip=True).create(where)
    python = where / "bin" / "python"
    layer, record = tmp_path / "mooncake.txt", tmp_path / "record.json"
    layer.write_text(f"fits==1.0 \\\n{HASH}\n")
    assert fit(python, "missing", str(layer), "--python", PYTHON, "--record", str(record)).returncode == 0
    not_yet = fit(python, "check", str(layer), "--root", "fits", "--record", str(record))
    assert not_yet.returncode == 1 and "fits is not installed" in not_yet.stderr, not_yet.stderr

    install(python, "fits", "pip>=1")
    checked = fit(python, "check", str(layer), "--root", "fits", "--record", str(record))
    assert checked.returncode == 0, checked.stderr
    assert "packages added" in checked.stdout and "fits" in checked.stdout

    # A root that needs another pip than the image's: the image's is kept, so the build stops, naming it.
    install(python, "misfit", "pip<1")
    refused = fit(python, "check", str(layer), "--root", "misfit", "--record", str(record))
    assert refused.returncode == 1
    [line] = refused.stderr.strip().splitlines()
    assert line.startswith("fit_layer: pip ") and "does not satisfy it: misfit 1.0 requires pip<1" in line


def test_a_vendor_package_the_layer_changed_is_named(vendor_env: Path, tmp_path: Path) -> None:
    record = tmp_path / "record.json"
    record.write_text(json.dumps({**held(vendor_env), "pip": "0.1"}))
    layer = tmp_path / "mooncake.txt"
    layer.write_text(f"pip==1.0 \\\n{HASH}\n")
    refused = fit(vendor_env, "check", str(layer), "--root", "pip", "--record", str(record))
    assert refused.returncode == 1
    assert "pip 0.1 of the image became" in refused.stderr and "changed a vendor package" in refused.stderr


def test_vendor_image_layers_are_locked_on_their_own_with_the_wheel_and_hashes(project: Project) -> None:
    assert project.lock is not None
    vendor = {key: layer for key, layer in project.lock.mooncake.items() if layer.vendor_image}
    assert vendor, "a Mooncake layer for the ROCm vendor images is in the project's lock"
    for key, layer in vendor.items():
        assert layer.on.startswith("rocm-vendor-image-") and layer.on not in project.lock.sets, key
        assert layer.requirements
        blocks = dict(requirement_blocks(set_text(project.lock_path, layer.requirements)))
        names = {canonical_name(name) for name in blocks}
        assert canonical_name(layer.requirement.split(">")[0]) in names
        assert len(names) > 1, (
            "the wheel and what it needs: nothing is taken from an image it was not checked on"
        )
        assert all("--hash=sha256:" in block for block in blocks.values())


def test_rocm_vendor_kv_images_of_the_corpus_carry_the_fitted_layer(upstream_generated: Path) -> None:
    dockerfiles = [
        path
        for path in sorted((upstream_generated / "images").glob("*/*-mi3*-mooncake/Dockerfile"))
        if "on the vendor's image" in path.read_text()
    ]
    assert dockerfiles, "the corpus has KV-store images on AMD's vendor images"
    for dockerfile in dockerfiles:
        text = dockerfile.read_text()
        folder = dockerfile.parent
        assert "fit_layer.py missing /tmp/requirements/mooncake.txt --python" in text, dockerfile
        assert "--require-hashes --no-deps" in text and "fit_layer.py check" in text, dockerfile
        copied = (folder / "fit_layer.py").read_text().splitlines()
        assert copied[1].startswith("# DO NOT EDIT: copied by `factory generate`")
        assert copied[:1] + copied[2:] == FIT.read_text().splitlines(), "the script as the factory ships it"
        layer = (folder / "requirements" / "mooncake.txt").read_text()
        assert "mooncake-transfer-engine" in layer and "--hash=sha256:" in layer, folder
