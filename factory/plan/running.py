"""Group a deployment's processes and give each group its run spec: one node; a head and one spec for every
worker rank; each PD pool's first node and one spec for its other nodes; the router.

The nodes of a group share one spec when their typed values are equal: a rank or a pool node's own address
is the same rule (FromIndex) on every node, so equal values mean one spec gives every node's command.
Nodes that differ in any other way (a recipe override for one rank) get a spec each.
"""

from __future__ import annotations

from collections.abc import Sequence

from factory.plan.models import NodeRole
from factory.plan.runspec import ProcessGroup, Run, process_spec

ROLE_LABEL = "ai.vllm.factory.role"
DEPLOYMENT_LABEL = "ai.vllm.factory.deployment"


def process_groups(
    roles: Sequence[NodeRole],
    run: Run,
    image: str,
    router_image: str,
    host_network: bool,
    platforms: tuple[str, str],  # the CPU platforms of the image and of the router's image
    deployment: str,
) -> tuple[ProcessGroup, ...]:
    groups: list[ProcessGroup] = []
    for role_name, members in _grouped(roles):
        first = members[0]
        shared = all(_same_values(member, first) for member in members[1:])
        for part in [members] if shared else [[member] for member in members]:
            one = part[0]
            router = one.program == "vllm-router"  # its own image; every other program runs the deployment's
            spec = process_spec(
                run,
                image=router_image if router else image,
                platform=platforms[1] if router else platforms[0],
                program=one.program,
                args=one.args,
                env=tuple(one.env.items()),
                options=one.options,
                host_network=host_network,
                labels={DEPLOYMENT_LABEL: deployment, ROLE_LABEL: role_name},
                launch=one.launch,
            )
            if all(member.rank == 0 for member in part):
                spec = spec.at(0)  # a head or a pool's first node alone: its values as written
            groups.append(
                ProcessGroup(
                    names=tuple(member.name for member in part),
                    indices=tuple(member.rank for member in part),
                    pool=first.pool,
                    spec=spec,
                )
            )
    return tuple(groups)


def _same_values(member: NodeRole, first: NodeRole) -> bool:
    mine, theirs = (
        (member.args, member.env, member.options, member.launch),
        (first.args, first.env, first.options, first.launch),
    )
    return mine == theirs


def _grouped(roles: Sequence[NodeRole]) -> list[tuple[str, list[NodeRole]]]:
    """(role, its processes): a deployment's head, workers, each pool's first node and others, the router."""
    found: dict[str, list[NodeRole]] = {}
    for role in roles:
        if role.program == "vllm-router":
            key = "router"
        elif role.program != "vllm":  # a Mooncake process: one of its kind
            key = role.name
        elif len(roles) == 1:
            key = "node"
        elif role.pool:
            key = role.pool if role.rank == 0 else f"{role.pool}-worker"
        else:
            key = "head" if role.rank == 0 else "worker"
        found.setdefault(key, []).append(role)
    return list(found.items())
