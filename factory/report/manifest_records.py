"""Records of test runs that checked Kubernetes manifests: the one format the tests write and `factory
matrix` reads (issue 29: the matrix said "checked" from a tree's path, not from any run).

A record names the deployment folders it checked by the digest of their files' bytes, the check, when,
the result and the run. The matrix calls a deployment's manifests checked only when a passed record holds
the digest of the files on disk now; bytes that changed since are "checked before it changed". Records are
kept in the reports folder (`<reports>/manifest-checks/`, beside validation's `validated/`), one file per
test and tree: the next run of the same test replaces it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from factory.base.files import write_text_atomic
from factory.base.models import Strict
from factory.base.yamlfile import load_json_model

FOLDER = "manifest-checks"  # under the reports folder
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


class ManifestCheckRecord(Strict):
    check: str  # what was checked, as the matrix's tooltip names it ("Kubernetes 1.30.0 to 1.37.0 strict")
    tree: str  # the recipes tree whose manifests these are (for people: the digests decide)
    # deployment folder under the output folder ("k8s/<model>/<hardware-variant>/<strategy>[/<n>-nodes]")
    # -> folder_digest of its files as checked
    folders: dict[str, str]
    started: datetime
    finished: datetime
    result: Literal["passed", "failed"]
    detail: str = ""  # a failure's first line
    run: str  # which run: CI's run, or the machine, process and commit the tests ran from
    test: str  # the test that checked (pytest's node id)

    def cite(self) -> str:
        """One line for a tooltip: the check, its result, when, and which run."""
        when = self.finished.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
        failed = f" ({self.detail})" if self.detail else ""
        return f"{self.check}: {self.result}{failed} {when}, {self.run}, {self.test}"


def folder_digest(files: Mapping[str, bytes]) -> str:
    """The digest of a deployment folder's files (file name -> bytes): any byte, name, added or missing
    file changes it."""
    summary = "".join(f"{name}\0{hashlib.sha256(data).hexdigest()}\n" for name, data in sorted(files.items()))
    return hashlib.sha256(summary.encode()).hexdigest()


def record_path(reports: Path, name: str) -> Path:
    return reports / FOLDER / f"{_UNSAFE.sub('-', name)}.json"


def write_record(reports: Path, name: str, record: ManifestCheckRecord) -> Path:
    path = record_path(reports, name)
    write_text_atomic(path, record.model_dump_json(indent=1) + "\n")
    return path


def read_records(reports: Path) -> list[ManifestCheckRecord]:
    """Every record in the reports folder, newest first (none: no test run recorded there)."""
    folder = reports / FOLDER
    if not folder.is_dir():
        return []
    hint = "the next run of the test that wrote it writes it again; or delete it"
    found = [
        load_json_model(ManifestCheckRecord, path, "manifest check record", hint)
        for path in sorted(folder.glob("*.json"))
    ]
    return sorted(found, key=lambda record: record.finished, reverse=True)
