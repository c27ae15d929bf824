"""The inputs hash of an image: everything it is made from, so an unchanged hash means an unchanged image."""

from __future__ import annotations

import hashlib
from pathlib import Path

from factory import __version__
from factory.plan.models import ImagePlan, ImageSpec
from factory.render.outputs import IMAGE_FILES, bundled_model_files, image_support_file
from factory.render.templating import template_sources


def inputs_hash(root: Path, spec: ImageSpec) -> str:
    """Hash the image's plan, the templates, the files it copies and the factory's version."""
    digest = hashlib.sha256(__version__.encode())
    digest.update(spec.model_dump_json().encode())
    for name, source in template_sources().items():
        digest.update(name.encode() + b"\0" + source.encode())
    for name in IMAGE_FILES:
        digest.update(image_support_file(name))
    for name, content in bundled_model_files(root, spec).items():
        digest.update(name.encode() + b"\0" + content)
    return digest.hexdigest()


def hashed(root: Path, spec: ImageSpec) -> ImagePlan:
    return ImagePlan(**spec.model_dump(), inputs_hash=inputs_hash(root, spec))
