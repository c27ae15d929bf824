"""Plan one image: recipe x variant x hardware -> its install, base image, names and defaults."""

from __future__ import annotations

import re

from packaging.version import Version

from factory import image_paths
from factory.catalog.schema import Catalog, Hardware, Install
from factory.errors import RefusedError
from factory.plan import naming
from factory.plan.models import ImageSpec, InstallSpec
from factory.project import Project
from factory.recipes.loader import LoadedRecipe

# Health-check start period: vLLM images in the wild allow 300 to 480 s; a large model needs more
# (weights read from disk, CUDA graphs captured), so add 10 s per billion parameters.
BASE_START_PERIOD_S = 300
START_SECONDS_PER_BILLION = 10


def weights_of(project: Project, loaded: LoadedRecipe, model_id: str) -> tuple[str, str | None]:
    """What `vllm serve` gets (a hub id, or the folder an image carries), and that folder's source."""
    if loaded.bundled_model_dir is None:
        return model_id, None
    return f"{image_paths.BUNDLED_MODELS}/{model_id}", project.relative(loaded.bundled_model_dir)


def plan_image_spec(
    project: Project,
    loaded: LoadedRecipe,
    variant: str,
    hardware_key: str,
    version: str | None,
    default_command: list[str],
    env: dict[str, str],
) -> ImageSpec:
    recipe = loaded.recipe
    hardware = project.catalog.hardware[hardware_key]
    model_id = recipe.variants[variant].model_id or recipe.model.model_id
    weights, bundled = weights_of(project, loaded, model_id)
    install, unbuildable = install_spec(project.catalog, hardware_key, version)
    image_slug = naming.slug(loaded, model_id)
    return ImageSpec(
        recipe_file=project.relative(loaded.path),
        recipe_id=loaded.recipe_id,
        model_id=model_id,
        weights=weights,
        bundled_model_src=bundled,
        slug=image_slug,
        variant=variant,
        hardware=hardware_key,
        hardware_name=hardware.display_name,
        vendor=hardware.vendor,
        platform=hardware.platform,
        gpu_arch=hardware.gpu_arch,
        gpus_per_node=hardware.gpus_per_node,
        vllm_version=version,
        install=install,
        unbuildable=unbuildable,
        env=env,
        default_command=default_command,
        start_period_s=start_period(str(recipe.model.parameter_count or "")),
        repository=naming.repository(image_slug),
        tag=naming.tag(version, hardware_key, variant, loaded),
    )


def install_spec(
    catalog: Catalog, hardware_key: str, version: str | None
) -> tuple[InstallSpec | None, str | None]:
    """How the image installs vLLM, or why it cannot be built (no version, no vendor image, no torch)."""
    if version is None:
        return None, "no exact vLLM version: the recipe pins none (the lock resolves one)"
    hardware = catalog.hardware[hardware_key]
    install = catalog.installs[hardware.install]
    try:
        return (
            InstallSpec(
                kind=install.kind,
                package=install.package,
                torch_requirement=torch_requirement(install, version, hardware_key),
                extra_index_url=install.extra_index_url,
                remove_packages=install.remove_packages,
                remove_packages_reason=install.remove_packages_reason,
                system_packages=install.system_packages,
                base_image=base_image(hardware, install, version, hardware_key),
            ),
            None,
        )
    except RefusedError as exc:
        return None, str(exc)


def torch_requirement(install: Install, version: str, hardware_key: str) -> str | None:
    if not install.torch:
        return None
    for pin in install.torch:
        if pin.vllm == version:
            return pin.requirement
    raise RefusedError(
        f"no torch build recorded for {install.package}=={version} ({hardware_key}); the catalog knows "
        f"{', '.join(p.vllm for p in install.torch)}"
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
        f"{hardware_key}: no vendor image with vLLM {version} is recorded in the catalog; {why}"
        f" (known: {known})"
    )


def start_period(parameter_count: str | None) -> int:
    return BASE_START_PERIOD_S + START_SECONDS_PER_BILLION * round(_billions(parameter_count))


def _billions(count: str | None) -> float:
    match = re.fullmatch(r"\s*([\d.]+)\s*([BMT])\s*", count or "")
    if not match:
        return 0.0
    scale = {"M": 0.001, "B": 1.0, "T": 1000.0}[match.group(2)]
    return float(match.group(1)) * scale
