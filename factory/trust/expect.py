"""What this tree says a published image must be (factory.trust.gate.Expected): the digest, the recipe, the
inputs hash this tree builds now, and the Python packages of its locked set with the lock's hashes."""

from __future__ import annotations

from factory.lockfile.model import canonical_name, requirement_blocks
from factory.plan.models import ImagePlan
from factory.trust.gate import Expected, hashes_digest

# Python packages an image holds besides its locked set, any version: `python3.11 -m venv /opt/vllm` installs
# its own pip (Debian's bundled wheel), which the Dockerfile then uses to bootstrap uv. Nothing else.
BOOTSTRAP = ("pip",)


def locked_packages(image: ImagePlan) -> dict[str, tuple[str, list[str]]]:
    """The image's locked Python packages as its build context installs them (every install layer):
    canonical name -> (version, the sha256 hashes the lock allows). None for an image with no locked set."""
    install = image.install
    found: dict[str, tuple[str, list[str]]] = {}
    if install is None:
        return found
    for _, text in install.layers:
        for name, block in requirement_blocks(text):
            pin = block.splitlines()[0].split("==", 1)[1].split()[0].rstrip("\\").strip()
            hashes = [
                word.removeprefix("--hash=sha256:")
                for word in block.split()
                if word.startswith("--hash=sha256:")
            ]
            found[canonical_name(name)] = (pin, hashes)
    return found


def expected(image: ImagePlan, reference: str) -> Expected:
    """The expectation for `reference` (registry/repository@sha256:...) from this tree's plan of the image."""
    return Expected(
        reference=reference,
        recipe=image.recipe_id,
        recipe_file=image.recipe_file,
        inputs_hash=image.inputs_hash,
        packages={
            name: [version, hashes_digest(hashes)]
            for name, (version, hashes) in sorted(locked_packages(image).items())
        },
        bootstrap=list(BOOTSTRAP),
    )
