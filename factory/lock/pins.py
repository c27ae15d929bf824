"""The vLLM version a recipe pins, and the checks that refuse a pin known not to work."""

from __future__ import annotations

import re

from packaging.version import InvalidVersion, Version

from factory.base.errors import InputError, RefusedError
from factory.catalog.schema import Catalog
from factory.recipes.loader import LoadedRecipe

# `uv pip install vllm==0.11.2 --torch-backend auto` and the like: the pin is `vllm==<version>`.
_PIN = re.compile(r"(?<![\w.-])vllm==(?P<version>[^\s;,\"']+)")


def pinned_vllm(loaded: LoadedRecipe, catalog: Catalog, brand: str | None = None) -> str | None:
    """The exact vLLM version the recipe pins in `dependencies` for hardware of this brand (None when it
    pins none), after the safety checks: one pin, a real version, not below min_vllm_version, not known
    to break the model. A dependency marked for another brand, or optional, pins nothing here."""
    recipe = loaded.recipe
    pins = [
        (index, match.group("version"))
        for index, dep in enumerate(recipe.dependencies)
        if not dep.optional and (not dep.brands() or brand is None or brand in dep.brands())
        for match in _PIN.finditer(dep.command)
    ]
    if not pins:
        return None
    if len({version for _, version in pins}) > 1:
        raise InputError(
            "the recipe pins vLLM more than once, to different versions",
            file=loaded.path,
            field="dependencies",
            value=[version for _, version in pins],
        )
    index, text = pins[0]
    field = f"dependencies[{index}].command"
    pin = _version(text, loaded, field)
    minimum = _version(recipe.model.min_vllm_version, loaded, "model.min_vllm_version")
    if pin < minimum:
        raise InputError(
            f"the pinned vLLM is older than the recipe's min_vllm_version {minimum}",
            file=loaded.path,
            field=field,
            value=text,
        )
    for bad in catalog.known_bad.get(recipe.model.model_id, []):
        if Version(bad.vllm) == Version(pin.public):
            raise RefusedError(
                f"{loaded.path}: {field}: vLLM {text} is known to break {recipe.model.model_id}: "
                f"{bad.reason}\n  source: {bad.source}\n  hint: pin another version (the recipe's minimum "
                f"is {minimum})"
            )
    return pin.public  # 0.20.0+rocm721 installs 0.20.0 built for ROCm: the release is what names the image


def _version(text: str, loaded: LoadedRecipe, field: str) -> Version:
    try:
        return Version(text)
    except InvalidVersion:
        raise InputError(
            "not a version number (PEP 440, e.g. 0.11.2)", file=loaded.path, field=field, value=text
        ) from None
