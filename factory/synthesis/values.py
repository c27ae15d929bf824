"""Values that depend on which node of its group a process runs on, typed where synthesis decides them.

A multi-node deployment's ranks and a prefill/decode pool's node addresses are decided here, by the site's
rules: `--node-rank` is the node's index, `--data-parallel-start-rank` the index times the local
data-parallel size, a pool node's own address the setting of that node (`$DECODE_NODE_2`). Synthesis writes
each as a `NodeText`: the very text the site prints for that node (so every string rule of the site's
synthesis, and the comparison with its renderings, works unchanged), carrying the `FromIndex` rule that gives
the value on every node. Later stages read the rule from the token; none derives it back from the numbers.

The pool node setting's spelling (`<POOL>_NODE_<n>`) has its one home here.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from factory.base.placeholders import POOL_NODE


def pool_node_setting(pool: str, number: int) -> str:
    """The setting that holds node `number` (from 1) of a pool's address: PREFILL_NODE_1."""
    return f"{pool.upper()}_NODE_{number}"


def pool_node(pool: str, number: int) -> str:
    """That setting as a command names it: $PREFILL_NODE_1."""
    return f"${pool_node_setting(pool, number)}"


def read_pool_node(name: str) -> tuple[str, int] | None:
    """(pool, node number) of a pool node's setting name, or None for any other name."""
    match = POOL_NODE.fullmatch(name)
    return (match["pool"].lower(), int(match["number"])) if match else None


class FromIndex(BaseModel):
    """A value computed from the index of the node a process runs on (0: its group's first node)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    times: int = 1  # the index times this (--node-rank: 1; --data-parallel-start-rank: the local DP size)
    address_of: str | None = None  # else that node's address setting in this pool: $PREFILL_NODE_<i+1>

    def at(self, index: int) -> str:
        if self.address_of is not None:
            return pool_node(self.address_of, index + 1)
        return str(index * self.times)


class NodeText(str):
    """One node's value as the site prints it (`"16"`, `"$DECODE_NODE_2"`), with the rule that gives it on
    every node of the group. A str, so the site's flag rules (last wins, pairs of flag and value) and the
    renderings treat it as the text it is."""

    rule: FromIndex

    def __new__(cls, rule: FromIndex, index: int) -> NodeText:
        made = super().__new__(cls, rule.at(index))
        made.rule = rule
        return made


def node_rank(index: int) -> NodeText:
    """`--node-rank`: the node's index in its group."""
    return NodeText(FromIndex(times=1), index)


def start_rank(index: int, local: int) -> NodeText:
    """`--data-parallel-start-rank`: the first DP rank on this node, its index times the local DP size."""
    return NodeText(FromIndex(times=local), index)


def own_address(pool: str, index: int) -> NodeText:
    """A pool node's own address: the setting of that node ($PREFILL_NODE_<index + 1>)."""
    return NodeText(FromIndex(address_of=pool), index)
