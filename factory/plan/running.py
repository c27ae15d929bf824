"""Group a deployment's processes and give each group its run spec: one node; a head and one spec for every
worker rank; each PD pool's first node and one spec for its other nodes; the router.

The nodes of a group share one spec when their typed values are equal: a rank or a pool node's own address
is the same rule (FromIndex) on every node, so equal values mean one spec gives every node's command.
Nodes that differ in any other way (a recipe override for one rank) get a spec each. Each spec is made by
process_spec: the process's command and what its server reads from it, everything else from the catalog.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import PurePosixPath

from factory.catalog.schema import PodRequests, Writable
from factory.plan.cache import cache_limit_gib
from factory.plan.deployment import NodeRole
from factory.plan.runspec import (
    Launch,
    ProcessGroup,
    Program,
    Programs,
    Run,
    RunSpec,
    Value,
    health_probe,
    listening_port,
)
from factory.synthesis.options import ServeOptions

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


def _requests(run: Run, program: Program, launch: Launch, gpus: int) -> PodRequests | None:
    """What a pod of the process asks for besides GPUs: the catalog's floor for its program, plus the memory
    its launch says it holds (once, and once per worker rank: one per GPU, one on CPU)."""
    server, mooncake = run.server, run.mooncake
    floors = {
        "vllm": run.vendor.pod_requests,
        "vllm-router": server.router_requests,
        "mooncake-master": mooncake.master.requests,
        "mooncake-store": mooncake.store.requests,
    }
    floor = floors[program]
    held = math.ceil((launch.holds_bytes + launch.holds_per_rank_bytes * max(1, gpus)) / 2**30)
    if floor is None or not held:
        return floor
    return floor.model_copy(update={"memory_gib": floor.memory_gib + held})


def process_spec(
    run: Run,
    image: str,
    platform: str,
    program: Program,
    args: Sequence[Value],
    env: Sequence[tuple[str, Value]],
    options: ServeOptions,
    host_network: bool,
    labels: dict[str, str],
    launch: Launch | None = None,
) -> RunSpec:
    """One process's spec: its command and what its server reads from it (`options`) from the plan,
    everything else from the catalog."""
    server, vendor = run.server, run.vendor
    programs = Programs(server=server, router=run.router, mooncake=run.mooncake)
    launch = launch or Launch()
    is_vllm = program == "vllm"
    master = program == "mooncake-master"
    probe = health_probe(programs, program, options, run.start_period_s)
    served = options.served_names or ((options.model,) if options.model else ())
    gpus = options.sizes.gpus(run.gpus_per_node) if is_vllm and vendor.gpu_check is not None else 0
    writable = _writable(run, program, launch)
    disk = sum(folder.size_gib for folder in writable)
    return RunSpec(
        image=image,
        platform=platform,
        program=program,
        entrypoint=launch.entrypoint,
        configs=launch.configs,
        after=launch.after,
        args=tuple(args),
        env=tuple(env),
        secrets=tuple(server.secrets) if is_vllm else (),
        gpu_request=vendor.gpu_request if is_vllm else None,
        gpus=gpus,
        devices=tuple(vendor.devices) if is_vllm else (),
        groups=tuple(group.group for group in vendor.group_add) if is_vllm else (),
        security_opt=tuple(vendor.security_opt) if is_vllm else (),
        # Mooncake pins memory for its transfers as NCCL does: the same capability
        capabilities=tuple(server.capabilities) if program != "vllm-router" else (),
        shm_size=vendor.shm_size if is_vllm else None,
        ulimits=_ulimits(run, program),
        port=listening_port(programs, program, options)[0],
        rpc_port=(options.rpc_port or run.mooncake.master.rpc_port) if master else None,
        served_names=served if is_vllm else (),
        network="host" if host_network else "published",
        probe=probe,
        volumes=tuple(server.volumes) if is_vllm else (),
        labels=tuple(sorted(labels.items())),
        gpu_resource=vendor.kubernetes_resource if is_vllm else None,
        restart=server.restart,
        publish_address=str(server.publish_address),
        requests=_requests(run, program, launch, gpus),
        cache_gb=run.cache_gb if is_vllm else None,
        cache_basis=run.cache_basis if is_vllm else None,
        user=server.user,
        writable=writable,
        liveness=server.liveness if probe is not None else None,
        disk_gib=(cache_limit_gib(run.cache_gb) if is_vllm else 0) + disk + server.log_room_gib,
    )


def _ulimits(run: Run, program: Program) -> tuple[tuple[str, int], ...]:
    """The server's limits (a stack size) for vLLM; the vendor's (an unlimited memlock, where RDMA registers
    memory) for vLLM and the Mooncake processes, which register theirs for transfers too."""
    limits = dict(run.server.ulimits) if program == "vllm" else {}
    limits |= run.vendor.ulimits if program != "vllm-router" else {}
    return tuple(limits.items())


def _writable(run: Run, program: Program, launch: Launch) -> tuple[Writable, ...]:
    """The folders a process writes on its read-only root, each sized by the vendor where it says: vLLM's
    HOME (its compile caches) and /tmp; every other program's /tmp only (the router's and Mooncake's logs and
    temporary files); and where a launcher fills a config, the folder it writes it to."""
    sizes = run.vendor.writable_gib
    found = [
        folder.model_copy(update={"size_gib": sizes.get(folder.name, folder.size_gib)})
        for folder in run.server.writable
        if program == "vllm" or folder.target == "/tmp"
    ]
    filled = sorted({str(PurePosixPath(config.filled).parent) for config in launch.configs})
    found += [
        Writable(name=f"filled-config-{n}" if n else "filled-config", target=folder, size_gib=1, what=FILLED)
        for n, folder in enumerate(filled)
    ]
    return tuple(found)


FILLED = "the config its launcher fills from the environment before the process starts"
