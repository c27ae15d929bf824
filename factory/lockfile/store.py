"""Where the lock lives and how it is read and written: the lock file, and beside it the locked sets."""

from __future__ import annotations

import hashlib
import json
from functools import cache
from pathlib import Path

from factory.base.errors import InputError
from factory.base.files import write_text_atomic
from factory.base.yamlfile import load_json_model
from factory.lockfile.model import Lock
from factory.recipes.loader import recipe_paths

LOCK_NAME = "vllm.lock.json"
SETS = "sets"


def inputs_digest(tree: Path, catalog: Path) -> str:
    """The digest of what the lock was made from: every recipe, the taxonomy, the KV stores (their install
    lines and min_vllm_version decide the Mooncake layers) and the catalog's files. Strategies are not in
    it: which releases and sets are locked does not depend on them."""
    digest = hashlib.sha256()
    paths = [
        tree / "taxonomy.yaml",
        *sorted(
            path for path in (tree / "kv_store").glob("*.yaml") if path.is_file() and not path.is_symlink()
        ),
        # Only what the loader reads: a link, a folder or a dangling link named .yaml is a bad recipe's
        # problem, not a file to hash (reading one was a traceback, or a read outside the tree).
        *sorted(path for path in recipe_paths(tree) if path.is_file() and not path.is_symlink()),
        *sorted(catalog.glob("*.yaml")),
    ]
    for path in paths:
        name = path.relative_to(tree if path.is_relative_to(tree) else catalog).as_posix()
        try:
            content = path.read_bytes()
        except OSError:  # an unreadable recipe: the loader reports it as that recipe's problem
            if path.is_relative_to(tree / "models"):
                continue
            raise
        digest.update(name.encode() + b"\0" + content)
    return digest.hexdigest()


def read_lock(path: Path) -> Lock | None:
    if not path.is_file():
        return None
    return load_json_model(Lock, path, "lock", hint="run `factory lock`")


def write_lock(path: Path, lock: Lock, sets: dict[str, str]) -> None:
    """The lock file and its set files; set files no longer referenced are removed."""
    folder = path.parent / SETS
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in sets.items():
        target = folder / name
        if not target.is_file() or target.read_text(encoding="utf-8") != text:
            write_text_atomic(target, text)
    referenced = {Path(s.requirements).name for s in lock.sets.values() if s.requirements} | set(sets)
    for stale in folder.glob("*.txt"):
        if stale.name not in referenced:
            stale.unlink()
    write_text_atomic(path, json.dumps(lock.model_dump(exclude_none=True), indent=1, sort_keys=False) + "\n")


@cache
def set_text(lock_path: Path, requirements: str, digest: str | None = None) -> str:
    """A locked set's file (read once per run: a corpus has thousands of images on a few dozen sets),
    refused when it is not what the lock recorded."""
    path = lock_path.parent / requirements
    text = path.read_text(encoding="utf-8")
    if digest is not None and hashlib.sha256(text.encode()).hexdigest() != digest:
        raise InputError(
            "this locked set is not the file `factory lock` wrote (edited by hand?)",
            file=path,
            hint="run `factory lock --upgrade` to resolve it again",
        )
    return text
