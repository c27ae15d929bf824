"""The GPU code a CUDA library embeds, listed without NVIDIA's tools (cuobjdump), from its ELF `.nv_fatbin`
section, and CUDA's rules for which code a GPU of a given compute capability runs.

Standard library only: `factory validate` runs it inside an image (as check_binaries.py does), where the
factory is not installed. The layout, read here from torch 2.11.0's aarch64 libtorch_cuda.so and checked
against the ptxas command line every cubin records (.note.nv.tkinfo): the section is a run of fatbin
containers, 8-byte aligned, each a 16-byte header (u32 magic 0xBA55ED50, u16 version, u16 header size, u64
size of the entries that follow) and entries of a 64-byte header each (u16 kind: 1 PTX, 2 ELF cubin; u16;
u32 header size; u64 payload size; u32 compressed size; u32; u16 minor, u16 major; u32 arch, 100 for sm_100;
u32 name offset; u32 name length; u64 flags; u64; u64 uncompressed size) and the payload. Flags: 0x100000 an
arch-specific target (sm_100a), 0x200000 a family target (sm_100f).

CUDA's rules (CUDA C Programming Guide, "Binary Compatibility" and "Feature Availability"): a cubin for
sm_XY runs on compute capability X.Z with Z >= Y (the same major); sm_XYf on the same family (X.Z, Z >= Y);
sm_XYa only on X.Y itself. PTX for compute_XY is compiled by the driver for any capability >= X.Y (XYa only
for X.Y, XYf for its family)."""

from __future__ import annotations

import mmap
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

MAGIC = 0xBA55ED50
KINDS = {1: "ptx", 2: "cubin"}
ARCH_SPECIFIC = 0x100000  # sm_XYa / compute_XYa
FAMILY_SPECIFIC = 0x200000  # sm_XYf / compute_XYf
_CONTAINER = struct.Struct("<IHHQ")
_ENTRY = struct.Struct("<HHIQ")  # kind, attributes, header size, payload size
_SECTION = struct.Struct("<IIQQQQIIQQ")  # ELF64 section header
_TARGET = re.compile(r"(?P<kind>sm|compute)_(?P<major>\d+)(?P<minor>\d)(?P<suffix>[af]?)")


@dataclass(frozen=True, order=True)
class GpuCode:
    """One piece of GPU code: a cubin (machine code for one architecture) or PTX (compiled by the driver)."""

    kind: str  # "cubin" or "ptx"
    major: int
    minor: int
    suffix: str = ""  # "a": arch-specific, "f": family, "": neither

    @property
    def name(self) -> str:
        prefix = "sm" if self.kind == "cubin" else "compute"
        return f"{prefix}_{self.major}{self.minor}{self.suffix}"

    @staticmethod
    def parse(name: str) -> GpuCode:
        """sm_100a -> a cubin for 10.0, arch-specific; compute_90 -> PTX for 9.0."""
        found = _TARGET.fullmatch(name)
        if found is None:
            raise ValueError(f"not a CUDA target: {name!r} (expected sm_XY or compute_XY, a or f after it)")
        kind = "cubin" if found["kind"] == "sm" else "ptx"
        return GpuCode(kind, int(found["major"]), int(found["minor"]), found["suffix"])

    def runs_on(self, capability: tuple[int, int]) -> bool:
        """Whether a GPU of this compute capability (10, 3) runs this code, by CUDA's rules."""
        major, minor = capability
        if self.suffix == "a":
            return (self.major, self.minor) == capability
        if self.kind == "cubin" or self.suffix == "f":
            return self.major == major and self.minor <= minor
        return (self.major, self.minor) <= capability  # PTX: compiled forward by the driver


def capability(gpu_arch: str) -> tuple[int, int]:
    """The compute capability of a GPU architecture as the catalog names it: sm_103 -> (10, 3)."""
    code = GpuCode.parse(gpu_arch)
    return code.major, code.minor


def fatbin_section(path: Path) -> bytes | None:
    """The `.nv_fatbin` section of a 64-bit little-endian ELF file; None for any other file or no section."""
    with path.open("rb") as handle:
        header = handle.read(64)
        if len(header) < 64 or header[:4] != b"\x7fELF" or header[4] != 2 or header[5] != 1:
            return None
        (table,) = struct.unpack_from("<Q", header, 0x28)
        size, count, names_index = struct.unpack_from("<HHH", header, 0x3A)
        if not table or not count or size != _SECTION.size or names_index >= count:
            return None
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            sections = [_SECTION.unpack_from(mapped, table + i * size) for i in range(count)]
            names = sections[names_index]
            for section in sections:
                start = names[4] + section[0]
                if mapped[start : mapped.find(b"\0", start)] == b".nv_fatbin":
                    return bytes(mapped[section[4] : section[4] + section[5]])
    return None


def entries(section: bytes) -> Iterator[tuple[int, GpuCode]]:
    """(container number, code) of every entry of every container in a `.nv_fatbin` section."""
    position, container = 0, -1
    while position + _CONTAINER.size <= len(section):
        magic, _version, header, size = _CONTAINER.unpack_from(section, position)
        if magic != MAGIC:
            position += 8  # containers are 8-byte aligned; padding lies between them
            continue
        container += 1
        entry, end = position + header, position + header + size
        while entry + 48 <= end:
            kind, _attributes, entry_header, payload = _ENTRY.unpack_from(section, entry)
            (arch,) = struct.unpack_from("<I", section, entry + 28)
            (flags,) = struct.unpack_from("<Q", section, entry + 40)
            suffix = "a" if flags & ARCH_SPECIFIC else "f" if flags & FAMILY_SPECIFIC else ""
            if kind in KINDS:
                yield container, GpuCode(KINDS[kind], arch // 10, arch % 10, suffix)
            entry += entry_header + payload
        position = end


@dataclass(frozen=True)
class Listing:
    """The GPU code one library embeds, per container (a container holds one compiled unit's kernels)."""

    containers: tuple[frozenset[GpuCode], ...]

    @staticmethod
    def of(section: bytes) -> Listing:
        found: dict[int, set[GpuCode]] = {}
        for container, code in entries(section):
            found.setdefault(container, set()).add(code)
        return Listing(tuple(frozenset(found[number]) for number in sorted(found)))

    @property
    def codes(self) -> list[GpuCode]:
        return sorted({code for container in self.containers for code in container})

    def runnable(self, capability: tuple[int, int]) -> list[GpuCode]:
        """The codes a GPU of this capability runs."""
        return [code for code in self.codes if code.runs_on(capability)]

    def without(self, capability: tuple[int, int]) -> int:
        """How many containers hold nothing a GPU of this capability runs (their kernels cannot run on it)."""
        return sum(not any(code.runs_on(capability) for code in codes) for codes in self.containers)
