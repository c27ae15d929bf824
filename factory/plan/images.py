"""Plan one image: recipe x variant x hardware -> its install, base image, names and defaults."""

from __future__ import annotations

import re

from packaging.requirements import Requirement
from packaging.version import Version

from factory.base import image_paths
from factory.catalog.platform import CROSS_INSTALLED, PYTHON_PLATFORMS
from factory.lockfile.model import (
    INDEX_UNREACHABLE,
    MOONCAKE,
    NO_BASE_IMAGE,
    NO_CITED_SOURCE,
    NO_RELEASE,
    NOT_LOCKED,
    NOT_RESOLVABLE,
    NOT_SERVED,
    MooncakeSet,
    Release,
    canonical_name,
    set_key,
    split_layers,
    split_omni,
    uv_key,
    vendor_image_key,
)
from factory.lockfile.store import set_text
from factory.plan import naming
from factory.plan.models import ImageSpec, InstallSpec
from factory.plan.runspec import Programs, health_probe
from factory.project import Project
from factory.recipes.loader import LoadedRecipe
from factory.synthesis import options

# Health-check start period: vLLM images in the wild allow 300 to 480 s; a large model needs more
# (weights read from disk, CUDA graphs captured), so add 10 s per billion parameters.
BASE_START_PERIOD_S = 300
START_SECONDS_PER_BILLION = 10


def weights_of(project: Project, loaded: LoadedRecipe, model_id: str) -> tuple[str, str | None]:
    """What `vllm serve` gets (a hub id, or the folder an image carries), and that folder's source."""
    if loaded.bundled_model_dir is None:
        return model_id, None
    return f"{image_paths.BUNDLED_MODELS}/{model_id}", project.relative(loaded.bundled_model_dir)


def locked_release(project: Project, loaded: LoadedRecipe, variant: str, hardware_key: str) -> Release:
    """The release the lock holds for the image's install, or why there is none."""
    install = project.catalog.hardware[hardware_key].install
    if project.lock is None:
        return Release(vllm=None, why="no lock yet: run `factory lock`", constraint="", cause=NOT_LOCKED)
    found = project.lock.releases.get(loaded.recipe_id, {}).get(variant, {}).get(install)
    if found is None:
        why = f"the lock holds no release for {install}: run `factory lock`"
        return Release(vllm=None, why=why, constraint="", cause=NOT_LOCKED)
    return found


def plan_image_spec(
    project: Project,
    loaded: LoadedRecipe,
    variant: str,
    hardware_key: str,
    release: Release,
    default_command: list[str],
    env: dict[str, str],
) -> ImageSpec:
    recipe = loaded.recipe
    hardware = project.catalog.hardware[hardware_key]
    model_id = recipe.variants[variant].model_id or recipe.model.model_id
    weights, bundled = weights_of(project, loaded, model_id)
    install, unbuildable, cause = install_spec(project, hardware_key, release)
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
        vllm_version=release.vllm,
        install=install,
        unbuildable=unbuildable,
        unbuildable_cause=cause,
        passed_over=passed_over(project, release, hardware.platform),
        env=env,
        default_command=default_command,
        tasks=list(recipe.meta.tasks),
        start_period_s=model_start_period(recipe.model.parameter_count),
        health=health_probe(
            Programs(server=project.catalog.server, router=project.catalog.router),
            "vllm",
            options.read(default_command),
            model_start_period(recipe.model.parameter_count),
        ),
        weights_gb=weights_size(recipe.variants[variant].vram_minimum_gb),
        user=project.catalog.server.user,
        owned_folders=project.catalog.server.user.owned,
        repository=naming.repository(image_slug),
        tag=naming.tag(release.vllm, hardware_key, variant, loaded),
    )


def passed_over(project: Project, release: Release, platform: str) -> list[str]:
    """What the lock recorded of each release it passed over for this image's platform, for people."""
    records = (project.lock.passed_over or {}) if project.lock else {}
    found = [records[key] for key in release.passed_over or [] if key in records]
    return [record.describe() for record in found if record.platform == platform]


def install_spec(
    project: Project, hardware_key: str, release: Release
) -> tuple[InstallSpec | None, str | None, str | None]:
    """How the image installs vLLM, from the lock alone, or why it cannot be built here and the cause."""
    if release.vllm is None:
        return None, release.why, release.cause or NO_RELEASE
    hardware = project.catalog.hardware[hardware_key]
    install = project.catalog.installs[hardware.install]
    common = {
        "kind": install.kind,
        "package": install.package,
        "python": install.python,
        "extra_index_url": project.catalog.extra_index_url(install, hardware.platform, release.vllm),
        "system_packages": install.system_packages,
    }
    if install.kind == "vendor-image":
        if release.base_image is None:
            why = f"no vendor image with vLLM {release.vllm} is known for {hardware_key}"
            return None, why, NO_CITED_SOURCE
        cited = {image.image: image.python for image in install.images}
        common["python"] = cited.get(release.base_image, install.python)
        return InstallSpec(**common, base_image=release.base_image), None, None
    assert project.lock is not None and install.python is not None
    key = set_key(
        install.package, release.vllm, hardware.platform, install.accelerator, install.python, release.omni
    )
    locked = project.lock.sets.get(key)
    uv = project.lock.sets.get(uv_key(project.catalog.uv, hardware.platform))
    if locked is None or uv is None or uv.requirements is None:
        return None, f"the lock has no locked set {key}: run `factory lock`", NOT_LOCKED
    if locked.unresolvable or locked.requirements is None:
        detail = NOT_SERVED if locked.missing else NOT_RESOLVABLE
        cause = locked.cause or (INDEX_UNREACHABLE if locked.unreachable_index else detail)
        return None, f"the locked set {key} cannot be resolved: {locked.unresolvable}", cause
    base = hardware.base_image or install.base_images.get(locked.cuda or "")
    if base is None:
        return None, f"no base image for CUDA {locked.cuda} in the catalog", NO_BASE_IMAGE
    text = set_text(project.lock_path, locked.requirements, locked.digest)
    omni_part = ""
    if release.omni is not None and project.catalog.omni is not None:
        text, omni_part = split_omni(text, locked.heavy, project.catalog.omni.package)
    heavy, dependencies, itself = split_layers(text, locked.heavy, install.package)
    # The indexes of this set's torch (a torch source adds some on a platform, by torch release).
    extra = project.catalog.extra_index_url(install, hardware.platform, release.vllm, locked.torch)
    cross = hardware.platform in CROSS_INSTALLED
    spec = InstallSpec(
        **common | {"extra_index_url": extra},
        python_platform=PYTHON_PLATFORMS[hardware.platform] if cross else None,
        base_image=base,
        lock_key=key,
        local_wheels=install.local_wheels,
        torch=locked.torch,
        stand_in=locked.stand_in,
        cuda=locked.cuda,
        uv_requirements=set_text(project.lock_path, uv.requirements, uv.digest),
        heavy_requirements=heavy,
        dependency_requirements=dependencies,
        requirements=itself,
        omni=release.omni,
        omni_requirements=omni_part,
    )
    return spec, None, None


# SCHEMA.md: vram_minimum_gb = ceil(params x bytes x 1.2), the weights and 20 % of room.
VRAM_PER_WEIGHT = 1.2


def weights_size(vram_minimum_gb: float | None) -> float | None:
    """The checkpoint's size on disk in GB, from the VRAM the recipe says it needs."""
    if vram_minimum_gb is None or not 0 < vram_minimum_gb < 1e6:
        return None
    return round(vram_minimum_gb / VRAM_PER_WEIGHT, 1)


def model_start_period(parameter_count: str | int | float | None) -> int:
    """A vLLM process's start budget for a model of this size (the recipe's parameter_count)."""
    return BASE_START_PERIOD_S + START_SECONDS_PER_BILLION * round(_billions(str(parameter_count or "")))


def _billions(count: str | None) -> float:
    match = re.fullmatch(r"\s*([\d.]+)\s*([BMT])\s*", count or "")
    if not match:
        return 0.0
    scale = {"M": 0.001, "B": 1.0, "T": 1000.0}[match.group(2)]
    return float(match.group(1)) * scale


# What a KV-store image's tag adds to its plain image's: the same vLLM, hardware and variant, with Mooncake.
KV_TAG_SUFFIX = "-mooncake"


def kv_image_spec(project: Project, plain: ImageSpec, floor: str | None) -> ImageSpec:
    """A plain image with Mooncake (a KV-store deployment's image): every layer the plain image's, then the
    Mooncake layer the lock resolved against its vLLM set (on a vendor image: the layer resolved for the
    install's vendor images, which the build fits onto the image's own packages). Not buildable (with why)
    where the plain image is not, on a release older than the kv_store files' floor, or before `factory lock`
    resolved the layer."""
    vendor = project.catalog.vendors[plain.vendor]
    spec = plain.model_copy(
        update={"tag": naming.tag_with(plain.tag, KV_TAG_SUFFIX), "unbuildable_cause": None}
    )
    why = _kv_refusal(project, plain, floor)
    if why is not None or vendor.mooncake is None or plain.install is None:
        why = why or "the catalog names no Mooncake wheel for this vendor"
        return spec.model_copy(update={"install": None, "unbuildable": why, "unbuildable_cause": MOONCAKE})
    layer = _mooncake_layer(project, plain)
    if layer is None or layer.requirements is None:
        why = (
            layer.unresolvable
            if layer is not None
            else "the lock has no Mooncake layer for it: run `factory lock`"
        )
        return spec.model_copy(update={"install": None, "unbuildable": why, "unbuildable_cause": MOONCAKE})
    install = plain.install.model_copy(
        update={
            "mooncake": layer.version,
            "mooncake_package": canonical_name(Requirement(layer.requirement).name),
            "mooncake_requirements": set_text(project.lock_path, layer.requirements, layer.digest),
            "mooncake_system_packages": list(vendor.mooncake.system_packages),
        }
    )
    # the folder its launcher writes the filled Mooncake configs to, the user's like its caches
    folders = sorted({*plain.owned_folders, project.catalog.mooncake.filled_dir})
    return spec.model_copy(update={"install": install, "owned_folders": folders})


def _kv_refusal(project: Project, plain: ImageSpec, floor: str | None) -> str | None:
    if plain.install is None:
        return plain.unbuildable or "its plain image is not buildable"
    if plain.install.omni:
        return "vllm-omni images serve no KV store"
    if floor is not None and plain.vllm_version is not None and Version(plain.vllm_version) < Version(floor):
        return (
            f"Mooncake KV stores need vLLM {floor} or later (the kv_store files' min_vllm_version); this "
            f"image runs {plain.vllm_version}"
        )
    return None


def _mooncake_layer(project: Project, plain: ImageSpec) -> MooncakeSet | None:
    """The lock's Mooncake layer for the image: the one resolved against its vLLM set, or for a vendor image
    the one resolved for its install's images of its platform and Python."""
    install = plain.install
    if project.lock is None or install is None:
        return None
    if install.kind == "vendor-image":
        name = project.catalog.hardware[plain.hardware].install
        on = vendor_image_key(name, plain.platform, install.python or "")
    elif install.lock_key is not None:
        on = install.lock_key
    else:
        return None
    return next((layer for layer in (project.lock.mooncake or {}).values() if layer.on == on), None)
