"""How images are named: repository from the recipe's slug, tag from version, hardware and variant."""

from __future__ import annotations

from factory.recipes.schema import Recipe

REPOSITORY_PREFIX = "vllm-factory"


def slug(recipe: Recipe, model_id: str) -> str:
    """The recipe's own slug, else the last part of the served model's id, lower-cased."""
    return recipe.meta.slug or model_id.split("/")[-1].lower()


def repository(image_slug: str) -> str:
    return f"{REPOSITORY_PREFIX}/{image_slug}"


def tag(vllm_version: str, hardware: str, variant: str) -> str:
    return f"vllm{vllm_version}-{hardware}-{variant}"
