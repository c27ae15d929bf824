"""The package index, as `factory lock` asks it: which releases a package has (pip), and the complete
hash-locked set an install needs (uv's resolver; no wheel is downloaded to resolve). Both use the index
this machine is configured for (pip.conf, PIP_*/UV_* settings): the factory names no index host itself.
Only `factory lock` talks to the index; `generate` and `generate --check` never do."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from packaging.version import InvalidVersion, Version

from factory.errors import FactoryError

_AVAILABLE = re.compile(r"^Available versions:\s*(?P<versions>.+)$", re.MULTILINE)
PLATFORMS = {"linux/amd64": "x86_64-manylinux_2_28", "linux/arm64": "aarch64-manylinux_2_28"}


class IndexUnavailable(FactoryError):
    """The package index could not answer (unreachable, or nothing satisfies the request)."""


def releases(package: str) -> list[Version]:
    """Every final release of `package` on the index, newest first (pre-releases and dev builds aside)."""
    result = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", package, "--disable-pip-version-check"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    found = _AVAILABLE.search(result.stdout)
    if result.returncode != 0 or not found:
        raise IndexUnavailable(
            f"the package index did not list the releases of {package}: {result.stderr.strip()[-300:]}"
        )
    versions = []
    for text in found["versions"].split(","):
        try:
            version = Version(text.strip())
        except InvalidVersion:
            continue
        if not version.is_prerelease and not version.is_devrelease:
            versions.append(version)
    return sorted(versions, reverse=True)


def uv_binary() -> str:
    found = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
    if not Path(found).is_file():
        raise FactoryError("uv is missing\n  hint: testbench/up installs it (PyPI package uv)")
    return found


def compile_set(
    requirements: list[str],
    platform: str,
    python: str,
    exclude: list[str],
    find_links: Path | None,
    extra_index_url: str | None,
) -> str:
    """`uv pip compile --generate-hashes` of the requirements for one platform and Python: the text of a
    requirements file that pins every package with its hashes (the packages in `exclude` left out)."""
    with tempfile.TemporaryDirectory(prefix="factory-lock-") as folder:
        source = Path(folder) / "requirements.in"
        source.write_text("\n".join(requirements) + "\n", encoding="utf-8")
        command = [
            uv_binary(), "pip", "compile", source.name, "--generate-hashes", "--quiet",
            "--python-version", python, "--python-platform", PLATFORMS[platform],
            "--custom-compile-command", "factory lock",
        ]  # fmt: skip
        for name in exclude:
            command += ["--no-emit-package", name]
        if find_links:
            command += ["--find-links", str(find_links)]
        if extra_index_url:
            command += ["--extra-index-url", extra_index_url]
        # Run in the folder, so the file's annotations name `requirements.in`, not a temporary path.
        result = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False, cwd=folder)
    if result.returncode != 0:
        why = " ".join(result.stderr.strip().splitlines()[-6:])[-600:]
        raise IndexUnavailable(
            f"uv could not resolve {' '.join(requirements)} for {platform}, Python {python}: {why}"
        )
    return result.stdout
