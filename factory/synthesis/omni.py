"""vllm-omni recipes: one `vllm serve MODEL ... --omni` per task (text to image, image to video, ...).

The site renders these on the recipe page only (its JSON API has none); the factory renders them with the
same rules: resolveOmniTasks, resolveOmniTaskForHardware and resolveOmniCommand (src/lib/).
"""

from __future__ import annotations

from dataclasses import dataclass

from factory.recipes.omni_schema import OmniTask
from factory.recipes.schema import Recipe
from factory.recipes.sections import EnvValue
from factory.recipes.tree_schema import HardwareProfile
from factory.synthesis.args import dedupe
from factory.synthesis.hardware import generation_block

# The task ids the site knows (src/lib/omni-tasks.js); a recipe's other ids render nothing there either.
TASK_IDS = ("t2i", "i2i", "t2v", "i2v", "ti2v", "t2a")


@dataclass(frozen=True)
class OmniCommand:
    task: str  # the task's key (its id unless two presets share one)
    binary: tuple[str, ...]  # `vllm serve`, or what omni.serve_binary names
    model: str
    args: tuple[str, ...]
    env: dict[str, EnvValue]


def tasks(recipe: Recipe) -> list[OmniTask]:
    declared = recipe.omni.tasks if recipe.omni else []
    found = []
    for entry in declared:
        task = OmniTask(id=entry) if isinstance(entry, str) else entry
        if task.id in TASK_IDS:
            found.append(task)
    return found


def resolve_omni(
    recipe: Recipe, variant_key: str, task: OmniTask, profile: HardwareProfile, profile_id: str
) -> OmniCommand:
    variant = recipe.variants.get(variant_key) or recipe.variants["default"]
    override = task.hardware_overrides.get(profile_id)
    model = (
        (override.model_id if override else None)
        or task.model_id
        or variant.model_id
        or recipe.model.model_id
    )
    task_args = [*task.extra_args, *(override.extra_args if override else [])]
    not_default = variant_key != "default"
    recipe_block = generation_block(recipe.hardware_overrides, profile)
    variant_block = generation_block(variant.hardware_overrides, profile)
    exact = variant.hardware_overrides.get(profile_id)
    env: dict[str, EnvValue] = dict(recipe.model.base_env)
    if not_default:
        env.update(variant.extra_env)
    for block in (recipe_block, variant_block, exact):
        env.update(block.extra_env if block else {})
    args = [*recipe.model.base_args, *(variant.extra_args if not_default else []), *task_args]
    for block in (recipe_block, variant_block, exact):
        args += block.extra_args if block else []
    if recipe.omni and recipe.omni.port:
        args += ["--port", str(recipe.omni.port)]
    args.append("--omni")
    binary = (recipe.omni.serve_binary if recipe.omni and recipe.omni.serve_binary else "vllm serve").split()
    return OmniCommand(task.key or task.id, tuple(binary), model, tuple(dedupe(args)), env)
