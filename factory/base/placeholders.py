"""The settings the factory knows by name: the placeholders recipes, strategies, KV stores and the factory
write on purpose ($HEAD_IP, $IFACE_NAME, $PREFILL_NODE_1, ...), what each means and its default. Every other
`$` is text. Their one home: every stage reads them from here, the checks of a recipes tree included (a port
or a Mooncake config value may name one; factory.plan.settings prints them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# A pool node's address setting: PREFILL_NODE_1, DECODE_NODE_2, ... (numbered from 1, as the site does).
POOL_NODE = re.compile(r"^(?P<pool>PREFILL|DECODE)_NODE_(?P<number>\d+)$")
# $NAME or ${NAME}, an upper-case shell variable name: the spelling of a placeholder.
PLACEHOLDER = re.compile(r"\$(?:\{(?P<braced>[A-Z_][A-Z0-9_]*)\}|(?P<bare>[A-Z_][A-Z0-9_]*))")


@dataclass(frozen=True)
class Setting:
    default: str | None  # None: the user must set it, and compose stops with `why` when it is missing
    why: str


SETTINGS: dict[str, Setting] = {
    "HEAD_IP": Setting(None, "address of the head node, reachable from every node"),
    "MASTER_PORT": Setting("29501", "torch.distributed rendezvous port on the head (vLLM's default)"),
    "DP_RPC_PORT": Setting("29550", "data-parallel RPC port on the head"),
    "IFACE_NAME": Setting(None, "network interface NCCL and Gloo use on every node (e.g. eth0, ib0)"),
    "RENDER_GID": Setting(
        None, "the host's render group id, owner of /dev/kfd (getent group render | cut -d: -f3)"
    ),
    "BIND_ADDRESS": Setting(
        "127.0.0.1",
        "address the API listens on, on the host's network: 0.0.0.0 (or this node's) to serve others",
    ),
    "ROUTER_HOST": Setting("127.0.0.1", "address the PD router listens on (0.0.0.0 to serve other hosts)"),
    "ROUTER_PORT": Setting("8000", "port the PD router listens on"),
    # Mooncake KV stores (kv_store/*.yaml): the addresses its processes meet at, and the RDMA NICs they use.
    "MOONCAKE_MASTER_IP": Setting(
        None, "address of the Mooncake master, reachable by every instance and the store service"
    ),
    "MOONCAKE_STORE_IP": Setting(
        None, "address of the Mooncake store service, reachable by every instance (its local_hostname)"
    ),
    "MOONCAKE_DEVICE_NAME": Setting("", "the instances' RDMA NICs (mlx5_0,mlx5_1,...); empty: auto-selected"),
    "MOONCAKE_STORE_DEVICE_NAME": Setting("", "the store node's RDMA NICs; empty: auto-selected"),
    "VLLM_ROUTER_IMAGE": Setting(
        None,
        "the PD router's image: one whose entrypoint runs vllm-router (built by `factory build vllm-router`)",
    ),
}
# Settings named by pattern: one per node of a prefill or decode pool.
_PATTERNS = (
    (
        POOL_NODE,
        "address of node {2} of the {1} pool, reachable by the router",
    ),
    (re.compile(r"^(PREFILL|DECODE)_DP_RPC_PORT$"), "data-parallel RPC port of the {1} pool's first node"),
    (
        re.compile(r"^VLLM_INSTANCE_([1-9][0-9]*)$"),
        "address of instance {1} of a KV-store deployment: its ranks meet there, it listens there, the "
        "router calls it there",
    ),
)


def known_setting(name: str) -> Setting | None:
    """The setting a placeholder names, or None when it is not one the factory knows (then it is text)."""
    if name in SETTINGS:
        return SETTINGS[name]
    for pattern, why in _PATTERNS:
        match = pattern.match(name)
        if match:
            groups = [match.group(0), *(g.lower() for g in match.groups())]
            return Setting("29550" if "DP_RPC_PORT" in name else None, why.format(*groups))
    return None
