"""What a setting becomes in a pod: the one table from compose's settings to pod values ($(VAR) references and
where each comes from), per process group (a P/D pool's node addresses are stable DNS names), and the pod's
command and environment printed through it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from factory.base.errors import InputError
from factory.plan.deployment import Deployment
from factory.plan.kv import MASTER, STORE, instance_number, instance_pool
from factory.plan.runspec import FromIndex, ProcessGroup, RunSpec, Value
from factory.plan.settings import PLACEHOLDER, known_setting
from factory.render.kubernetes.names import ROUTER, object_name, unit, units_of
from factory.synthesis.kv_store import instance_setting
from factory.synthesis.values import pool_node_setting, read_pool_node

INDEX = "$(LWS_WORKER_INDEX)"  # LWS's pod webhook sets it in every container: 0 is the leader
POD_IP = "POD_IP"
# A value computed from the index (a data-parallel start rank: index x the local DP size) needs arithmetic,
# which Kubernetes' $(VAR) does not do: this fixed line multiplies one positional argument and starts the
# image's launcher with the rest. Every recipe value reaches it as an argument, never as shell text.
RANK_SCRIPT = (
    'at=$1 times=$2; shift 2; i=0; for arg; do shift; i=$((i + 1)); [ "$i" = "$at" ] && '
    'arg=$((arg * times)); set -- "$@" "$arg"; done; exec factory-serve "$@"'
)


@dataclass(frozen=True)
class PodValue:
    """What a compose setting becomes in a pod: text with $(VAR) references, and where each VAR comes from."""

    text: str
    env: tuple[tuple[str, dict[str, Any]], ...] = ()  # env entries the text needs (from the downward API)
    config: bool = False  # the setting is a key of the deployment's ConfigMap, its default the value


# The one table from compose settings to pod values; a setting not here cannot be printed for Kubernetes.
SETTING_VALUES: dict[str, PodValue] = {
    # LWS's webhook gives every pod of a group the leader's DNS name.
    "HEAD_IP": PodValue("$(LWS_LEADER_ADDRESS)"),
    # In a pod, a serving process listens on the pod's address, not on the host's loopback.
    "BIND_ADDRESS": PodValue(
        f"$({POD_IP})", env=((POD_IP, {"valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}),)
    ),
    "MASTER_PORT": PodValue("$(MASTER_PORT)", config=True),
    "DP_RPC_PORT": PodValue("$(DP_RPC_PORT)", config=True),
    "IFACE_NAME": PodValue("$(IFACE_NAME)", config=True),
}


@dataclass(frozen=True)
class Table:
    """The setting values of one process group: SETTING_VALUES, and for a PD process its pool addresses."""

    values: dict[str, PodValue]
    # a PD pool process's pool: its own address (a FromIndex, a bound variable) is its pod's
    own_pool: str | None = None


DEFAULT = Table(SETTING_VALUES)
# ConfigMap values where a setting has no default on a host: a pod's network interface is eth0.
CONFIG_DEFAULTS = {"IFACE_NAME": "eth0"}
# Variables naming an address vLLM binds on the process's own node (NIXL's side channel listens there): in a
# pod that is the pod's address, whichever node compose names (a headless TP rank's names the pool's first).
BOUND_ENV = ("VLLM_NIXL_SIDE_CHANNEL_HOST",)
POD_ADDRESS_SETTING = "BIND_ADDRESS"
POD_ADDRESS = SETTING_VALUES[POD_ADDRESS_SETTING]  # $(POD_IP), from status.podIP


def pool_address(value: Value) -> tuple[str, int] | None:
    """(pool, node number) of a value that is one pool node's address setting ($DECODE_NODE_2)."""
    match = PLACEHOLDER.fullmatch(value) if isinstance(value, str) else None
    return read_pool_node(match["braced"] or match["bare"]) if match else None


def pool_names(deployment: Deployment) -> dict[str, str]:
    """Each pool's LWS name (also the name of LWS's headless Service over its pods), by pool."""
    pools = dict.fromkeys(group.pool for group in deployment.run if group.pool)
    return {pool: object_name(deployment, pool) for pool in pools}


def pool_sizes(deployment: Deployment) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for group in deployment.run:
        if group.pool:
            sizes[group.pool] = sizes.get(group.pool, 0) + len(group.names)
    return sizes


def node_address(deployment: Deployment, pool: str, node: int) -> str:
    """The stable DNS name of a pool's node (1: its first) in LWS's group 0: never a pod IP."""
    lws = pool_names(deployment)[pool]
    return f"{lws}-0.{lws}" if node == 1 else f"{lws}-0-{node - 1}.{lws}"


def table_of(deployment: Deployment, group: ProcessGroup, index: int | None = None) -> Table:
    """The setting values of one group (of its node at `index`, as compose names that node's own address):
    for a pool's node, its own address is its pod's and the pool's first node is the LWS leader; for the
    router, each pool node is its stable DNS name, and it listens on its pod's address at the port its Service
    targets."""
    own = (index,) if index is not None else group.indices
    if deployment.deploy_type == "kv_store_lb":
        return _kv_table(deployment, group, own)
    if deployment.deploy_type != "pd_cluster":
        return DEFAULT
    values = dict(SETTING_VALUES)
    sizes = pool_sizes(deployment)
    for pool, size in sizes.items():
        values[f"{pool.upper()}_DP_RPC_PORT"] = PodValue(f"$({pool.upper()}_DP_RPC_PORT)", config=True)
        for node in range(1, size + 1):
            key = pool_node_setting(pool, node)
            if group.pool is None:
                values[key] = PodValue(node_address(deployment, pool, node))
            elif pool == group.pool and own == (node - 1,):
                values[key] = POD_ADDRESS
            elif pool == group.pool and node == 1:
                values[key] = SETTING_VALUES["HEAD_IP"]  # $(LWS_LEADER_ADDRESS): the pool's first node
    if group.pool is None:
        values["ROUTER_HOST"] = POD_ADDRESS
        values["ROUTER_PORT"] = PodValue(str(group.spec.port))  # the port its Service targets
    return Table(values, group.pool)


# A KV store's settings a user changes with a patch of the ConfigMap: the RDMA NICs ("" auto-selects).
KV_CONFIG_SETTINGS = ("MOONCAKE_DEVICE_NAME", "MOONCAKE_STORE_DEVICE_NAME")


def _kv_table(deployment: Deployment, group: ProcessGroup, own: tuple[int, ...]) -> Table:
    """A KV-store process's setting values: the master by its Service's name; the store's own address (its
    local_hostname) its pod's, because the store advertises it to every instance with ports it picks at
    random, which no Service forwards; an instance's own address its pod's (it listens there), a worker rank
    meeting its head at the LWS leader; for the router, each instance by its Service's name, and it listens
    on its pod's address at the port its Service targets."""
    values = dict(SETTING_VALUES)
    units = units_of(deployment)  # computed once per deployment: this runs for each of its groups
    services, part = units.services, unit(group)
    values["MOONCAKE_MASTER_IP"] = PodValue(services[MASTER])
    values |= {name: PodValue(f"$({name})", config=True) for name in KV_CONFIG_SETTINGS}
    if part == STORE:
        values["MOONCAKE_STORE_IP"] = POD_ADDRESS
    if part == ROUTER:  # the router calls every instance
        count = sum(1 for groups in units.groups.values() if groups[0].pool)
        for number in range(1, count + 1):
            values[instance_setting(number)] = PodValue(services[instance_pool(number)])
    elif group.pool:  # an instance's own address, or its head's
        number = instance_number(group.pool)
        values[instance_setting(number)] = POD_ADDRESS if own == (0,) else SETTING_VALUES["HEAD_IP"]
    if part == ROUTER:
        values["ROUTER_HOST"] = POD_ADDRESS
        values["ROUTER_PORT"] = PodValue(str(group.spec.port))  # the port its Service targets
    return Table(values)


def pod_text(value: str, where: str, table: Table = DEFAULT) -> tuple[str, list[str]]:
    """A value as a pod field: every literal `$` doubled (Kubernetes reads $$ as $), each setting its $(VAR)
    from the table (SETTING_VALUES). Returns the text and the settings it names."""
    values = table.values
    parts: list[str] = []
    names: list[str] = []
    last = 0
    for match in PLACEHOLDER.finditer(value):
        name = match.group("braced") or match.group("bare")
        if known_setting(name) is None:
            continue
        if name not in values:
            raise InputError(
                f"{where} uses ${name}, which has no value in a pod",
                field="setting",
                value=name,
                valid=sorted(values),
            )
        parts.append(value[last : match.start()].replace("$", "$$"))
        parts.append(values[name].text)
        names.append(name)
        last = match.end()
    parts.append(value[last:].replace("$", "$$"))
    return "".join(parts), names


def pod_command(
    spec: RunSpec, where: str, table: Table = DEFAULT
) -> tuple[list[str] | None, list[str], list[str]]:
    """(command, args, settings used): the image's entrypoint with the args, or the rank line when a value
    needs arithmetic."""
    args: list[str] = []
    names: list[str] = []
    computed: list[tuple[int, FromIndex]] = []
    for position, arg in enumerate(spec.args, start=1):
        if isinstance(arg, FromIndex):
            if arg.address_of is not None:
                if arg.address_of != table.own_pool:  # its own node's address: its pod's
                    raise InputError(
                        f"{where}: a pool node's address has no pod value", field="args", value=arg
                    )
                args.append(POD_ADDRESS.text)
                names.append(POD_ADDRESS_SETTING)
                continue
            if arg.times != 1:
                computed.append((position, arg))
            args.append(INDEX)
            continue
        text, used = pod_text(arg, where, table)
        args.append(text)
        names += used
    if not computed:
        return None, args, names
    if len(computed) > 1 or spec.program != "vllm":
        raise InputError(f"{where}: only one computed rank value is supported", field="args", value=computed)
    position, value = computed[0]
    script = RANK_SCRIPT.replace("$", "$$")  # Kubernetes reads $$ as $: the shell gets the line as written
    return ["sh", "-c", script, "vllm-factory", str(position), str(value.times)], args, names


def env_value(name: str, value: Value, where: str, table: Table = DEFAULT) -> tuple[str, list[str]]:
    own = FromIndex(address_of=table.own_pool)
    if table.own_pool and (value == own or (name in BOUND_ENV and pool_address(value) is not None)):
        # its own node's address, or one vLLM binds on its own node whichever node compose names
        return POD_ADDRESS.text, [POD_ADDRESS_SETTING]
    if isinstance(value, FromIndex):
        if value.times != 1 or value.address_of is not None:
            raise InputError(
                f"{where}: an environment value computed from the index", field="env", value=value
            )
        return INDEX, []
    return pod_text(value, where, table)
