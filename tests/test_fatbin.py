"""Reading GPU code out of CUDA libraries (factory/validate/fatbin.py) and judging it by CUDA's rules, and the
ELF machine of every file of a folder (factory/validate/elf.py). The libraries of a real arm64 image are read
in tests/test_grace.py; here the rules, and the layout on files written to it (an ELF whose .nv_fatbin
section holds two containers), so each case is exact."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest

from factory.validate import elf
from factory.validate.fatbin import (
    ARCH_SPECIFIC,
    FAMILY_SPECIFIC,
    MAGIC,
    GpuCode,
    Listing,
    capability,
    fatbin_section,
)

GB200, GB300, GB10, H100 = (10, 0), (10, 3), (12, 1), (9, 0)


@pytest.mark.parametrize(
    ("code", "runs_on", "not_on"),
    [
        # a cubin runs on its major's later minors, never on another major
        ("sm_100", [GB200, GB300], [GB10, H100, (11, 0)]),
        ("sm_120", [(12, 0), GB10], [GB200, (13, 0)]),
        # arch-specific: only on exactly its capability
        ("sm_100a", [GB200], [GB300]),
        ("sm_103a", [GB300], [GB200]),
        ("sm_121a", [GB10], [(12, 0)]),
        # family: its major's later minors
        ("sm_100f", [GB200, GB300], [GB10]),
        # PTX compiles forward to any later capability, across majors
        ("compute_90", [H100, GB200, GB300, GB10], [(8, 9)]),
        ("compute_100a", [GB200], [GB300, GB10]),
    ],
)
def test_cuda_runs_code_by_its_binary_compatibility_rules(
    code: str, runs_on: list[tuple[int, int]], not_on: list[tuple[int, int]]
) -> None:
    parsed = GpuCode.parse(code)
    assert parsed.name == code
    assert all(parsed.runs_on(cc) for cc in runs_on), runs_on
    assert not any(parsed.runs_on(cc) for cc in not_on), not_on


def test_the_catalogs_gpu_architectures_are_compute_capabilities() -> None:
    assert capability("sm_100") == GB200 and capability("sm_103") == GB300 and capability("sm_121") == GB10
    with pytest.raises(ValueError, match="gfx942"):
        capability("gfx942")


def _entry(kind: int, arch: int, flags: int, payload: bytes) -> bytes:
    padded = payload + b"\0" * (-len(payload) % 8)
    header = struct.pack("<HHIQII", kind, 0x101, 64, len(padded), 0, 0)
    header += struct.pack("<HHI", 0, 0, arch) + struct.pack("<IIQQQ", 0, 0, flags | 0x11, 0, len(payload))
    return header + padded


def _container(*entries: bytes) -> bytes:
    body = b"".join(entries)
    return struct.pack("<IHHQ", MAGIC, 1, 16, len(body)) + body


def _elf(path: Path, sections: dict[bytes, bytes]) -> None:
    """A 64-bit little-endian ELF file holding only these sections (and the section names' table)."""
    names = b"\0" + b"".join(name + b"\0" for name in [*sections, b".shstrtab"])
    data, offsets = b"", []
    for content in [*sections.values(), names]:
        offsets.append(64 + len(data))
        data += content + b"\0" * (-len(content) % 8)
    table = 64 + len(data)
    headers = [b"\0" * 64]  # the null section
    for number, (name, content) in enumerate([*sections.items(), (b".shstrtab", names)]):
        headers.append(
            struct.pack(
                "<IIQQQQIIQQ", names.index(name + b"\0"), 1, 0, 0, offsets[number], len(content), 0, 0, 8, 0
            )
        )
    header = (
        b"\x7fELF\x02\x01\x01"
        + b"\0" * 9
        + struct.pack(
            "<HHIQQQIHHHHHH", 3, 183, 1, 0, 0, table, 0, 64, 0, 0, 64, len(headers), len(headers) - 1
        )
    )
    path.write_bytes(header + data + b"".join(headers))


def test_a_librarys_gpu_code_is_listed_per_container_from_its_nv_fatbin_section(tmp_path: Path) -> None:
    library = tmp_path / "libkernels.so"
    section = (
        _container(_entry(2, 90, ARCH_SPECIFIC, b"hopper gemm"), _entry(2, 100, FAMILY_SPECIFIC, b"x" * 13))
        + b"\0" * 8  # padding between containers
        + _container(_entry(2, 80, 0, b"ampere"), _entry(1, 80, 0, b".version 8.0 ptx"))
    )
    _elf(library, {b".text": b"\x90" * 16, b".nv_fatbin": section})
    found = fatbin_section(library)
    assert found == section
    listing = Listing.of(found)
    assert [sorted(code.name for code in codes) for codes in listing.containers] == [
        ["sm_100f", "sm_90a"],
        ["compute_80", "sm_80"],
    ]
    assert [code.name for code in listing.runnable(GB300)] == ["sm_100f", "compute_80"]
    assert listing.without(GB300) == 0, "the PTX of the second container compiles for 10.3"
    assert listing.without(GB10) == 1, "the first holds only Hopper and Blackwell-10.x cubins"
    assert listing.without((8, 0)) == 1


def test_files_without_gpu_code_have_no_listing(tmp_path: Path) -> None:
    plain = tmp_path / "plain.so"
    _elf(plain, {b".text": b"\x90" * 16})
    text = tmp_path / "notes.txt"
    text.write_text("not an ELF file\n")
    assert fatbin_section(plain) is None and fatbin_section(text) is None


def test_every_elf_file_under_a_folder_is_counted_by_machine(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "lib").mkdir(parents=True)
    _elf(venv / "lib" / "_arm.so", {b".text": b"\x90"})  # machine 183: aarch64
    cubin = bytearray((venv / "lib" / "_arm.so").read_bytes())
    cubin[18:20] = struct.pack("<H", 190)  # a standalone CUDA cubin (flashinfer-cubin ships thousands)
    (venv / "lib" / "kernel.cubin").write_bytes(bytes(cubin))
    (venv / "lib" / "module.py").write_text("print('hi')\n")
    (venv / "bin").mkdir()
    (venv / "bin" / "python").symlink_to("/usr/bin/python3")  # links are not followed
    arm = elf.tally(venv, "aarch64")
    assert arm.files == 3 and dict(arm.machines) == {"aarch64": 1, "cuda": 1} and arm.foreign == []
    shutil.copy("/bin/true", venv / "lib" / "true")  # this host's program: x86-64
    mixed = elf.tally(venv, "aarch64")
    assert mixed.foreign == ["x86_64 lib/true"]


def test_another_machines_files_in_a_target_triples_folder_are_counted_apart(tmp_path: Path) -> None:
    """nvidia-cutlass-dsl's x86_64 wheel ships lib/stubs/aarch64-unknown-linux-gnu/libcute_dsl_runtime.so, a
    stub its compiler links into programs for that target: code for cross-linking, never loaded here. It
    failed the H200 image's check until such folders were counted apart; the same file elsewhere fails."""
    venv = tmp_path / "venv"
    stubs = venv / "lib" / "stubs" / "aarch64-unknown-linux-gnu"
    stubs.mkdir(parents=True)
    _elf(stubs / "libcute_dsl_runtime.so", {b".text": b"\x90"})  # aarch64
    shutil.copy("/bin/true", venv / "lib" / "true")  # x86-64, the expected machine
    found = elf.tally(venv, "x86_64")
    assert found.foreign == [] and found.cross_target == 1 and found.machines["aarch64"] == 1
    shutil.copy(stubs / "libcute_dsl_runtime.so", venv / "lib" / "loaded.so")
    assert elf.tally(venv, "x86_64").foreign == ["aarch64 lib/loaded.so"]
