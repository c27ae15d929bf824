"""The output folder's scan (factory.generate.scan): GNU find's listing in its own process, or the same pass
in Python where find is missing or fails. Both must give the very same stamps: the memory compares a digest of
them, so a difference would only cost time (every file read back), but it would cost it on every run."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from factory.generate import scan as scanning
from factory.generate.scan import begin_scan, changed_ns, is_executable, is_regular, scan


def _tree(out: Path) -> None:
    """Every kind of entry a user (or a hostile recipe's past) may leave under the output roots."""
    (out / "images" / "a" / "b").mkdir(parents=True)
    (out / "images" / "a" / "Dockerfile").write_text("FROM x\n")
    script = out / "images" / "a" / "b" / "entrypoint.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    (out / "compose" / "c").mkdir(parents=True)
    (out / "compose" / "c" / "compose.yaml").write_bytes(b"")  # empty
    (out / "compose" / "c" / "link.yaml").symlink_to(out / "images" / "a" / "Dockerfile")
    (out / "compose" / "c" / "folder-link").symlink_to(out / "images")  # listed as itself, never followed
    (out / "compose" / "c" / "dangling").symlink_to(out / "nowhere")
    os.mkfifo(out / "compose" / "c" / "fifo")
    (out / "k8s" / "space and ü").mkdir(parents=True)
    (out / "k8s" / "space and ü" / "new\nline.yaml").write_text("kind: x\n")
    (out / "k8s" / os.fsdecode(b"not-utf8-\xff.yaml")).write_text("x")
    (out / "elsewhere.txt").write_text("not under an output root")


def test_find_and_python_give_the_same_stamps(tmp_path: Path) -> None:
    if shutil.which("find") is None:
        pytest.skip("no find on PATH: only the Python scan runs here")
    _tree(tmp_path)
    by_find = begin_scan(tmp_path)
    assert by_find._process is not None, "the scan did not start find"
    found = by_find.result().files
    here = scanning._scan_here(tmp_path, 0).files
    assert found == here
    assert "elsewhere.txt" not in found and "compose/c/folder-link" in found
    assert not any(path.startswith("compose/c/folder-link/") for path in found)
    assert "k8s/space and ü/new\nline.yaml" in found and os.fsdecode(b"k8s/not-utf8-\xff.yaml") in found
    assert is_executable(found["images/a/b/entrypoint.sh"]) and not is_executable(
        found["images/a/Dockerfile"]
    )
    assert is_regular(found["images/a/Dockerfile"]) and not is_regular(found["compose/c/link.yaml"])
    assert not is_regular(found["compose/c/fifo"])
    assert changed_ns(found["images/a/Dockerfile"]) == (tmp_path / "images/a/Dockerfile").stat().st_ctime_ns


def test_a_root_that_is_a_link_is_followed_as_python_follows_it(tmp_path: Path) -> None:
    real = tmp_path / "real"
    (real / "x").mkdir(parents=True)
    (real / "x" / "Dockerfile").write_text("FROM x\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "images").symlink_to(real)
    assert scan(out).files == scanning._scan_here(out, 0).files
    assert list(scan(out).files) == ["images/x/Dockerfile"]


def test_without_find_the_scan_runs_in_python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _tree(tmp_path)
    expected = scanning._scan_here(tmp_path, 0).files
    monkeypatch.setenv("PATH", str(tmp_path / "no-tools-here"))
    without = begin_scan(tmp_path)
    assert without._process is None
    assert without.result().files == expected


def test_a_find_that_fails_leaves_the_scan_to_python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A find that is not GNU's refuses -printf, and GNU's exits non-zero on a folder it cannot read: either
    way it exits non-zero, and the Python scan decides (it names such a folder in its error)."""
    _tree(tmp_path)
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "find").write_text("#!/bin/sh\necho 'find: unknown primary or operator' >&2\nexit 1\n")
    (tools / "find").chmod(0o755)
    expected = scanning._scan_here(tmp_path, 0).files
    monkeypatch.setenv("PATH", f"{tools}:{os.environ['PATH']}")
    failing = begin_scan(tmp_path)
    assert failing._process is not None
    assert failing.result().files == expected


def test_a_scan_nobody_waits_for_is_ended(tmp_path: Path) -> None:
    _tree(tmp_path)
    started = begin_scan(tmp_path)
    started.close()
    assert started._process is not None and started._process.returncode is not None
