"""Whether the engine's host can run another CPU platform's programs: QEMU registered with the kernel's
binfmt_misc, which BuildKit's RUN steps and `docker run --platform` rely on to build and check a linux/arm64
image on an amd64 host. Read from /proc on a local engine; a remote engine's host cannot be asked from here
(its build then says for itself)."""

from __future__ import annotations

import os
from pathlib import Path

BINFMT = Path("/proc/sys/fs/binfmt_misc")
# The binfmt_misc entry Debian's qemu-user-static registers for each platform's programs.
QEMU_ENTRIES = {"linux/arm64": "qemu-aarch64", "linux/amd64": "qemu-x86_64"}
SETUP = (
    "as root: `mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc`, install Debian's qemu-user-static"
    " and binfmt-support, `update-binfmts --enable {entry}` (testbench/up-tests does)"
)


def local_engine() -> bool:
    return os.environ.get("DOCKER_HOST", "unix://").startswith("unix://")


def missing(platform: str) -> str | None:
    """Why this host cannot run `platform`'s programs under emulation; None when it can (or when the engine
    is remote, and its host cannot be asked)."""
    if not local_engine():
        return None
    entry = QEMU_ENTRIES.get(platform)
    if entry is None:
        return f"no emulator is known for {platform} (known: {', '.join(sorted(QEMU_ENTRIES))})"
    path = BINFMT / entry
    setup = SETUP.format(entry=entry)
    if not path.is_file():
        return f"QEMU is not registered for {platform} ({path} is missing); {setup}"
    lines = path.read_text(encoding="utf-8").splitlines()
    if not lines or lines[0].strip() != "enabled":
        return f"QEMU's entry for {platform} is disabled ({path}); {setup}"
    flags = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("flags:")), "")
    if "F" not in flags:
        # Without F the kernel looks the emulator up in each container's own file system, where it is not.
        return (
            f"QEMU is registered for {platform} without the F flag ({path}: flags {flags or 'none'}); {setup}"
        )
    return None
