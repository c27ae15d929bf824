"""Group a deployment's processes and give each group its run spec: one node; a head and one spec for every
worker rank; each PD pool's first node and one spec for its other nodes; the router. Where the workers of a
group cannot share one spec (they differ other than by their rank's values), each gets its own."""

from __future__ import annotations

from collections.abc import Sequence

from factory.plan.models import NodeRole
from factory.plan.runspec import FromIndex, ProcessGroup, Run, Value, process_spec, template_of
from factory.synthesis.args import flag_value, int_value

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
        nodes = [(member.rank, member.args) for member in members]
        first = members[0]
        shared = template_of(nodes, first.pool)
        shared_env = _env_template(members)
        if shared_env is None:
            shared = None  # nodes whose environment differs other than by their own address: a spec each
        split = [[member] for member in members] if shared is None else [members]
        for part in split:
            one = part[0]
            args: Sequence[Value] = shared if shared is not None else one.args
            env = shared_env if shared is not None and shared_env is not None else tuple(one.env.items())
            port = flag_value(one.args, "--port")
            spec = process_spec(
                run,
                image=image if first.program == "vllm" else router_image,
                platform=platforms[0] if first.program == "vllm" else platforms[1],
                program=first.program,
                args=args,
                env=env,
                host_network=host_network,
                serves_http=first.serves_http,
                port=int_value(port),
                labels={DEPLOYMENT_LABEL: deployment, ROLE_LABEL: role_name},
            )
            groups.append(
                ProcessGroup(
                    names=tuple(member.name for member in part),
                    indices=tuple(member.rank for member in part),
                    pool=first.pool,
                    spec=spec,
                )
            )
    _check(groups, roles)
    return tuple(groups)


def _env_template(members: Sequence[NodeRole]) -> tuple[tuple[str, Value], ...] | None:
    """One environment for every node: a value that is each node's own pool address (a PD pool's
    VLLM_NIXL_SIDE_CHANNEL_HOST, $DECODE_NODE_<index + 1>) as a FromIndex, the others equal on every node.
    None when the nodes differ in any other way."""
    first = members[0]
    if any(member.env.keys() != first.env.keys() for member in members):
        return None
    found: list[tuple[str, Value]] = []
    for name, value in first.env.items():
        if all(member.env[name] == value for member in members):
            found.append((name, value))
            continue
        own = FromIndex(address_of=first.pool.upper()) if first.pool else None
        if own is None or any(member.env[name] != own.at(member.rank) for member in members):
            return None
        found.append((name, own))
    return tuple(found)


def _grouped(roles: Sequence[NodeRole]) -> list[tuple[str, list[NodeRole]]]:
    """(role, its processes): a deployment's head, workers, each pool's first node and others, the router."""
    found: dict[str, list[NodeRole]] = {}
    for role in roles:
        if role.program == "vllm-router":
            key = "router"
        elif len(roles) == 1:
            key = "node"
        elif role.pool:
            key = role.pool if role.rank == 0 else f"{role.pool}-worker"
        else:
            key = "head" if role.rank == 0 else "worker"
        found.setdefault(key, []).append(role)
    return list(found.items())


def _check(groups: list[ProcessGroup], roles: Sequence[NodeRole]) -> None:
    """A spec evaluated at each node's index gives that node's command and environment exactly."""
    by_name = {role.name: role for role in roles}
    for group in groups:
        for name in group.names:
            spec, role = group.node(name), by_name[name]
            if spec.argv != role.args or spec.environment != role.env:
                raise AssertionError(f"the run spec of {name} does not give its command: {spec.argv}")
