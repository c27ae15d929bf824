"""Plan a vllm-omni recipe's deployments: one single-node deployment per task."""

from __future__ import annotations

from factory.plan.commands import PlannedCommands, env_text
from factory.plan.deployment import node_role
from factory.project import Project
from factory.recipes.loader import LoadedRecipe
from factory.synthesis.features import default_features
from factory.synthesis.matrix import Combination
from factory.synthesis.omni import resolve_omni, tasks


def plan_omni(
    project: Project, loaded: LoadedRecipe, variant: str, hardware: str, weights: str
) -> list[PlannedCommands]:
    """`vllm serve MODEL ... --omni` for each task the recipe declares (its strategy: omni-<task>)."""
    profile = project.tree.taxonomy.hardware_profiles[hardware]
    features = tuple(default_features(loaded.recipe, hardware, variant))
    planned = []
    for index, task in enumerate(tasks(loaded.recipe)):
        command = resolve_omni(loaded.recipe, variant, task, profile, hardware)
        model = weights if command.model == loaded.recipe.model.model_id else command.model
        env = {key: env_text(value) for key, value in command.env.items()}
        role = node_role("node", 0, [model, *command.args], env)
        combination = Combination(variant, hardware, f"omni-{command.task}", 1, None, features, index == 0)
        planned.append(PlannedCommands(combination, "single_node", (role,), ()))
    return planned
