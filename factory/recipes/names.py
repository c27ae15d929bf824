"""Names a recipe's outputs take, as each output folds them, and the checks that keep them apart: two recipes
(or two variants of one) whose names fold together would share compose projects, Kubernetes objects or image
repositories, and starting one would replace the other's containers or objects."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path

from factory.base.errors import InputError
from factory.recipes.grammar import identity
from factory.recipes.schema import Recipe

# More variants than this in one recipe are refused: each plans an image per hardware (10,000 ran for
# minutes; upstream's most is 5).
MAX_VARIANTS = 64


# Names of the factory's own entries beside the recipes' folders (images/docker-bake.hcl, the PD router's
# image folder and repository): a recipe whose slug is one of them would overwrite or share it.
RESERVED_SLUGS = frozenset({"docker-bake.hcl", "vllm-router"})


def refused_slugs(recipes: Mapping[str, tuple[Path, Recipe]]) -> dict[str, InputError]:
    """Each recipe (by id: its file and its recipe) whose outputs would share a name with another's, or take
    a name of the factory's own, with why: every claimant is refused, each naming the others. Names are
    compared as every output folds them: image repositories (ASCII capitals fold), compose project names
    ('.' and '_' become '-') and Kubernetes object names (every run of other characters becomes one '-')."""
    claims: dict[tuple[str, str], list[str]] = {}
    for recipe_id, (_, recipe) in recipes.items():
        for claim in _slugs(recipe):
            claims.setdefault(claim, []).append(recipe_id)
    refused: dict[str, InputError] = {}
    order = {"image name": 0, "compose project name": 1, "Kubernetes name": 2}  # the plainest first
    for (how, slug), claimants in sorted(claims.items(), key=lambda item: (order[item[0][0]], item[0][1])):
        reserved = how == "image name" and slug in RESERVED_SLUGS
        if len(claimants) < 2 and not reserved:
            continue
        files = [str(recipes[recipe_id][0]) for recipe_id in claimants]
        for recipe_id in claimants:
            if recipe_id in refused:
                continue  # already refused for another slug
            path, recipe = recipes[recipe_id]
            why = (
                f"the image name {slug!r} is the factory's own (images/{slug})"
                if reserved
                else f"{len(claimants)} recipes claim the {how} {slug!r}: {', '.join(files)}"
            )
            refused[recipe_id] = InputError(
                why,
                file=path,
                field="meta.slug",
                value=recipe.meta.slug,
                hint="give each recipe a meta.slug of its own",
            )
    return refused


def _slugs(recipe: Recipe) -> set[tuple[str, str]]:
    """The names a recipe's variants take (as factory.plan.naming makes them), in each output's fold."""
    given = recipe.meta.slug
    models = {variant.model_id or recipe.model.model_id for variant in recipe.variants.values()}
    found: set[tuple[str, str]] = set()
    for model in models:
        name = identity(given or model.split("/")[-1])
        found.add(("image name", name))
        found |= {(how, fold(name)) for how, fold in FOLDS.items()}
    return found


def _compose_fold(name: str) -> str:
    return re.sub(r"[._]", "-", name.lower())


def _kubernetes_fold(name: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")


# How each output folds a name: compose project names ('.' and '_' become '-'), Kubernetes object names
# (every run of other characters becomes one '-').
FOLDS: dict[str, Callable[[str], str]] = {
    "compose project name": _compose_fold,
    "Kubernetes name": _kubernetes_fold,
}


def check_variants(recipe: Recipe, path: Path) -> None:
    """A recipe is refused with more than MAX_VARIANTS variants (each plans an image per hardware: 10,000
    ran for minutes), or with variants whose names fold together (`v1.0`, `v1-0`, `v1_0`), which would
    share compose projects and Kubernetes objects: starting one would replace the other's containers."""
    if len(recipe.variants) > MAX_VARIANTS:
        raise InputError(
            f"{len(recipe.variants):,} variants: a recipe may have at most {MAX_VARIANTS}",
            file=path,
            field="variants",
        )
    for how, fold in FOLDS.items():
        folded: dict[str, list[str]] = {}
        for name in recipe.variants:
            folded.setdefault(fold(name), []).append(name)
        for same, names in sorted(folded.items()):
            if len(names) > 1:
                raise InputError(
                    f"variants {', '.join(repr(n) for n in names)} share the {how} {same!r}",
                    file=path,
                    field="variants",
                    value=names[1],
                    hint="name the variants so they differ in letters or digits, not in '.', '_' or case",
                )


def refuse_folded_names(named: list[tuple[str, Path]]) -> None:
    """Strategies and KV stores name deployments (their folders, compose projects and Kubernetes objects),
    one namespace for both kinds: two whose names fold together in any of them (`single_node_tp` and
    `single-node-tp`, `kv_store.a` and `KV_Store_A`) would share them, and starting one would replace the
    other's containers or objects. Both files are shared input: the run stops, naming both."""
    for how, fold in {"name": identity, **FOLDS}.items():
        seen: dict[str, tuple[str, Path]] = {}
        for name, path in named:
            folded = fold(name)
            if folded in seen:
                first, where = seen[folded]
                raise InputError(
                    f"{first!r} ({where}) and {name!r} share the {how} {folded!r}",
                    file=path,
                    field="name",
                    value=name,
                    hint="rename one of the two files (and its `name`) so they differ in letters or digits",
                )
            seen[folded] = (name, path)
