"""The inputs hash of an image: the hash of its build context, so equal hashes mean equal builds.

The Dockerfile carries the hash in a label, so it is rendered with a placeholder first, the context is
hashed, and the placeholder is then replaced. What changes no file of the context (a compose template,
a serve flag only compose files carry) leaves the hash, and the immutable tag, as they were.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path

from factory.base.outputs import OutputFile
from factory.plan.context import image_outputs
from factory.plan.models import ImagePlan, ImageSpec

PLACEHOLDER = "0" * 64


def context_hash(image: ImageSpec, files: list[OutputFile]) -> str:
    digest = hashlib.sha256()
    for file in sorted(files, key=lambda f: f.path):
        relative = file.path.relative_to(image.directory).as_posix()
        digest.update(f"{relative}\0{int(file.executable)}\0{file.size}\0".encode())
        for chunk in file.chunks():  # a bundled model file is read in chunks, never whole
            digest.update(chunk)
    return digest.hexdigest()


def hashed_context(spec: ImageSpec, model_folder: Path | None) -> tuple[ImagePlan, list[OutputFile]]:
    """The image's plan with its hash, and its build context with the hash in place."""
    draft = image_outputs(spec, PLACEHOLDER, model_folder)
    if not draft:  # an image the factory cannot build has no context: its plan stands in for one
        digest = hashlib.sha256(spec.model_dump_json().encode()).hexdigest()
        return ImagePlan(**spec.model_dump(), inputs_hash=digest), []
    inputs_hash = context_hash(spec, draft)
    image = ImagePlan(**spec.model_dump(), inputs_hash=inputs_hash)
    dockerfile = next(f for f in draft if f.path.name == "Dockerfile")
    if dockerfile.content.count(PLACEHOLDER.encode()) == 1:
        final = replace(
            dockerfile, content=dockerfile.content.replace(PLACEHOLDER.encode(), inputs_hash.encode())
        )
        return image, [final if f is dockerfile else f for f in draft]
    # The placeholder also appears in the recipe's own text: render again rather than replace blindly.
    return image, image_outputs(spec, inputs_hash, model_folder)
