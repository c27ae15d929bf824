"""The package indexes, as `factory lock` asks them: which releases a package has (pip), and the complete
hash-locked set an install needs (uv's resolver; no wheel is downloaded to resolve), with the index that
served each file. The catalog's default index is the one this machine is configured for (pip.conf,
PIP_*/UV_* settings), so a mirror stands in for PyPI; every other index an install names is passed by URL.
Only `factory lock` talks to an index; `generate` and `generate --check` never do."""

from __future__ import annotations

import os
import re
import shutil
import ssl
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TypeVar

from packaging.version import InvalidVersion, Version

from factory.base.errors import FactoryError
from factory.catalog.platform import PYTHON_PLATFORMS

_AVAILABLE = re.compile(r"^Available versions:\s*(?P<versions>.+)$", re.MULTILINE)
_FROM = re.compile(r"^\s+# from (?P<url>\S+)\n", re.MULTILINE)  # uv's --emit-index-annotation line
FIND_LINKS = "find-links"  # what served a file that came from the find_links folder, not an index


class IndexUnavailable(FactoryError):
    """The package index could not answer (unreachable, or nothing satisfies the request)."""


class RequirementNotServed(IndexUnavailable):
    """The set cannot be resolved because one requirement is served by no index the install names."""

    def __init__(self, message: str, requirement: str) -> None:
        super().__init__(message)
        self.requirement = requirement


# How uv's resolver says that a requirement is served by none of the indexes it asked (its words, from
# `uv pip compile`; `vllm==0.34.0` requires `flashinfer-python==0.7.3`, which PyPI never published).
_NOT_SERVED = (
    re.compile(r"there (?:is|are) no versions? of (?P<requirement>[A-Za-z0-9][^\s,]*)"),
    re.compile(r"(?P<requirement>[A-Za-z0-9][^\s,]*) has no wheels with a matching (?:platform|Python)"),
    re.compile(
        r"only [A-Za-z0-9][^\s,]* is available and \S+ depends on (?P<requirement>[A-Za-z0-9][^\s,]*)"
    ),
    re.compile(r"(?P<requirement>[A-Za-z0-9][A-Za-z0-9._-]*) was not found in the package registry"),
)


def not_served(message: str) -> str | None:
    """The requirement uv's message says no index serves, if that is what it says (without the markers uv
    writes into it: `torch{platform_machine == 'x86_64'}==2.13.0+cpu` is `torch==2.13.0+cpu`)."""
    flat = re.sub(r"\{[^{}]*\}", "", " ".join(message.split()))
    for pattern in _NOT_SERVED:
        found = pattern.search(flat)
        if found:
            return found["requirement"].rstrip(".")
    return None


@dataclass(frozen=True)
class Sources:
    """The indexes one resolution asks, in order: names and URLs; `default` is the name of the index the
    machine's configuration stands in for (None: the install names no default, so the first replaces it)."""

    urls: dict[str, str] = field(default_factory=dict)  # name -> URL, not the default
    default: str | None = None

    def flags(self) -> list[str]:
        urls = list(self.urls.values())
        if self.default is None and urls:
            return ["--index-url", urls[0], *[f for url in urls[1:] for f in ("--extra-index-url", url)]]
        return [f for url in urls for f in ("--extra-index-url", url)]

    def name_of(self, url: str) -> str:
        """The index that served a file, from the URL uv reports: a named one, find_links, or the default."""
        if url.startswith("file:"):
            return FIND_LINKS
        for name, known in self.urls.items():
            if known.rstrip("/") == url.rstrip("/"):
                return name
        return self.default or url


@cache
def unreachable(url: str) -> str | None:
    """Why this machine cannot reach an index (None when it answers), asked once per run."""
    context = ssl.create_default_context()
    for bundle in (os.environ.get("PIP_CERT"), os.environ.get("SSL_CERT_FILE")):
        if bundle and Path(bundle).is_file():
            context.load_verify_locations(bundle)
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/", timeout=20, context=context):
            return None
    except urllib.error.HTTPError as exc:
        return None if exc.code < 500 else f"HTTP {exc.code}"  # a 404 at the root still proves it answers
    except (urllib.error.URLError, OSError) as exc:
        return str(getattr(exc, "reason", exc))


def releases(package: str, sources: Sources = Sources()) -> list[Version]:
    """Every final release of `package` on the indexes, newest first (pre-releases and dev builds aside)."""
    command = [sys.executable, "-m", "pip", "index", "versions", package, "--disable-pip-version-check"]
    if sources.default is None and sources.urls:
        # Only the install's indexes: the machine's pip configuration (its index, extra indexes) is left out,
        # its CA bundle kept for a TLS-inspecting proxy.
        command.append("--isolated")
        bundle = os.environ.get("PIP_CERT")
        command += ["--cert", bundle] if bundle else []
    result = subprocess.run(
        command + sources.flags(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    found = _AVAILABLE.search(result.stdout)
    if result.returncode != 0 or not found:
        raise IndexUnavailable(
            f"the package index did not list the releases of {package}: {result.stderr.strip()[-300:]}"
        )
    versions = []
    for text in found["versions"].split(","):
        try:
            version = Version(text.strip())
        except InvalidVersion:
            continue
        if not version.is_prerelease and not version.is_devrelease:
            versions.append(version)
    return sorted(versions, reverse=True)


def uv_binary() -> str:
    found = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
    if not Path(found).is_file():
        raise FactoryError("uv is missing\n  hint: testbench/up installs it (PyPI package uv)")
    return found


T = TypeVar("T")
R = TypeVar("R")

# How many uv resolutions `factory lock` runs at once: each waits mostly on the index (a cold corpus lock,
# 27 sets and 9 Mooncake layers one after another, took 228 s on this project's 2-core machines).
RESOLVERS = 4


def each_at_once(work: Callable[[T], R], items: Iterable[T]) -> list[R]:
    """work(item) for every item, RESOLVERS at a time, the results in the items' order."""
    with ThreadPoolExecutor(RESOLVERS, thread_name_prefix="factory-lock") as pool:
        return list(pool.map(work, items))


@dataclass(frozen=True)
class Compiled:
    text: str  # the requirements file, hashes included (no index annotations: the lock file holds them)
    served: dict[str, str]  # package -> the name of the index that served its files


def compile_set(
    requirements: list[str],
    platform: str,
    python: str,
    exclude: list[str],
    find_links: Path | None,
    sources: Sources = Sources(),
    pins: str | None = None,
    no_deps: bool = False,
    overrides: list[str] | None = None,
    uncached: bool = False,
) -> Compiled:
    """`uv pip compile --generate-hashes` of the requirements for one platform and Python: the text of a
    requirements file that pins every package with its hashes (the packages in `exclude` left out), and
    which index served each. `pins`: a requirements file whose versions constrain the resolution (a set
    locked before the index record, resolved again without moving). `overrides`: requirements that replace
    every requirement on the same package (uv's --override), for the catalog's stand-ins. `uncached`: what the
    indexes serve now, not what uv's cache kept of their pages (uv's --refresh)."""
    with tempfile.TemporaryDirectory(prefix="factory-lock-") as folder:
        source = Path(folder) / "requirements.in"
        source.write_text("\n".join(requirements) + "\n", encoding="utf-8")
        command = [
            uv_binary(), "pip", "compile", source.name, "--generate-hashes", "--quiet",
            "--emit-index-annotation", "--python-version", python,
            "--python-platform", PYTHON_PLATFORMS[platform], "--custom-compile-command", "factory lock",
        ]  # fmt: skip
        for name in exclude:
            command += ["--no-emit-package", name]
        if no_deps:
            command.append("--no-deps")
        if uncached:
            command.append("--refresh")
        if find_links:
            command += ["--find-links", str(find_links)]
        command += sources.flags()
        if pins is not None:
            constraints = Path(folder) / "pins.txt"
            constraints.write_text("\n".join(_pinned(pins)) + "\n", encoding="utf-8")
            command += ["--constraint", constraints.name]
        if overrides:
            (Path(folder) / "overrides.txt").write_text("\n".join(overrides) + "\n", encoding="utf-8")
            command += ["--override", "overrides.txt"]
        # Run in the folder, so the file's annotations name `requirements.in`, not a temporary path.
        result = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False, cwd=folder)
    if result.returncode != 0:
        why = " ".join(result.stderr.strip().splitlines()[-6:])[-600:]
        message = f"uv could not resolve {' '.join(requirements)} for {platform}, Python {python}: {why}"
        missing = not_served(result.stderr)
        if missing is not None and not any(_same_package(missing, wanted) for wanted in requirements):
            raise RequirementNotServed(message, missing)
        raise IndexUnavailable(message)
    return _annotated(result.stdout, sources)


def answer(
    requirement: str, platform: str, python: str, find_links: Path | None, sources: Sources = Sources()
) -> str | None:
    """What the indexes give for one requirement alone on a platform (its dependencies aside): the pin they
    resolve it to (`flashinfer-python==0.7.4`), or None when they serve nothing that satisfies it. A
    passed-over release is resolved again only when this changes."""
    try:
        # Uncached: the question is whether the index has changed since the answer was recorded.
        compiled = compile_set(
            [requirement], platform, python, [], find_links, sources, no_deps=True, uncached=True
        )
    except RequirementNotServed:
        return None
    except IndexUnavailable as exc:
        if "No solution found" in str(exc) or not_served(str(exc)) is not None:
            return None
        raise
    pins = [line.split()[0] for line in compiled.text.splitlines() if _REQUIREMENT_LINE.match(line)]
    return pins[0] if pins else None


_REQUIREMENT_LINE = re.compile(r"^[A-Za-z0-9][\w.-]*==")


def nearest(versions: list[Version], requirement: str, most: int = 4) -> list[str]:
    """The releases of a required package nearest the one asked for: those of its series, else the newest."""
    asked = re.search(r"(?:==|>=|~=|<=|>|<)\s*(?P<version>[0-9][^,;\s]*)", requirement)
    series: list[Version] = []
    if asked:
        try:
            wanted = Version(asked["version"])
            series = [v for v in versions if v.release[:2] == wanted.release[:2]]
        except InvalidVersion:
            series = []
    return [str(v) for v in (series or versions)[:most]]


def _same_package(requirement: str, wanted: str) -> bool:
    name = re.split(r"[=<>!~;\[ ]", requirement, maxsplit=1)[0]
    other = re.split(r"[=<>!~;\[ ]", wanted, maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", name).lower() == re.sub(r"[-_.]+", "-", other).lower()


def _annotated(output: str, sources: Sources) -> Compiled:
    served: dict[str, str] = {}
    package = None
    for line in output.splitlines():
        if line and not line.startswith((" ", "#")):
            package = line.split("==", 1)[0].lower()
        found = _FROM.match(line + "\n")
        if found and package is not None:
            served[package] = sources.name_of(found["url"])
    return Compiled(_FROM.sub("", output), dict(sorted(served.items())))


def _pinned(requirements: str) -> list[str]:
    """name==version of each pin in a requirements file, without its hashes (a constraint)."""
    return [line.split()[0] for line in requirements.splitlines() if re.match(r"^[A-Za-z0-9][\w.-]*==", line)]
