"""The verifier image: cosign and the gate (factory/trust/gate.py), which compose runs before a published
image's services (factory/render/compose_gate.py) and which exits non-zero, saying why, when the image does
not verify.

Its build context is made from the package at build time (the Dockerfile from its template, the gate copied
as it is) plus the cosign binary of this machine; nothing of it is committed. Its tag names the cosign release
and the hash of the context (without the binary, whose release the build checks), so a compose file names
exactly the gate it was generated with.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources
from pathlib import PurePosixPath

from factory.base.templating import environment
from factory.plan.naming import REPOSITORY_PREFIX
from factory.trust.cosign import COSIGN_VERSION

BASE_IMAGE = "debian:bookworm-slim"  # Debian's Python, as the CPU images and the router use
PLATFORM = "linux/amd64"


@dataclass(frozen=True)
class VerifierImage:
    inputs_hash: str
    platform: str = PLATFORM

    @property
    def slug(self) -> str:
        return "verify"

    @property
    def directory(self) -> PurePosixPath:
        """Where a generated context would be: none is committed (it is staged from the package)."""
        return PurePosixPath("images") / self.slug / self.tag

    @property
    def base_image(self) -> str:
        return BASE_IMAGE

    @property
    def local_wheels(self) -> bool:
        return False

    @property
    def python_platform(self) -> str | None:
        return None  # built natively: cosign is one static binary

    @property
    def repository(self) -> str:
        return f"{REPOSITORY_PREFIX}/verify"

    @property
    def tag(self) -> str:
        return f"cosign-{COSIGN_VERSION}"

    @property
    def reference(self) -> str:
        return f"{self.repository}:{self.tag}"

    @property
    def immutable_reference(self) -> str:
        return f"{self.reference}-{self.inputs_hash[:12]}"


def gate_source() -> bytes:
    return resources.files("factory").joinpath("trust", "gate.py").read_bytes()


def dockerfile(image: VerifierImage) -> bytes:
    template = environment().get_template("Dockerfile.verify.j2")
    text = template.render(
        image=image, version=COSIGN_VERSION, base_image=BASE_IMAGE, inputs_hash=image.inputs_hash
    )
    return text.encode()


def verifier_image() -> VerifierImage:
    """The verifier with its inputs hash: the Dockerfile (rendered without the hash) and the gate."""
    draft = dockerfile(VerifierImage(inputs_hash=""))
    return VerifierImage(hashlib.sha256(draft + b"\0" + gate_source()).hexdigest())
