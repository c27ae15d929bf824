"""`factory renderings`: every deployment the factory generates as one JSON object, in the shape of the
upstream recipes site's JSON API (`argv` for one node; `head_argv` and `worker_argvs` for several; `prefill`,
`decode` and `router` for pd_cluster), plus the image and the deviations: each with its reason and the edits
its rule made, keyed by the process's path in this object (`argv`, `head_argv`, `worker_argvs[0]`,
`roles.prefill.argv`, ...). Combinations the factory does not generate are objects with the same keys and
`skipped: <reason>`."""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from pathlib import PurePosixPath
from typing import Any

from factory.base.outputs import OutputFile
from factory.blueprint import Blueprint, Blueprints
from factory.plan.commands import env_text
from factory.plan.deployment import Deployment, NodeRole, Skipped
from factory.project import Project
from factory.recipes.loader import LoadedRecipe, RecipeProblem
from factory.render.bake import BakeTarget
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


def kv_rendering(
    loaded: LoadedRecipe, kv: KvCommand, generated: tuple[Blueprint, Deployment] | None
) -> dict[str, Any]:
    """A Mooncake KV-store deployment in the site's keys (`vllm_argv` the first instance's head,
    `vllm_worker_argvs` its follower ranks, `store`, `router_argv`, `mooncake_config`), every instance's
    processes besides. Generated: the factory's processes and configs, with the deviations and the edits
    that made them from the site's; else (no image planned for it) the site's commands as synthesized."""
    first = kv.instances[0].nodes
    found: dict[str, Any] = {
        "model": kv.model,
        "recipe": loaded.recipe_id,
        "variant": kv.variant,
        "hardware": kv.hardware,
        "strategy": kv.store_id,
        "node_count": kv.node_count,
        "deploy_type": "kv_store_lb",
        "generated": generated is not None,
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
    if generated is not None:
        found |= _generated_kv(kv, *generated)
    return found


def _generated_kv(kv: KvCommand, blueprint: Blueprint, deployment: Deployment) -> dict[str, Any]:
    roles = {role.name: role for role in deployment.roles}
    heads = [role for role in deployment.roles if role.pool and role.pool.startswith("instance-")]
    first = [role for role in heads if role.pool == "instance-1"]
    found: dict[str, Any] = {
        "image": blueprint.image.reference,
        "buildable": blueprint.image.install is not None,
        "vllm_version": blueprint.judged.text,
        "vllm_version_from": blueprint.judged.source,
        # the site's values where the factory kept them (in their JSON types), else the factory's
        "env": {
            name: kv.env[name] if name in kv.env and env_text(kv.env[name]) == value else value
            for name, value in first[0].environment.items()
        },
        "vllm_argv": first[0].argv,
        "vllm_worker_argvs": [role.argv for role in first[1:]] or None,
        "instance_argvs": [
            [role.argv for role in heads if role.pool == f"instance-{number}"]
            for number in range(1, len(kv.instances) + 1)
        ],
        "router_argv": roles["router"].argv if "router" in roles else None,
        "mooncake_config": _config(first[0]),
        "deviations": [
            {"flag": d.flag, "reason": d.reason, "edits": [edit.model_dump() for edit in d.edits]}
            for d in deployment.deviations
        ],
    }
    if "store" in roles:
        store = roles["store"]
        found["store"] = {"command": shlex.join(store.argv), "config": _config(store)}
        found["store_argv"] = store.argv
    return found


def _config(role: NodeRole) -> dict[str, Any]:
    """The values of the Mooncake config a process reads, as generated (its do-not-edit line aside)."""
    values: dict[str, Any] = json.loads(role.launch.configs[0].content) if role.launch.configs else {}
    values.pop("comment", None)
    return values


def all_renderings(blueprints: Blueprints) -> list[dict[str, Any]]:
    """Every rendering, then every skipped combination, then every recipe that could not be planned."""
    generated = {
        (bp.image.recipe_id, bp.image.variant, bp.image.hardware, d.strategy): (bp, d)
        for bp in blueprints.images
        if bp.kv_store
        for d in bp.deployments
    }
    lines = [
        rendering(bp, deployment)
        for bp in blueprints.images
        if not bp.kv_store
        for deployment in bp.deployments
    ]
    lines += [
        kv_rendering(loaded, kv, generated.get((loaded.recipe_id, kv.variant, kv.hardware, kv.store_id)))
        for loaded, kv in blueprints.kv_stores
    ]
    lines += [skipped_line(skipped) for skipped in blueprints.skipped]
    lines += [problem_line(problem) for problem in blueprints.problems]
    return lines


class RenderingsFormat:
    """`factory renderings`: each deployment as one JSON object in the site's JSON API shape, printed (written
    nowhere). A KV-store deployment's object is made from the site's own KV command beside it (kv_rendering):
    all_renderings prints those, with the combinations skipped and the recipes that failed."""

    name = "renderings"
    writes = None
    # What the site's JSON API has no key for: the run spec beyond each process's argv and environment.
    cannot_express = dict.fromkeys(
        ("after", "configs", "probe", "port", "volumes", "requests", "restart", "secrets"),
        "the site's JSON API names each process's argv and environment only",
    )

    def render(self, blueprint: Blueprint, deployment: Deployment) -> list[OutputFile]:
        if blueprint.kv_store:
            return []
        line = json.dumps(rendering(blueprint, deployment), ensure_ascii=False)
        path = PurePosixPath("renderings", deployment.image.slug, f"{deployment.layout}.json")
        return [OutputFile(path, line.encode())]

    def finish(self, project: Project, targets: Sequence[BakeTarget]) -> list[OutputFile]:
        return []
