"""What the trust tests share: the loopback registry seen through its HTTP API (a namespace of the test's own,
removed after), cosign run as a tamperer would run it, and a cosign that writes down every command line it
was given (so a test can look for key material there)."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import stat
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import docker.errors
import requests

from tests.conftest import ROOT, TINY, run_factory

# The test bench's registry (testbench/up): plain HTTP on loopback, its storage kept between runs, so a
# warm run pushes no layer it already holds (the tiny image is 6.75 GB: a cold push is minutes).
REGISTRY = "127.0.0.1:5000"
REPOSITORY = "vllm-factory/tiny-random-llama"
PASSWORD = "factory-tests-key-passphrase"
ACCEPT = ", ".join(
    [
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.oci.image.index.v1+json",
    ]
)


@dataclass(frozen=True)
class Manifest:
    body: bytes
    media_type: str
    digest: str


@dataclass
class Namespace:
    """`127.0.0.1:5000/factory-trust-<random>/...`: the repositories a test pushes to, deleted after."""

    name: str
    repositories: set[str]

    @staticmethod
    def fresh() -> Namespace:
        return Namespace(f"{REGISTRY}/factory-trust-{uuid.uuid4().hex[:10]}", set())

    def _url(self, repository: str, path: str) -> str:
        self.repositories.add(repository)
        return f"http://{REGISTRY}/v2/{self.name.split('/', 1)[1]}/{repository}/{path}"

    def manifest(self, repository: str, reference: str) -> Manifest | None:
        response = requests.get(
            self._url(repository, f"manifests/{reference}"), headers={"Accept": ACCEPT}, timeout=30
        )
        if response.status_code == 404:
            return None
        response.raise_for_status()
        media = response.headers["Content-Type"]
        return Manifest(response.content, media, response.headers["Docker-Content-Digest"])

    def put(self, repository: str, tag: str, manifest: Manifest) -> None:
        response = requests.put(
            self._url(repository, f"manifests/{tag}"),
            data=manifest.body,
            headers={"Content-Type": manifest.media_type},
            timeout=30,
        )
        assert response.status_code == 201, response.text

    def delete(self, repository: str, reference: str) -> None:
        """Remove the manifest a tag names (and so every tag naming it)."""
        found = self.manifest(repository, reference)
        if found is not None:
            response = requests.delete(self._url(repository, f"manifests/{found.digest}"), timeout=30)
            assert response.status_code == 202, response.text

    def tags(self, repository: str) -> list[str]:
        response = requests.get(self._url(repository, "tags/list"), timeout=30)
        return list(response.json().get("tags") or []) if response.ok else []

    def remove(self) -> None:
        """Every manifest pushed under the namespace (the layers stay: the next run mounts them), and the
        engine's names for images in it (the tags publish set, the digests compose pulled by)."""
        for repository in sorted(self.repositories):
            for tag in self.tags(repository):
                with contextlib.suppress(requests.RequestException, AssertionError):
                    self.delete(repository, tag)
        client = docker.from_env()
        for image in client.images.list():
            for name in [*image.tags, *(image.attrs.get("RepoDigests") or [])]:
                if name.startswith(f"{self.name}/"):
                    with contextlib.suppress(docker.errors.APIError):
                        client.images.remove(name, noprune=True)


def argv_logging(cosign: Path, folder: Path) -> tuple[Path, Path]:
    """A cosign that first writes its command line to a log, then runs the real one: (it, the log)."""
    log = folder / "cosign-argv.log"
    shim = folder / "cosign"
    shim.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> "{log}"\nexec "{cosign}" "$@"\n')
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    return shim, log


def run_cosign(cosign: Path, *arguments: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """cosign as anyone with a key would run it (the tamperer included), offline, legacy layout."""
    env = {**os.environ, "COSIGN_PASSWORD": PASSWORD}
    done = subprocess.run(
        [str(cosign), *arguments], capture_output=True, text=True, env=env, cwd=cwd, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done


OFFLINE = ("--use-signing-config=false", "--tlog-upload=false", "--new-bundle-format=false", "-y")


def attested(cosign: Path, public: Path, reference: str, kind: str) -> dict[str, Any]:
    """The predicate of the attestation of `kind` on `reference` that verifies with the key."""
    done = run_cosign(
        cosign,
        "verify-attestation",
        "--key",
        str(public),
        "--insecure-ignore-tlog=true",
        "--type",
        kind,
        reference,
    )
    statement = json.loads(base64.b64decode(json.loads(done.stdout.splitlines()[0])["payload"]))
    predicate: dict[str, Any] = statement["predicate"]
    return predicate


@contextlib.contextmanager
def replaced(namespace: Namespace, repository: str, tag: str) -> Iterator[Manifest | None]:
    """Take away what `tag` names for the block (a tamperer then puts something else there), and put the
    original back after, whatever the block left."""
    original = namespace.manifest(repository, tag)
    namespace.delete(repository, tag)
    try:
        yield original
    finally:
        namespace.delete(repository, tag)
        if original is not None:
            namespace.put(repository, tag, original)


@contextlib.contextmanager
def moved(namespace: Namespace, repository: str, tag: str, manifest: Manifest) -> Iterator[None]:
    """`tag` names `manifest` for the block, and what it named before after it (nothing is deleted: the
    image the tag named stays where its digest is)."""
    original = namespace.manifest(repository, tag)
    assert original is not None
    namespace.put(repository, tag, manifest)
    try:
        yield
    finally:
        namespace.put(repository, tag, original)


@dataclass
class Published:
    """The tiny image as `factory publish` left it: the project it was published from, its reports, keys,
    the namespace it lives in, and the commands' own output."""

    root: Path
    reports: Path
    keys: Path  # cosign.key and cosign.pub
    other_keys: Path  # a second pair: someone else's
    cosign: Path
    argv_log: Path
    namespace: Namespace
    env: dict[str, str]  # what every factory command of the test gets (FACTORY_COSIGN, COSIGN_PASSWORD)
    output: str  # publish's stdout and stderr

    @property
    def entry(self) -> dict[str, Any]:
        record = json.loads((self.root / "recipes" / "lock" / "published.json").read_text())
        entry: dict[str, Any] = next(iter(record["images"].values()))
        return entry

    @property
    def reference(self) -> str:
        return f"{self.entry['repository']}@{self.entry['digest']}"

    def tag_of(self, suffix: str) -> str:
        """The tag cosign keeps the digest's signatures (.sig) or attestations (.att) under."""
        return f"sha256-{self.entry['digest'].removeprefix('sha256:')}.{suffix}"


def project_copy(source: Path, folder: Path) -> Path:
    """The project's data and generated files, and this machine's build settings, to publish from."""
    for name in ("recipes", "catalog", "images", "compose", "k8s"):
        shutil.copytree(source / name, folder / name)
    settings = source / ".factory.local.toml"
    if settings.is_file():
        shutil.copy(settings, folder / ".factory.local.toml")
    return folder


@contextlib.contextmanager
def publish_signed(base: Path, validated_reports: Path, cosign: Path) -> Iterator[Published]:
    """`factory keygen`, `factory build` (cached: it writes the build record), `factory publish --key`,
    `factory generate`: the commands a user types, in a copy of the project."""
    root = project_copy(ROOT, base / "project")
    shim, log = argv_logging(cosign, base)
    env = {"FACTORY_COSIGN": str(shim), "COSIGN_PASSWORD": PASSWORD}
    for folder in ("keys", "other-keys"):
        made = run_factory(root, "keygen", str(base / folder), env=env)
        assert made.returncode == 0, made.stderr
    reports = base / "reports"
    shutil.copytree(validated_reports, reports)
    built = run_factory(root, "build", "--hardware", "cpu", "--report", str(reports / "build.json"), env=env)
    assert built.returncode == 0, built.stderr[-2000:]
    namespace = Namespace.fresh()
    namespace.repositories.add(REPOSITORY)
    try:
        done = run_factory(
            root,
            "publish",
            TINY,
            "--hardware",
            "cpu",
            "--registry",
            namespace.name,
            "--reports",
            str(reports),
            "--key",
            str(base / "keys" / "cosign.key"),
            env=env,
        )
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        generated = run_factory(root, "generate", env=env)
        assert generated.returncode == 0, generated.stderr[-2000:]
        yield Published(
            root,
            reports,
            base / "keys",
            base / "other-keys",
            cosign,
            log,
            namespace,
            env,
            done.stdout + done.stderr,
        )
    finally:
        namespace.remove()
