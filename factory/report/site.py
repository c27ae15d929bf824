"""A site rendering read as processes: the upstream JSON API's files for a recipes tree (its `build-api`
output), each keyed by recipe, variant, hardware and strategy, and each process of one as a program, a
served model and flag units (a flag with the values after it), as the conformance check compares them."""

from __future__ import annotations

import json
import re
import shlex
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROGRAMS = ("vllm", "serve", "vllm-omni", "vllm-router", "factory-serve")
Key = tuple[
    str, str, str, str
]  # site folder (recipe id or a promoted variant's model id), variant, hardware, strategy
FlagUnit = tuple[str, ...]  # a flag and the values after it


@dataclass(frozen=True)
class Split:
    """A command as the comparison sees it: program words, served model, flag units."""

    program: tuple[str, ...]
    model: str | None
    units: list[FlagUnit]


def split(argv: Iterable[object]) -> Split:
    """`vllm serve MODEL --a 1 --b x y --c=v` -> (vllm serve), MODEL, [(--a 1), (--b x y), (--c v)]."""
    tokens = [str(token) for token in argv]
    program: list[str] = []
    while tokens and tokens[0] in PROGRAMS:
        program.append(tokens.pop(0))
    model = tokens.pop(0) if tokens and not tokens[0].startswith("-") else None
    found: list[FlagUnit] = []
    current: list[str] | None = None
    for token in tokens:
        # A negative number or a JSON value such as -{...} is a value, not a flag.
        if token.startswith("-") and not re.match(r"^-\d", token) and not token.startswith("-{"):
            if current is not None:
                found.append(tuple(current))
            current = token.split("=", 1) if token.startswith("--") and "=" in token else [token]
        elif current is None:
            found.append(("<positional>", token))
        else:
            current.append(token)
    if current is not None:
        found.append(tuple(current))
    return Split(tuple(program), model, found)


def site_processes(data: dict[str, Any]) -> tuple[dict[str, list[str]], dict[str, dict[str, Any]]]:
    """Each process of a site rendering by the key path the factory's rendering gives it, and each
    environment the same way. The router's is the shell-split `command` (the site gives it no argv)."""
    if data.get("deploy_type") == "kv_store_lb":
        found: dict[str, list[str]] = {"vllm_argv": list(data.get("vllm_argv") or [])}
        for index, argv in enumerate(data.get("vllm_worker_argvs") or []):
            found[f"vllm_worker_argvs[{index}]"] = list(argv)
        if router := _router_argv(data):
            found["router_argv"] = router
        store = data.get("store")
        if isinstance(store, dict) and store.get("command"):  # the site's is a shell command
            found["store_argv"] = shlex.split(str(store["command"]))
        return found, {"env": dict(data.get("env") or {})}
    if data.get("deploy_type") == "pd_cluster" or "prefill" in data:
        processes: dict[str, list[str]] = {}
        envs: dict[str, dict[str, Any]] = {}
        for role in ("prefill", "decode"):
            if isinstance(data.get(role), dict):
                processes[f"roles.{role}.argv"] = list(data[role].get("argv") or [])
                envs[f"roles.{role}.env"] = dict(data[role].get("env") or {})
        if router := _router_argv(data):
            processes["roles.router.argv"] = router
        return processes, envs
    if "argv" in data:
        return {"argv": list(data["argv"] or [])}, {"env": dict(data.get("env") or {})}
    processes = {"head_argv": list(data.get("head_argv") or [])}
    for index, argv in enumerate(data.get("worker_argvs") or []):
        processes[f"worker_argvs[{index}]"] = list(argv)
    return processes, {"env": dict(data.get("env") or {})}


def _router_argv(data: dict[str, Any]) -> list[str]:
    """The router's argv: the site gives only its shell `command`, lines joined by backslash-newline."""
    router = data.get("router")
    if not isinstance(router, dict) or not router.get("command"):
        return []
    return shlex.split(str(router["command"]).replace("\\\n", " "))


def at_path(rendering: dict[str, Any], path: str) -> Any:
    """`roles.prefill.argv`, `worker_argvs[1]`: the value at a key path, or None."""
    current: Any = rendering
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", path):
        if part.startswith("["):
            index = int(part[1:-1])
            current = current[index] if isinstance(current, list) and index < len(current) else None
        else:
            current = current.get(part) if isinstance(current, dict) else None
        if current is None:
            return None
    return current


@dataclass
class Oracle:
    """The site's renderings by key, and what it renders that this check does not compare, with why."""

    renderings: dict[Key, dict[str, Any]] = field(default_factory=dict)
    uncompared: Counter[str] = field(default_factory=Counter)


def oracle_renderings(folder: Path) -> Oracle:
    """Every (hardware, strategy) rendering file the site's build wrote, each counted once."""
    oracle = Oracle()
    for path in sorted(folder.rglob("*.json")):
        relative = path.relative_to(folder).parts
        if len(relative) < 3 or relative[0] == "strategies":
            continue  # a recipe's summary, or a strategy's own page
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            continue
        if not isinstance(data, dict) or "strategy" not in data:
            continue
        key: Key = (
            "/".join(relative[:2]),
            str(data.get("variant")),
            str(data.get("hardware")),
            str(data["strategy"]),
        )
        if key in oracle.renderings:
            continue  # the default hardware's strategies/ folder repeats hw/<hw>/strategies/
        if not any(site_processes(data)[0].values()):
            continue
        oracle.renderings[key] = data
    return oracle
