"""Plan one image: recipe x hardware x variant -> the install, base image, serve flags and names."""

from __future__ import annotations

import re

from packaging.version import Version

from factory import image_paths
from factory.catalog.schema import Hardware, Install
from factory.errors import InputError, RefusedError
from factory.plan import naming
from factory.plan.models import ImageSpec
from factory.plan.pins import pinned_vllm
from factory.project import Project
from factory.recipes.loader import LoadedRecipe
from factory.recipes.schema import ArgsAndEnv, Feature, Recipe
from factory.serve_args import flatten, resolve

# Health-check start period: vLLM images in the wild allow 300 to 480 s; a large model needs more
# (weights read from disk, CUDA graphs captured), so add 10 s per billion parameters.
BASE_START_PERIOD_S = 300
START_SECONDS_PER_BILLION = 10


def plan_image_spec(
    project: Project, loaded: LoadedRecipe, hardware_key: str, variant_name: str
) -> ImageSpec:
    recipe = loaded.recipe
    catalog = project.catalog
    if hardware_key not in catalog.hardware:
        raise InputError("unknown hardware", field="--hardware", value=hardware_key, valid=catalog.hardware)
    if variant_name not in recipe.variants:
        raise InputError(
            "unknown variant", file=loaded.path, field="variants", value=variant_name, valid=recipe.variants
        )
    hardware = catalog.hardware[hardware_key]
    install = catalog.installs[hardware.install]
    version = pinned_vllm(loaded, catalog)
    variant = recipe.variants[variant_name]
    model_id = variant.model_id or recipe.model.model_id
    bundled = project.relative(loaded.bundled_model_dir) if loaded.bundled_model_dir else None
    weights = f"{image_paths.BUNDLED_MODELS}/{model_id}" if bundled else model_id
    override_blocks = hardware_override_blocks(project, recipe, variant_name, hardware_key)
    features = enabled_features(recipe, hardware_key)
    image_slug = naming.slug(recipe, model_id)
    return ImageSpec(
        recipe_file=project.relative(loaded.path),
        recipe_id=recipe.model.model_id,
        model_id=model_id,
        weights=weights,
        bundled_model_src=bundled,
        revision=recipe.model.revision,
        slug=image_slug,
        variant=variant_name,
        hardware=hardware_key,
        hardware_name=hardware.display_name,
        vendor=hardware.vendor,
        platform=hardware.platform,
        gpu_arch=hardware.gpu_arch,
        gpus_per_node=hardware.gpus_per_node,
        vllm_version=version,
        install_kind=install.kind,
        package=install.package,
        torch_requirement=torch_requirement(install, version, hardware_key),
        extra_index_url=install.extra_index_url,
        remove_packages=install.remove_packages,
        remove_packages_reason=install.remove_packages_reason,
        system_packages=install.system_packages,
        base_image=base_image(hardware, install, version, hardware_key),
        env=_image_env(recipe, variant_name, override_blocks, features),
        entrypoint_args=_entrypoint_args(
            recipe, variant_name, weights, bundled, model_id, override_blocks, features
        ),
        start_period_s=start_period(recipe),
        repository=naming.repository(image_slug),
        tag=naming.tag(version, hardware_key, variant_name),
    )


def _entrypoint_args(
    recipe: Recipe,
    variant_name: str,
    weights: str,
    bundled: str | None,
    model_id: str,
    override_blocks: list[ArgsAndEnv],
    features: list[Feature],
) -> list[str]:
    """The serve flags every deployment of the image shares, in the site's order, later parts winning."""
    model_args = ["--model", weights]
    if bundled:
        model_args += ["--served-model-name", model_id]
    if recipe.model.revision:
        # --trust-remote-code runs the repository's code: pin code and weights to one commit.
        model_args += ["--revision", recipe.model.revision, "--code-revision", recipe.model.revision]
    flags = resolve(
        [
            ("model", model_args),
            ("base", recipe.model.base_args),
            ("variant", recipe.variants[variant_name].extra_args),
            ("hardware", [arg for block in override_blocks for arg in block.extra_args]),
            ("feature", [arg for feature in features for arg in feature.args]),
        ]
    )
    return flatten(flags)


def _image_env(
    recipe: Recipe, variant_name: str, override_blocks: list[ArgsAndEnv], features: list[Feature]
) -> dict[str, str]:
    env: dict[str, str] = {}
    for layer in (
        recipe.model.base_env,
        recipe.variants[variant_name].extra_env,
        *(block.extra_env for block in override_blocks),
        *(feature.env for feature in features),
    ):
        env.update(layer)
    return env


def hardware_override_blocks(
    project: Project, recipe: Recipe, variant_name: str, hardware_key: str
) -> list[ArgsAndEnv]:
    """Override blocks that apply, general to specific: brand, generation, then the hardware's own name."""
    hardware = project.catalog.hardware[hardware_key]
    profile = project.tree.taxonomy.hardware_profiles.get(hardware.taxonomy_profile or "")
    keys = [profile.brand.lower(), profile.generation.lower()] if profile else []
    keys.append(hardware.taxonomy_profile or hardware_key)
    blocks: list[ArgsAndEnv] = []
    for overrides in (recipe.hardware_overrides, recipe.variants[variant_name].hardware_overrides):
        blocks.extend(overrides[key] for key in dict.fromkeys(keys) if key in overrides)
    return blocks


def enabled_features(recipe: Recipe, hardware_key: str) -> list[Feature]:
    """Features that are on by default: not opt-in, globally or for this hardware."""
    off = set(recipe.opt_in_features) | set(recipe.hardware_opt_in_features.get(hardware_key, []))
    return [feature for name, feature in recipe.features.items() if name not in off]


def torch_requirement(install: Install, version: str, hardware_key: str) -> str | None:
    if not install.torch:
        return None
    for pin in install.torch:
        if pin.vllm == version:
            return pin.requirement
    raise RefusedError(
        f"no torch build recorded for {install.package}=={version} ({hardware_key}); the catalog knows "
        f"{', '.join(p.vllm for p in install.torch)}\n  hint: add a torch pin for it to catalog/hardware.yaml"
    )


def base_image(hardware: Hardware, install: Install, version: str, hardware_key: str) -> str:
    if install.kind == "pip":
        assert hardware.base_image is not None  # the catalog loader checks this
        return hardware.base_image
    for published in install.images:
        if published.vllm == version:
            return published.image
    known = ", ".join(f"{p.vllm} -> {p.image}" for p in install.images) or "(none)"
    wheels = install.wheels_from
    if wheels and Version(version) < Version(wheels.version):
        why = f"{wheels.source}, so vLLM {version} needs a vendor image with it preinstalled"
    else:
        why = "the factory does not build ROCm images from the wheel index yet"
    raise RefusedError(
        f"{hardware_key}: no vendor image with vLLM {version} is recorded in catalog/hardware.yaml; {why}\n"
        f"  known images: {known}"
    )


def start_period(recipe: Recipe) -> int:
    billions = _billions(recipe.model.parameter_count)
    return BASE_START_PERIOD_S + START_SECONDS_PER_BILLION * round(billions)


def _billions(count: str | None) -> float:
    match = re.fullmatch(r"\s*([\d.]+)\s*([BMT])\s*", count or "")
    if not match:
        return 0.0
    scale = {"M": 0.001, "B": 1.0, "T": 1000.0}[match.group(2)]
    return float(match.group(1)) * scale
