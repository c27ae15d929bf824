"""`factory renderings`: every deployment the factory generates as one JSON object, in the shape of the
upstream recipes site's JSON API (`argv` for one node; `head_argv` and `worker_argvs` for several; `prefill`,
`decode` and `router` for pd_cluster), plus the image and the deviations: each with its reason and the edits
its rule made, keyed by the process's path in this object (`argv`, `head_argv`, `worker_argvs[0]`,
`roles.prefill.argv`, ...). Combinations the factory does not generate are objects with the same keys and
`skipped: <reason>`."""

from __future__ import annotations

from typing import Any

from factory.generate.blueprint import Blueprint, Blueprints
from factory.plan.models import Deployment, NodeRole, Skipped
from factory.recipes.loader import LoadedRecipe, RecipeProblem
from factory.synthesis.kv_store import KvCommand


def rendering(blueprint: Blueprint, deployment: Deployment) -> dict[str, Any]:
    image = blueprint.image
    found: dict[str, Any] = {
        "model": image.model_id,
        "recipe": image.recipe_id,
        "variant": image.variant,
        "hardware": image.hardware,
        "strategy": deployment.strategy,
        "node_count": deployment.nodes,
        "deploy_type": deployment.deploy_type,
        "recommended": deployment.recommended,
        "image": image.reference,
        # The version the deviation rules were judged by: the lock's, else the recipe's floor, else unknown.
        "vllm_version": blueprint.judged.text,
        "vllm_version_from": blueprint.judged.source,
        "buildable": image.install is not None,
    }
    vllm_roles = [role for role in deployment.roles if role.program == "vllm"]
    if deployment.deploy_type == "pd_cluster":
        found["roles"] = _pd_roles(deployment)
    elif deployment.deploy_type == "multi_node":
        found["env"] = vllm_roles[0].env
        found["head_argv"] = vllm_roles[0].argv
        found["worker_argvs"] = [role.argv for role in vllm_roles[1:]]
    else:
        found["env"] = vllm_roles[0].env
        found["argv"] = vllm_roles[0].argv
    found["ignored"] = list(blueprint.ignored)
    found["deviations"] = [
        {"flag": d.flag, "reason": d.reason, "edits": [edit.model_dump() for edit in d.edits]}
        for d in deployment.deviations
    ]
    return found


def _pd_roles(deployment: Deployment) -> dict[str, Any]:
    roles: dict[str, Any] = {}
    for pool in ("prefill", "decode"):
        members: list[NodeRole] = [role for role in deployment.roles if role.pool == pool]
        roles[pool] = {
            "argv": members[0].argv,
            "env": members[0].env,
            "nodes": len(members),
            "node_argvs": [role.argv for role in members],
        }
    router = next(role for role in deployment.roles if role.program == "vllm-router")
    roles["router"] = {"argv": router.argv}
    return roles


def skipped_line(skipped: Skipped) -> dict[str, Any]:
    return {
        "model": skipped.model,
        "recipe": skipped.recipe,
        "variant": skipped.variant,
        "hardware": skipped.hardware,
        "strategy": skipped.strategy,
        "skipped": skipped.reason,
    }


def problem_line(problem: RecipeProblem) -> dict[str, Any]:
    return {"recipe": problem.recipe_id, "file": str(problem.path), "skipped": problem.one_line()}


def kv_rendering(loaded: LoadedRecipe, kv: KvCommand) -> dict[str, Any]:
    """A Mooncake KV-store deployment in the site's keys (`vllm_argv` the first instance's head,
    `vllm_worker_argvs` its follower ranks), every instance's processes besides. Its commands are the
    site's, with no deviation applied: the factory generates no files from them yet (`generated`)."""
    first = kv.instances[0].nodes
    return {
        "model": kv.model,
        "recipe": loaded.recipe_id,
        "variant": kv.variant,
        "hardware": kv.hardware,
        "strategy": kv.store_id,
        "node_count": kv.node_count,
        "deploy_type": "kv_store_lb",
        "generated": False,
        "serving_strategy": kv.serving,
        "kv_min_vllm_version": kv.store.min_vllm_version,
        "instances": len(kv.instances),
        "env": kv.env,
        "vllm_argv": first[0].argv(kv.model),
        "vllm_worker_argvs": [node.argv(kv.model) for node in first[1:]] or None,
        "instance_argvs": [[node.argv(kv.model) for node in instance.nodes] for instance in kv.instances],
        "vllm_install": kv.install,
        "master": {"command": kv.master},
        "store": {"command": kv.store_command, "config": kv.store_config} if kv.store_command else None,
        "router_argv": list(kv.router) or None,
        "mooncake_config": kv.vllm_config,
        "ignored": [key.field for key in loaded.ignored],
    }


def all_renderings(blueprints: Blueprints) -> list[dict[str, Any]]:
    """Every rendering, then every skipped combination, then every recipe that could not be planned."""
    lines = [rendering(bp, deployment) for bp in blueprints.images for deployment in bp.deployments]
    lines += [kv_rendering(loaded, kv) for loaded, kv in blueprints.kv_stores]
    lines += [skipped_line(skipped) for skipped in blueprints.skipped]
    lines += [problem_line(problem) for problem in blueprints.problems]
    return lines
