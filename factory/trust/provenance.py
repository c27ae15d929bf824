"""The image's SLSA provenance (v1 predicate; cosign wraps it in an in-toto statement naming the digest):
what it was built from and by whom.

  externalParameters    the recipe, hardware, variant (what a user asks `factory build` for)
  internalParameters    the inputs hash (the build context's: the image's identity), platform, backend
  resolvedDependencies  the recipe file and its sha256; the Dockerfile and each locked requirements file of
                        the build context with theirs; the lock's entry for the set (with its file's
                        digest); the base image by digest
  runDetails            the builder (the CI workflow run, or the factory on its host) and when the build
                        started and finished, from the build record (factory.builder.record)
"""

from __future__ import annotations

import hashlib
from typing import Any

from factory.base.errors import RefusedError
from factory.blueprint import Blueprint
from factory.builder.record import BuildRecord
from factory.project import Project

BUILD_TYPE = "https://github.com/vllm-image-factory/build/v1"


def _sha256(data: bytes) -> dict[str, str]:
    return {"sha256": hashlib.sha256(data).hexdigest()}


def _base_image(record: BuildRecord) -> dict[str, Any]:
    """The base by its registry digest where the engine has one, else by the engine's ID of it (a local image,
    as the bootstrapped Debian here)."""
    if record.base_image_id is None:
        raise RefusedError(
            f"the build record of {record.image} does not name its base image's digest ({record.base_image}"
            " was pulled by BuildKit, not the engine): pull it with `docker pull` and build again"
        )
    repo_digest = next(iter(record.base_image_digests), None)
    digest = (repo_digest or record.base_image_id).rpartition("@")[2].removeprefix("sha256:")
    return {
        "name": "base image",
        "uri": f"docker-image://{record.base_image}",
        "digest": {"sha256": digest},
        "annotations": {
            "digestOf": "manifest" if repo_digest else "image config (the engine's image ID)",
            "imageId": record.base_image_id,
        },
    }


def _lock_entries(project: Project, blueprint: Blueprint) -> list[dict[str, Any]]:
    install = blueprint.image.install
    lock = project.lock
    if install is None or install.lock_key is None or lock is None or install.lock_key not in lock.sets:
        return []
    entry = lock.sets[install.lock_key]
    return [
        {
            "name": f"lock: {install.lock_key}",
            "uri": f"file:{project.relative(project.lock_path)}#sets/{install.lock_key}",
            "digest": {"sha256": entry.digest or ""},
            "annotations": entry.model_dump(exclude_defaults=True),
        }
    ]


def _context_files(blueprint: Blueprint) -> list[dict[str, Any]]:
    """The Dockerfile and the locked requirements files of the build context, with their hashes."""
    chosen = [
        file
        for file in blueprint.image_files
        if file.path.name == "Dockerfile" or file.path.parent.name == "requirements"
    ]
    return [
        {"name": file.path.name, "uri": f"file:{file.path.as_posix()}", "digest": _sha256(file.content)}
        for file in sorted(chosen, key=lambda f: f.path)
    ]


def predicate(project: Project, blueprint: Blueprint, record: BuildRecord) -> dict[str, Any]:
    image = blueprint.image
    if record.inputs_hash != image.inputs_hash:
        raise RefusedError(
            f"the build record of {record.image_id[:19]} names inputs {record.inputs_hash[:12]}, this tree "
            f"plans {image.inputs_hash[:12]}: build again from this tree"
        )
    recipe = project.tree.recipe(image.recipe_id).path
    return {
        "buildDefinition": {
            "buildType": BUILD_TYPE,
            "externalParameters": {
                "recipe": image.recipe_id,
                "hardware": image.hardware,
                "variant": image.variant,
                "kvStore": blueprint.kv_store,
            },
            "internalParameters": {
                "inputsHash": image.inputs_hash,
                "platform": image.platform,
                "backend": record.backend,
            },
            "resolvedDependencies": [
                {
                    "name": "recipe",
                    "uri": f"file:{image.recipe_file}",
                    "digest": _sha256(recipe.read_bytes()),
                },
                *_context_files(blueprint),
                *_lock_entries(project, blueprint),
                _base_image(record),
            ],
        },
        "runDetails": {
            "builder": {"id": record.builder_id, "version": record.builder_version},
            "metadata": {
                "invocationId": record.image_id,
                "startedOn": record.started,
                "finishedOn": record.finished,
            },
            # A build whose every step was cached made nothing new: when the image itself was made.
            "byproducts": [
                {
                    "name": "build cache",
                    "annotations": {
                        "cachedSteps": record.cached_steps,
                        "totalSteps": record.total_steps,
                        "imageCreated": record.image_created,
                    },
                }
            ],
        },
    }
