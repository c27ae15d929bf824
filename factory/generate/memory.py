"""What `factory generate` remembers between runs, so that a recipe whose inputs did not change is not
planned and rendered again: per recipe, the digest of everything its files are made from, and what it
generated (each file's digest and stamp, its bake targets, its counts and messages).

The digest covers the recipe file, the tree's shared files (taxonomy, strategies, KV stores: every file the
loader read, as it read it), the catalog, the lock and its sets, the router's lock, the factory's own code and
templates, the command's options, and any model files the recipe ships: output is a pure function of these.
A remembered recipe is trusted only while every file it generated is still on disk with the digest it was
written with; otherwise it is planned again. The memory lives in the
output folder (.factory-cache/, never committed); deleting it only costs time.

Reading back every generated file to hash it was most of an unchanged run (45,000 files on the upstream
corpus), so the files' stamps are remembered too, as git's index does (inode, size, modification and change
time: factory.generate.scan), and trusted in place of the bytes. The change time cannot be set by a user (a
write, a rename or a chmod moves it), and a stamp whose change time is within RACY_NS of the scan that took it
is never remembered: file times come from a coarse clock, so a file rewritten within the same tick, at the
same size, could keep its stamp. A recipe remembers one digest of all its files' stamps: an unchanged run
compares 111 digests, not 170,000 stamps, and the memory holds no stamp per file (it was half its size).
A recipe whose digest differs has each of its files read back and hashed.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

import factory
from factory.base.files import write_text_atomic
from factory.generate.scan import Scan, Stamp, changed_ns, is_executable, is_regular
from factory.lockfile.published import record_file
from factory.project import Project
from factory.recipes import bundled
from factory.recipes.loader import LoadedRecipe
from factory.render.bake import BakeTarget

CACHE = Path(".factory-cache") / "generate.json"
RACY_NS = 100_000_000  # 100 ms: well above the file system clock's tick (1-10 ms on Linux)
CHUNK = 2**20  # a file read back to hash it is read in chunks of this: it may be a bundled model file


@dataclass(frozen=True)
class Remembered:
    inputs: str  # the digest of what the recipe's files were made from
    files: dict[str, str]  # path -> "x" (executable) or "-", then the sha256 of its content: see written_as
    bake: list[BakeTarget]
    images: int
    deployments: int
    skipped: list[str]  # one line per combination left out, with why
    findings: dict[str, list[str]]  # preflight finding -> the images it concerns
    stamps: str = ""  # the digest of its files' stamps when last seen intact; "" when one was too fresh


def digest_of(chunks: Iterable[bytes]) -> str:
    """The sha256 of a file's bytes, given in chunks (a bundled model file is never held whole)."""
    digest = hashlib.sha256()
    for chunk in chunks:
        digest.update(chunk)
    return digest.hexdigest()


def shared_inputs(project: Project, nodes: int | None) -> str:
    """The digest of what every recipe's output depends on besides the recipe itself: the factory's code and
    templates, the catalog, the tree's shared files as the loader read them (taxonomy, strategies, KV stores:
    each by its place in the tree and the digest of the very bytes read), the lock with its sets and the
    router's lock, and the options. A file added, changed or removed changes it."""
    digest = hashlib.sha256(f"nodes={nodes}\0".encode())
    _framed(digest, "(the factory's code)", code_digest())
    files = [
        project.catalog_path,
        project.catalog_path.with_name("deviations.yaml"),
        project.lock_path,  # images install what the lock says: its sets are inputs too
        *sorted((project.lock_path.parent / "sets").glob("*.txt")),
        *sorted((project.lock_path.parent / "router").glob("*")),  # pd_cluster files name the router's image
        record_file(project.lock_path),  # compose files run a published image by its digest
    ]
    for path in files:
        if path.is_file():
            _framed(digest, path.as_posix(), hashlib.sha256(path.read_bytes()).hexdigest())
    for path, read in sorted(project.tree.inputs.items()):
        _framed(digest, project.relative(path), read)
    return digest.hexdigest()


@functools.cache
def code_digest() -> str:
    """The digest of the factory's code and templates, as this process runs them: read once per process
    (its modules are imported once; hashing the package's files cost every in-process run 50 ms)."""
    digest = hashlib.sha256()
    package = Path(factory.__file__).parent
    for path in sorted(p for p in package.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        _framed(digest, path.relative_to(package).as_posix(), hashlib.sha256(path.read_bytes()).hexdigest())
    return digest.hexdigest()


def _framed(digest: hashlib._Hash, name: str, content: str) -> None:
    """One named part of a digest, its lengths first: no two different sets of parts digest alike."""
    for part in (name.encode(), content.encode()):
        digest.update(len(part).to_bytes(8, "big") + part)


def recipe_inputs(project: Project, loaded: LoadedRecipe, shared: str) -> str:
    """The digest of one recipe's output's inputs: the shared ones, the recipe file as it was read, and its
    bundled model files."""
    digest = hashlib.sha256(shared.encode())
    _framed(digest, project.relative(loaded.path), loaded.digest)
    bundled.add_to_digest(digest, loaded.bundled_model_dir)
    return digest.hexdigest()


def written_as(digest: str, executable: bool) -> str:
    """How the memory records one generated file: its mode's executable bit and its content's digest."""
    return ("x" if executable else "-") + digest


def stamps_digest(stamps: list[Stamp]) -> str:
    """One digest of a recipe's files' stamps, in the order of its files (a stamp holds no newline)."""
    return hashlib.sha256("\n".join(stamps).encode()).hexdigest()


def settled(stamps: list[Stamp | None], present: Scan) -> str:
    """The digest to remember of `stamps` as the scan found them: "" when a file is missing, or changed too
    close to the scan (its stamp could stay the same through another write)."""
    trusted_before = present.started_ns - RACY_NS
    if any(stamp is None or changed_ns(stamp) >= trusted_before for stamp in stamps):
        return ""
    return stamps_digest(stamps)  # type: ignore[arg-type]  # no None: checked just above


def stamped(entry: Remembered, present: Scan) -> Remembered:
    """A recipe just planned, whose files were all on disk as generated (none written): the stamps the scan
    took of them. (A file that changed after the scan has another stamp by the next run, which reads it.)"""
    return replace(entry, stamps=settled(list(map(present.files.get, entry.files)), present))


def intact(out: Path, entry: Remembered, present: Scan) -> Remembered | None:
    """The entry, with its stamps brought up to date, when every file the recipe generated is on disk as it
    was written; None otherwise. `present` is the output folder as scanned at the start of the run: one
    pass over the folders serves every recipe and the removal of files no longer generated."""
    stamps = list(map(present.files.get, entry.files))  # in C: an unchanged recipe costs no Python per file
    if entry.stamps and None not in stamps and stamps_digest(stamps) == entry.stamps:  # type: ignore[arg-type]
        return entry
    base = str(out)
    for (path, recorded), stamp in zip(entry.files.items(), stamps, strict=True):
        if stamp is None or not is_regular(stamp):  # gone, or a link or folder in its place
            return None
        if is_executable(stamp) != (recorded[0] == "x"):
            return None
        try:
            with open(os.path.join(base, path), "rb") as handle:
                if digest_of(iter(lambda: handle.read(CHUNK), b"")) != recorded[1:]:
                    return None
        except OSError:
            return None
    # Every file read back and found as written: from the scan's stamps, they are trusted next run.
    return replace(entry, stamps=settled(stamps, present))


def read_memory(out: Path) -> dict[str, Remembered]:
    try:
        data = json.loads((out / CACHE).read_text(encoding="utf-8"))
        memory = {
            recipe_id: Remembered(
                inputs=entry["inputs"],
                files=entry["files"],
                bake=[BakeTarget(**{**target, "tags": tuple(target["tags"])}) for target in entry["bake"]],
                images=entry["images"],
                deployments=entry["deployments"],
                skipped=list(entry["skipped"]),
                findings={k: list(v) for k, v in entry["findings"].items()},
                stamps=entry.get("stamps", ""),
            )
            for recipe_id, entry in data["recipes"].items()
        }
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}
    # Used as read (converting 170,000 entries cost a third of an unchanged run): checked to be text instead.
    # (JSON's keys are text already; map(type) and `in` run in C: a Python loop over them cost 0.2 s.)
    for entry in memory.values():
        values = entry.files.values() if isinstance(entry.files, dict) else None
        if (
            values is None
            or not set(map(type, values)) <= {str}
            or "" in values
            or type(entry.stamps) is not str
        ):
            return {}
    return memory


def write_memory(out: Path, entries: dict[str, Remembered]) -> None:
    body = {
        "comment": "written by `factory generate` to skip unchanged recipes; safe to delete",
        "recipes": {recipe_id: _as_data(entry) for recipe_id, entry in sorted(entries.items())},
    }
    if (out / CACHE.parent).is_symlink():  # a cache, safe to go without: never written through a link
        return
    write_text_atomic(out / CACHE, json.dumps(body, separators=(",", ":")))


def _as_data(entry: Remembered) -> dict[str, object]:
    return {
        "inputs": entry.inputs,
        "files": entry.files,
        "bake": [target.as_data() for target in entry.bake],
        "images": entry.images,
        "deployments": entry.deployments,
        "skipped": entry.skipped,
        "findings": entry.findings,
        "stamps": entry.stamps,
    }
