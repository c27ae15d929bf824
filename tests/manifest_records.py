"""How the tests that check Kubernetes manifests record what they checked, for `factory matrix`
(the format: factory/report/manifest_records.py).

A test names the deployment folders it checks (by the digest of their files as it read them) and its
check, and runs its assertions inside `recording(...)`: the record says passed, or failed with the first
line of the failure, and is written either way. Records go to the reports folder the matrix reads by
default (`reports/` at the project's root), or to FACTORY_REPORTS where that is set.
"""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Literal

import pytest

from factory.base.outputs import OutputFile
from factory.report.manifest_records import ManifestCheckRecord, folder_digest, write_record
from tests.conftest import ROOT


def reports_folder() -> Path:
    return Path(os.environ.get("FACTORY_REPORTS") or ROOT / "reports")


@cache
def this_run() -> str:
    """Which run: CI's (GitHub Actions names it), else this machine and process; and the commit tested."""
    git = ["git", "-C", str(ROOT)]
    commit = subprocess.run(
        [*git, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    changed = subprocess.run(
        [*git, "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    tested = f"commit {commit or 'unknown'}{' with local changes' if changed else ''}"
    if os.environ.get("GITHUB_RUN_ID"):
        attempt = os.environ.get("GITHUB_RUN_ATTEMPT", "1")
        return f"GitHub Actions run {os.environ['GITHUB_RUN_ID']} attempt {attempt}, {tested}"
    return f"pytest on {socket.gethostname()} (pid {os.getpid()}), {tested}"


def on_disk(out: Path, folders: Iterable[Path]) -> dict[str, str]:
    """Deployment folders (absolute, under `out`) -> the digest of the files in each, as read now."""
    return {
        folder.relative_to(out).as_posix(): folder_digest(
            {path.name: path.read_bytes() for path in folder.iterdir() if path.is_file()}
        )
        for folder in folders
    }


def as_generated(files: Iterable[OutputFile]) -> dict[str, str]:
    """Deployment folders (relative to the output folder) -> the digest of the files generate writes there."""
    by_folder: dict[str, dict[str, bytes]] = {}
    for file in files:
        by_folder.setdefault(file.path.parent.as_posix(), {})[file.path.name] = file.content
    return {folder: folder_digest(contents) for folder, contents in by_folder.items()}


@contextmanager
def recording(
    test: str,
    check: str,
    folders: Mapping[str, str],
    tree: str = "recipes",
    reports: Path | None = None,
) -> Iterator[None]:
    """Run the checks inside; write the record after, passed or failed (the failure propagates unchanged;
    a skipped or interrupted test records nothing). `test` is the pytest node id (request.node.nodeid);
    `tree` the recipes tree the manifests come from. The record's file is named by the test and the tree's
    folder name, so the next run of the same test on the same tree replaces it."""
    started = datetime.now(UTC)
    try:
        yield
    except (pytest.skip.Exception, KeyboardInterrupt):
        raise
    except BaseException as exc:  # an assertion, pytest.fail, or an error in the check itself
        lines = str(exc).strip().splitlines() or [type(exc).__name__]
        _write(test, check, folders, tree, reports, started, "failed", lines[0][:200])
        raise
    _write(test, check, folders, tree, reports, started, "passed", "")


def _write(
    test: str,
    check: str,
    folders: Mapping[str, str],
    tree: str,
    reports: Path | None,
    started: datetime,
    result: Literal["passed", "failed"],
    detail: str,
) -> None:
    record = ManifestCheckRecord(
        check=check,
        tree=tree,
        folders=dict(folders),
        started=started,
        finished=datetime.now(UTC),
        result=result,
        detail=detail,
        run=this_run(),
        test=test,
    )
    write_record(reports or reports_folder(), f"{test.rsplit('::', 1)[-1]}-{Path(tree).name}", record)
