"""What `generate` trusts between runs: a generated file's stamp, never a stamp a user could have kept.

An unchanged run no longer reads every generated file back (factory.generate.memory: the stamps git's index
keeps); these tests hold the two sides of that bargain: an unchanged run reads none of the files, and every
edit a user can make, even one that keeps the size and sets the modification time back, is still found.
"""

from __future__ import annotations

import builtins
import dataclasses
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from factory.generate.memory import RACY_NS, read_memory
from factory.generate.run import Generated, generate, indented_json
from factory.project import load_project
from factory.render.bake import BakeTarget
from tests.conftest import run_factory


def _settled() -> None:
    """Wait out the window in which a fresh stamp is not trusted (file times come from a coarse clock)."""
    time.sleep(RACY_NS / 1e9 + 0.05)


def _generate_reading_back(scratch: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Generated, list[str]]:
    """An in-process `generate` of `scratch`, and which of the files the memory remembers it opened."""
    remembered = {path for entry in read_memory(scratch).values() for path in entry.files}
    assert remembered, "generate remembered no files"
    opened: list[str] = []
    real_open = builtins.open

    def spying_open(file: Any, *args: Any, **kwargs: Any) -> Any:
        opened.append(os.fspath(file))
        return real_open(file, *args, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(builtins, "open", spying_open)
        result = generate(load_project(scratch))
    return result, sorted(p for p in opened if os.path.relpath(p, scratch) in remembered)


def test_an_unchanged_run_reads_no_generated_file_back(
    scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert run_factory(scratch, "generate").returncode == 0  # the memory, with every file's stamp
    _settled()
    result, read_back = _generate_reading_back(scratch, monkeypatch)
    assert result.planned == 0 and result.written == 0
    assert read_back == [], f"an unchanged run read {len(read_back)} generated files, e.g. {read_back[:3]}"


def test_files_read_back_once_as_too_fresh_are_trusted_on_the_next_run(
    scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file stamped within RACY_NS of its writing is read back by the next run; once found as written, it
    is trusted from then on. (Before, the stamps were kept with their old time, so on the corpus 94,000 of
    172,000 files were read back by every unchanged run, forever.)"""
    for root in ("images", "compose", "k8s"):
        shutil.rmtree(scratch / root)  # so that generate writes every file, just before it stamps them
    generate(load_project(scratch))
    _settled()
    again = generate(load_project(scratch))  # stamped too soon after the writing: read back, found as written
    assert again.planned == 0 and again.written == 0
    _, read_back = _generate_reading_back(scratch, monkeypatch)
    assert read_back == [], f"{len(read_back)} files read back again, e.g. {read_back[:3]}"


def test_a_link_in_place_of_a_generated_file_is_replaced_by_the_file(scratch: Path) -> None:
    """A link to a copy of the very bytes is not the generated file: the next run writes the file again."""
    generate(load_project(scratch))
    _settled()
    compose = next((scratch / "compose").rglob("compose.yaml"))
    copy = scratch / "elsewhere.yaml"
    copy.write_bytes(compose.read_bytes())
    compose.unlink()
    compose.symlink_to(copy)
    again = generate(load_project(scratch))
    assert again.planned == 1, "the recipe whose file became a link is planned again"
    assert not compose.is_symlink() and compose.read_bytes() == copy.read_bytes()


def test_an_edit_that_keeps_size_and_modification_time_is_still_found(scratch: Path) -> None:
    assert run_factory(scratch, "generate").returncode == 0
    _settled()
    compose = next((scratch / "compose").rglob("compose.yaml"))
    before = compose.read_bytes()
    status = compose.stat()
    edited = before.replace(b"a", b"b", 1)
    assert edited != before and len(edited) == len(before)
    compose.write_bytes(edited)
    os.utime(compose, ns=(status.st_atime_ns, status.st_mtime_ns))  # as `touch -r` would set it back
    assert compose.stat().st_mtime_ns == status.st_mtime_ns
    check = run_factory(scratch, "generate", "--check")
    assert check.returncode == 1 and f"changed: {compose.relative_to(scratch).as_posix()}" in check.stderr
    assert run_factory(scratch, "generate").returncode == 0
    assert compose.read_bytes() == before, "generate did not restore the edited file"


def test_a_file_replaced_by_a_copy_with_the_old_times_is_still_found(scratch: Path) -> None:
    """A copy made with `cp -p` keeps the times; it is a new inode with a new change time."""
    assert run_factory(scratch, "generate").returncode == 0
    _settled()
    manifest = next((scratch / "k8s").rglob("manifest.yaml"))
    before = manifest.read_bytes()
    status = manifest.stat()
    manifest.unlink()
    manifest.write_bytes(before.replace(b"vllm", b"VLLM", 1))
    os.utime(manifest, ns=(status.st_atime_ns, status.st_mtime_ns))
    assert run_factory(scratch, "generate").returncode == 0
    assert manifest.read_bytes() == before


@pytest.mark.parametrize(
    "value",
    [
        {
            "comment": "x",
            "recipes": {"a/b": {"files": ["images/a", 'k8s/ü\n"q"'], "bake": [{"tags": ["t"], "n": 1}]}},
        },
        {"empty": {}, "none": [], "nested": [[], {}, [1, 2.5, None, True]], "é": "\u2028"},
        [],
        {},
        "text",
    ],
)
def test_the_manifest_is_written_as_json_dumps_writes_it(value: object) -> None:
    """generate writes its manifest with its own encoder (json's with `indent` was a tenth of an unchanged
    run): the same bytes as json.dumps(indent=1), or the committed manifest would change with the code."""
    assert indented_json(value) == json.dumps(value, indent=1)


def test_a_bake_target_as_data_is_what_asdict_gives() -> None:
    """BakeTarget.as_data is written out field by field (asdict's deep copy cost 0.1 s a run): a field
    added to the target must not go missing from the manifest and the memory."""
    target = BakeTarget("n", "images/a/b", "linux/arm64", ("r:1", "r@sha256:0"), "gb200")
    assert json.dumps(target.as_data()) == json.dumps(dataclasses.asdict(target))
