"""How images are named: repository from the recipe's slug, tag from version, hardware and variant.

Every name that becomes a path, a tag or a compose project is checked against Docker's reference grammar
(which is also a safe path segment): capitals are lower-cased where that is unambiguous, anything else
that does not fit is refused with the file, the field and the value.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Protocol

from factory.base.errors import InputError
from factory.recipes.grammar import MAX_NAME, identity
from factory.recipes.loader import LoadedRecipe
from factory.recipes.tree_schema import Taxonomy

REPOSITORY_PREFIX = "vllm-factory"
# A path component of a Docker repository name: lower-case letters and digits, single separators.
PATH_COMPONENT = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$")
# A Docker tag: word characters, dots and dashes, not starting with either, 128 at most.
TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


def layout(strategy: str, kv_offload: str | None) -> str:
    """What names a deployment among its image's: the strategy, and the KV-offload option composed with it
    (so the two never replace each other in compose/ or on a cluster)."""
    return f"{strategy}-{kv_offload}" if kv_offload else strategy


def offload_key(key: str, taxonomy: Taxonomy, taxonomy_file: Path) -> str:
    """A KV-offload option named on the command line: one of the taxonomy's that could be read, and a safe
    name segment (the key comes from taxonomy.yaml, someone else's file, and ends up in names)."""
    if key in taxonomy.kv_offload_unreadable:
        raise InputError(
            f"this KV-offload option could not be read: {taxonomy.kv_offload_unreadable[key]}",
            file=taxonomy_file,
            field=f"kv_offload.{key}",
        )
    valid = list(taxonomy.kv_offload)
    if key not in valid:
        hint = None if valid else f"{taxonomy_file} has no kv_offload row (an older recipes tree?)"
        raise InputError("unknown KV-offload option", field="--kv-offload", value=key, valid=valid, hint=hint)
    if not fits_a_name(key):
        raise InputError(
            "not usable in a deployment's name: lower-case letters and digits, joined by single '.', '_'"
            " or '-', at most 32 characters",
            file=taxonomy_file,
            field=f"kv_offload.{key}",
            value=key,
        )
    return key


def fits_a_name(key: str) -> bool:
    """Whether a KV-offload option's key can be part of a deployment's name (and so be picked)."""
    return bool(PATH_COMPONENT.fullmatch(key)) and len(key) <= 32


def deployment_name(image_slug: str, hardware: str, variant: str, strategy: str) -> str:
    """A deployment's name, the same in every format (its containers' label, validation's cases):
    <slug>.<hardware>-<variant>.<strategy>, one per strategy of an image."""
    return f"{image_slug}.{hardware}-{variant}.{strategy}"


def slug(loaded: LoadedRecipe, model_id: str) -> str:
    """The recipe's own slug, else the last part of the served model's id; lower-cased, then checked."""
    given = loaded.recipe.meta.slug
    written = given or model_id.split("/")[-1]
    candidate = identity(written)
    # Checked as written, before lower-casing: a Kelvin sign lower-cases to "k" and so to another recipe's
    # slug; only ASCII capitals fold.
    if not written.isascii() or not PATH_COMPONENT.fullmatch(candidate) or len(candidate) > MAX_NAME:
        field = "meta.slug" if given else "model.model_id"
        raise InputError(
            "not usable as an image name: lower-case letters and digits, joined by single '.', '_' or '-',"
            f" at most {MAX_NAME} characters",
            file=loaded.path,
            field=field,
            value=given or model_id,
        )
    return candidate


def repository(image_slug: str) -> str:
    return f"{REPOSITORY_PREFIX}/{image_slug}"


def tag(vllm_version: str | None, hardware: str, variant: str, loaded: LoadedRecipe | None = None) -> str:
    """vllm<version>-<hardware>-<variant>; `vllm-unresolved-...` until a version is known."""
    text = f"vllm{vllm_version or '-unresolved'}-{hardware}-{variant}"
    if not TAG.fullmatch(text):
        raise InputError(
            "this variant name cannot be part of an image tag (letters, digits, '_', '.', '-')",
            file=loaded.path if loaded else None,
            field=f"variants.{variant}",
            value=variant,
        )
    return text


def tag_with(tag: str, suffix: str) -> str:
    """A tag with a suffix (a KV-store image's `-mooncake`), cut where Docker's 128 characters would not
    hold it and kept unique by a hash of the whole."""
    text = f"{tag}{suffix}"
    if len(text) <= 128:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return f"{tag[: 128 - len(suffix) - 9]}-{digest}{suffix}"


class _Named(Protocol):
    @property
    def repository(self) -> str: ...
    @property
    def tag(self) -> str: ...
    @property
    def inputs_hash(self) -> str: ...


class ImmutableNames:
    """The tag that names an image's inputs, for every kind of image (a vLLM image, the PD router's): its
    readable tag and the first 12 digits of its build context's hash."""

    @property
    def immutable_tag(self: _Named) -> str:
        return f"{self.tag}-{self.inputs_hash[:12]}"

    @property
    def immutable_reference(self: _Named) -> str:
        return f"{self.repository}:{self.tag}-{self.inputs_hash[:12]}"
