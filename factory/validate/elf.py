"""The CPU every ELF file under a folder was built for (its e_machine), so that an image's venv can be checked
to hold only code its platform runs: an x86-64 library in an arm64 image fails only when it is loaded, on
the Grace machine. CUDA ELF files (standalone .cubin files, e_machine 190: flashinfer-cubin ships thousands)
are GPU code, counted apart. Standard library only: it runs inside the image (check_binaries.py)."""

from __future__ import annotations

import os
import re
import struct
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

MACHINES = {3: "i386", 40: "arm", 62: "x86_64", 183: "aarch64", 190: "cuda"}
GPU_CODE = "cuda"
# The machine a platform's programs are built for.
PLATFORM_MACHINES = {"linux/amd64": "x86_64", "linux/arm64": "aarch64"}
# A folder named by a target triple (aarch64-unknown-linux-gnu, x86_64-linux-gnu): files a toolchain links
# into programs for that target, shipped for cross-compiling and never loaded here (nvidia-cutlass-dsl ships
# lib/stubs/aarch64-unknown-linux-gnu/libcute_dsl_runtime.so in its x86_64 wheel). Counted apart.
TARGET_TRIPLE = re.compile(r"^(aarch64|x86_64|arm[a-z0-9]*|i[3-6]86|riscv64|ppc64le|s390x)-[a-z0-9_.-]+$")


def machine(path: Path) -> str | None:
    """The machine an ELF file is built for (x86_64, aarch64, cuda, or its number); None for other files."""
    with path.open("rb") as handle:
        header = handle.read(20)
    if len(header) < 20 or header[:4] != b"\x7fELF":
        return None
    (number,) = struct.unpack_from("<H" if header[5] == 1 else ">H", header, 18)
    return MACHINES.get(number, str(number))


@dataclass
class Tally:
    """Every ELF file under a folder by machine, and those of another machine than the one expected."""

    files: int = 0
    machines: Counter[str] = field(default_factory=Counter)
    foreign: list[str] = field(default_factory=list)  # relative paths, machine first: "x86_64 lib/x.so"
    cross_target: int = 0  # of another machine, under a folder named by that target's triple


def tally(root: Path, expected: str) -> Tally:
    """Each regular file under `root` (symbolic links aside) read for its ELF header."""
    found = Tally()
    for folder, _folders, names in os.walk(root):
        for name in names:
            path = Path(folder) / name
            if path.is_symlink() or not path.is_file():
                continue
            found.files += 1
            kind = machine(path)
            if kind is None:
                continue
            found.machines[kind] += 1
            if kind in (expected, GPU_CODE):
                continue
            relative = path.relative_to(root)
            if any(TARGET_TRIPLE.match(part) for part in relative.parent.parts):
                found.cross_target += 1
            else:
                found.foreign.append(f"{kind} {relative}")
    return found
