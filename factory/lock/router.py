"""The router's lock: which vllm-router release, and its complete hash-locked set (and uv's), kept in a
folder of its own beside the vLLM lock (recipes/lock/router/). Only `factory lock` asks the index."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from factory.base.errors import InputError
from factory.base.files import write_text_atomic
from factory.base.reporter import Reporter, silent
from factory.base.yamlfile import load_json_model
from factory.lock import index
from factory.project import Project

PACKAGE = "vllm-router"
FOLDER = "router"
LOCK_NAME = "vllm-router.lock.json"
# The router is pure Python over an abi3 extension: one Python and platform serve every deployment.
PYTHON = "3.11"
PLATFORM = "linux/amd64"


class RouterLock(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    version: str  # the vllm-router release
    python: str
    platform: str
    uv: str  # the uv release that installs the set (the catalog's)
    requirements: str  # file names in the lock's folder
    digest: str  # sha256 of the requirements file, as `factory lock` wrote it
    uv_requirements: str
    uv_digest: str


def lock_path(project: Project) -> Path:
    return project.lock_path.parent / FOLDER / LOCK_NAME


def read_router_lock(project: Project) -> RouterLock | None:
    path = lock_path(project)
    if not path.is_file():
        return None
    return load_json_model(RouterLock, path, "router lock", hint="run `factory lock`")


def locked_text(project: Project, name: str, digest: str) -> str:
    """A locked file, refused when it is not what `factory lock` wrote."""
    path = lock_path(project).parent / name
    text = path.read_text(encoding="utf-8")
    if hashlib.sha256(text.encode()).hexdigest() != digest:
        raise InputError(
            "this locked set is not the file `factory lock` wrote (edited by hand?)",
            file=path,
            hint="run `factory lock --upgrade` to resolve it again",
        )
    return text


def lock_router(project: Project, upgrade: bool = False, report: Reporter = silent) -> RouterLock:
    """Keep the locked router unless upgrading or the catalog's uv moved; else lock the newest release."""
    old = read_router_lock(project)
    uv = project.catalog.uv
    if old is not None and not upgrade and old.uv == uv and _readable(project, old):
        return old
    if old is not None and not upgrade:
        version = old.version
    else:
        report(f"asking the index for the releases of {PACKAGE}")
        version = str(index.releases(PACKAGE)[0])
    report(f"resolving {PACKAGE}=={version} and uv=={uv} with uv")
    texts = {
        f"{PACKAGE}-{version}-{_arch()}-py{PYTHON}.txt": index.compile_set(
            [f"{PACKAGE}=={version}"], PLATFORM, PYTHON, [], None
        ).text,
        f"uv-{uv}-{_arch()}-py{PYTHON}.txt": index.compile_set(
            [f"uv=={uv}"], PLATFORM, PYTHON, [], None
        ).text,
    }
    (router_file, router_text), (uv_file, uv_text) = texts.items()
    new = RouterLock(
        version=version, python=PYTHON, platform=PLATFORM, uv=uv,
        requirements=router_file, digest=_digest(router_text),
        uv_requirements=uv_file, uv_digest=_digest(uv_text),
    )  # fmt: skip
    folder = lock_path(project).parent
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in texts.items():
        write_text_atomic(folder / name, text)
    for stale in folder.glob("*.txt"):
        if stale.name not in texts:
            stale.unlink()
    write_text_atomic(lock_path(project), json.dumps(new.model_dump(), indent=1) + "\n")
    return new


def _readable(project: Project, lock: RouterLock) -> bool:
    folder = lock_path(project).parent
    return (folder / lock.requirements).is_file() and (folder / lock.uv_requirements).is_file()


def _arch() -> str:
    return PLATFORM.split("/")[1]


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
