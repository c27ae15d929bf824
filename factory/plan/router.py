"""The PD router's image, planned like every image: its locked release (factory.lock.router), its build
context (a Dockerfile and the locked sets under images/vllm-router/<release>/) and the hash of that context,
which names its immutable tag. Built, validated and published through the same paths as the vLLM images
(factory.blueprint.router hands it on)."""

from __future__ import annotations

import hashlib
from pathlib import Path, PurePosixPath

from pydantic import BaseModel, ConfigDict

from factory.base.outputs import OutputFile
from factory.base.templating import environment
from factory.lock.router import FOLDER, PACKAGE, RouterLock, lock_path, locked_text, read_router_lock
from factory.plan.models import USER_LABEL
from factory.plan.naming import ImmutableNames, repository
from factory.plan.runspec import HealthProbe, Programs, health_probe
from factory.project import Project
from factory.synthesis.options import ServeOptions

SLUG = "vllm-router"
# The router's base: Debian's Python, as the CPU images use (BASE_IMAGE replaces it, as for every image).
BASE_IMAGE = "debian:bookworm-slim"
SYSTEM_PACKAGES = ("python3.11", "python3.11-venv", "curl", "ca-certificates")  # curl: the health check


class RouterImage(BaseModel, ImmutableNames):
    model_config = ConfigDict(frozen=True, extra="forbid")

    lock: RouterLock
    base_image: str = BASE_IMAGE
    inputs_hash: str = ""  # sha256 of the build context (the Dockerfile without this line, and the sets)

    @property
    def slug(self) -> str:
        return SLUG

    @property
    def platform(self) -> str:
        return self.lock.platform

    @property
    def repository(self) -> str:
        return repository(SLUG)

    @property
    def tag(self) -> str:
        return self.lock.version

    @property
    def reference(self) -> str:
        return f"{self.repository}:{self.tag}"

    @property
    def validate_command(self) -> str:
        return f"factory validate {SLUG}"

    @property
    def tag_values(self) -> dict[str, str]:
        """What `factory publish --tag TEMPLATE` may name, as for a vLLM image (its release: the router's)."""
        return {"tag": self.tag, "hardware": self.hardware, "variant": "default", "vllm": self.lock.version}

    @property
    def directory(self) -> PurePosixPath:
        return PurePosixPath("images") / SLUG / self.tag

    @property
    def hardware(self) -> str:
        """Its bake group: the router runs beside every hardware's pools."""
        return "router"

    @property
    def local_wheels(self) -> bool:
        return False

    @property
    def python_platform(self) -> str | None:
        return None  # built natively: the router is one static binary

    @property
    def labels(self) -> dict[str, str]:
        return {
            "org.opencontainers.image.title": f"{PACKAGE} {self.lock.version}",
            "org.opencontainers.image.description": (
                f"{PACKAGE} {self.lock.version}: the router of the factory's pd_cluster deployments"
            ),
            "org.opencontainers.image.version": self.tag,
            "org.opencontainers.image.vendor": "vllm-image-factory",
            "ai.vllm.factory.component": "router",
            "ai.vllm.factory.router-version": self.lock.version,
            "ai.vllm.factory.platform": self.platform,
            "ai.vllm.factory.inputs-hash": self.inputs_hash,
        }


def router_image(project: Project) -> RouterImage | None:
    """The locked router's image, with its inputs hash; None before `factory lock` locked the router."""
    lock = read_router_lock(project)
    return _hashed(project, lock) if lock is not None else None


def _hashed(project: Project, lock: RouterLock) -> RouterImage:
    key = (lock_path(project), lock)
    if key not in _HASHED:  # every pd_cluster deployment names the router: hash its context once
        unhashed = RouterImage(lock=lock)
        digest = hashlib.sha256()
        for file in _files(project, unhashed):
            digest.update(file.path.as_posix().encode() + b"\0" + file.content)
        _HASHED[key] = unhashed.model_copy(update={"inputs_hash": digest.hexdigest()})
    return _HASHED[key]


_HASHED: dict[tuple[Path, RouterLock], RouterImage] = {}


def router_files(project: Project) -> list[OutputFile]:
    """The router's build context, for `factory generate` (none before the router is locked)."""
    image = router_image(project)
    return _files(project, image) if image is not None else []


def router_health(project: Project) -> HealthProbe:
    """How `docker run ROUTER-IMAGE ...` says it is ready: the router's own probe for a command that names no
    port (vllm-router's default) and no worker wait (its default), from the catalog's router facts. Its
    /health answers once the router serves, from the router itself (a worker going down later does not fail
    it: the router routes around it)."""
    catalog = project.catalog
    probe = health_probe(
        Programs(server=catalog.server, router=catalog.router), "vllm-router", ServeOptions(), 0
    )
    assert probe is not None  # only a headless process has none
    return probe


def _files(project: Project, image: RouterImage) -> list[OutputFile]:
    lock = image.lock
    user = project.catalog.server.user  # the router runs as the same non-root user as every process
    dockerfile = (
        environment()
        .get_template("Dockerfile.router.j2")
        .render(
            image=image,
            lock=lock,
            package=PACKAGE,
            system_packages=SYSTEM_PACKAGES,
            labels={**image.labels, USER_LABEL: user.ids},
            user=user,
            folders=user.owned,
            health=router_health(project),
        )
    )
    folder = image.directory
    sets = {
        "requirements.txt": (lock.requirements, lock.digest),
        "uv.txt": (lock.uv_requirements, lock.uv_digest),
    }
    copies = [
        OutputFile(
            folder / "requirements" / name,
            (
                f"# DO NOT EDIT: copied by `factory generate` from recipes/lock/{FOLDER}/{source}.\n"
                + locked_text(project, source, digest)
            ).encode(),
        )
        for name, (source, digest) in sets.items()
    ]
    return [OutputFile(folder / "Dockerfile", dockerfile.encode()), *copies]
