"""What a server reads from its command line: the port, the address, the served names and the parallel
sizes of one process, read once, by the rules vLLM's argument parser uses, where the process's flags are
final (after the factory's deviations). Every later stage takes these typed values; none reads a flag.

The rules: `--flag value` and `--flag=value` are the same; a flag given twice keeps the last value;
`--served-model-name` takes every word up to the next flag (nargs="+"); vLLM's FlexibleArgumentParser reads
`--max_model_len` as `--max-model-len`; an integer is what Python's int() accepts (`+8080` is 8080, `²` is not
a number, so vLLM refuses it and so does this reading, leaving the size unknown). Values synthesis decided
per node (ranks, a pool node's own address) arrive as NodeText tokens and keep their rule.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from factory.synthesis.args import int_value
from factory.synthesis.values import FromIndex, NodeText

Value = str | FromIndex  # a concrete value, or one that depends on the node's index in its group


def as_value(token: str) -> Value:
    """A token as a typed value: a node-dependent one as its rule, any other as its text."""
    return token.rule if isinstance(token, NodeText) else str(token)


class Sizes(BaseModel):
    """The parallel sizes a command gives (None: not given, so vLLM's default of 1)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tensor: int | None = None
    pipeline: int | None = None
    nodes: int | None = None
    data: int | None = None
    data_local: int | None = None
    unreadable: bool = False  # a size is a setting or not a number: how many GPUs it takes is unknown

    def gpus(self, gpus_per_node: int) -> int:
        """The GPUs one node's process uses: tensor x pipeline parallel spread over its nodes, times the
        data-parallel ranks it runs locally; the whole node where a size is unknown or larger than it."""
        if self.unreadable or self.nodes == 0:
            return gpus_per_node
        tp, pp, nnodes = self.tensor or 1, self.pipeline or 1, self.nodes or 1
        local = self.data_local or self.data or 1
        used = max(1, (tp * pp) // nnodes) * max(1, local)
        return min(gpus_per_node, used)


class ServeOptions(BaseModel):
    """One process's command line as its server reads it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str | None = None  # `vllm serve`'s positional argument
    port: int | None = None  # --port as a number (None: not given, or a setting)
    port_setting: str | None = None  # --port $NAME: the port is that setting's value (the PD router)
    host: Value | None = None  # --host (None: every interface, the server's default)
    served_names: tuple[str, ...] = ()  # the last --served-model-name's words (none: the model's name)
    headless: bool = False  # --headless: a rank that serves no API
    worker_wait_s: int | None = None  # vllm-router's --worker-startup-timeout-secs (None: its default)
    rpc_port: int | None = None  # mooncake_master's -rpc_port (None: not given, or 0, its -port default)
    sizes: Sizes = Sizes()


# A whole value that names a setting: $ROUTER_PORT or ${ROUTER_PORT} (the plan knows which settings exist).
_SETTING = re.compile(r"\$(?:\{(?P<braced>[A-Z_][A-Z0-9_]*)\}|(?P<bare>[A-Z_][A-Z0-9_]*))")

_SIZE_FLAGS = {
    "--tensor-parallel-size": "tensor",
    "--pipeline-parallel-size": "pipeline",
    "--nnodes": "nodes",
    "--data-parallel-size": "data",
    "--data-parallel-size-local": "data_local",
}


def _flag_name(token: str) -> str:
    """A flag as vLLM's parser names it: `--max_model_len` is `--max-model-len` (values keep their `_`)."""
    name, equals, value = token.partition("=")
    return name.replace("_", "-") + equals + value


def read(args: Sequence[str]) -> ServeOptions:
    """The options a server takes from `args` (its flags after the program, the model first for vLLM)."""
    values: dict[str, list[str]] = {}
    model = args[0] if args and not args[0].startswith("-") else None
    index = 1 if model is not None else 0
    while index < len(args):
        token = args[index]
        if not token.startswith("-"):
            index += 1  # a word no flag takes: vLLM would refuse it; it sets nothing read here
            continue
        name, equals, inline = _flag_name(token).partition("=")
        if equals:
            values[name] = [inline]
            index += 1
            continue
        following: list[str] = []
        index += 1
        while index < len(args) and not args[index].startswith("-"):
            following.append(args[index])
            index += 1
            if name != "--served-model-name":
                break  # every other flag the factory reads takes one value
        values[name] = following
    port_text = _one(values, "--port")
    named = _SETTING.fullmatch(port_text or "")
    setting = (named["braced"] or named["bare"]) if named else None
    sizes = {field: _one(values, flag) for flag, field in _SIZE_FLAGS.items()}
    numbers = {field: int_value(text) for field, text in sizes.items()}
    unreadable = any(
        sizes[field] is not None and (number is None or number < 0) for field, number in numbers.items()
    )
    host = values.get("--host")
    return ServeOptions(
        model=model,
        port=int_value(port_text) if setting is None else None,
        port_setting=setting,
        host=as_value(host[-1]) if host else None,
        served_names=tuple(values.get("--served-model-name", ())),
        headless="--headless" in values,
        worker_wait_s=int_value(_one(values, "--worker-startup-timeout-secs")),
        # gflags reads -rpc_port and --rpc_port alike; 0 falls back to -port
        rpc_port=int_value(_one(values, "-rpc-port") or _one(values, "--rpc-port") or "") or None,
        sizes=Sizes(
            **{field: n for field, n in numbers.items() if n is not None and n >= 0}, unreadable=unreadable
        ),
    )


def _one(values: dict[str, list[str]], flag: str) -> str | None:
    found = values.get(flag)
    return found[-1] if found else None
