"""Conformance with the upstream recipes site: each of the site's renderings (its JSON API, as the site's own
build script writes it for a recipes tree) against the factory's rendering of the same recipe, variant,
hardware and strategy. Flags are compared as sets with their values (the site's last-wins order aside);
a flag the factory changed on purpose counts when the rendering lists it as a deviation."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from factory.synthesis.args import units

# A whole-token placeholder ($HEAD_IP, ${MASTER_PORT}): the factory and the site may name it differently.
_PLACEHOLDER = re.compile(r"^\$\{?[A-Za-z_][A-Za-z0-9_]*\}?$")
Key = tuple[str, str, str, str]  # served model, variant, hardware, strategy


def _value(value: object) -> str | None:
    if value is None:
        return None
    text = str(value)
    return "$SETTING" if _PLACEHOLDER.match(text) else text


def parse_argv(argv: Iterable[str]) -> tuple[str | None, dict[str, str | None]]:
    """`vllm serve MODEL --flags` -> (model, {flag: value}); `--x=v` is `--x v`, `_` is `-` in names."""
    tokens = [str(t) for t in argv]
    while tokens and tokens[0] in ("vllm", "serve", "vllm-omni", "factory-serve"):
        tokens.pop(0)
    model = tokens.pop(0) if tokens and not tokens[0].startswith("-") else None
    flags: dict[str, str | None] = {}
    for unit in units(tokens):
        if unit.flag is None:
            continue
        name, value = unit.flag, unit.value
        if name.startswith("--") and "=" in name:
            name, value = name.split("=", 1)
        if name == "--model":
            model = value
            continue
        flags[name.replace("_", "-")] = _value(value)
    return model, flags


def oracle_renderings(folder: Path) -> dict[Key, dict[str, Any]]:
    """The site's single- and multi-node renderings, by (served model, variant, hardware, strategy)."""
    found: dict[Key, dict[str, Any]] = {}
    for path in sorted(folder.rglob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            continue
        if (
            not isinstance(data, dict)
            or "strategy" not in data
            or not ("argv" in data or "head_argv" in data)
        ):
            continue
        if str(data.get("deploy_type", "")).startswith("kv_store") or str(data["strategy"]).startswith(
            "kv_store"
        ):
            continue
        model, _ = parse_argv(data.get("argv") or data["head_argv"])
        found[(str(model), str(data.get("variant")), str(data.get("hardware")), str(data["strategy"]))] = data
    return found


def _nodes(rendering: dict[str, Any]) -> list[list[str]]:
    if rendering.get("argv"):
        return [rendering["argv"]]
    return [rendering.get("head_argv") or [], *(rendering.get("worker_argvs") or [])]


@dataclass
class Comparison:
    counts: Counter[str] = field(default_factory=Counter)
    first_differences: Counter[str] = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)  # first difference -> one rendering showing it

    @property
    def total(self) -> int:
        return sum(self.counts[k] for k in ("equal", "deviation", "differs", "skipped", "missing"))

    @property
    def rate(self) -> float:
        """Equal or a listed deviation, of the renderings on hardware the factory builds for."""
        covered = self.total - self.counts["skipped"]
        return (self.counts["equal"] + self.counts["deviation"]) / covered if covered else 0.0

    def table(self) -> str:
        rows = [f"{'result':12} {'renderings':>10}"]
        rows += [
            f"{name:12} {self.counts[name]:>10}"
            for name in ("equal", "deviation", "differs", "skipped", "missing")
        ]
        rows.append(f"{'total':12} {self.total:>10}")
        rows.append(f"conformance (equal or a listed deviation, skipped hardware aside): {self.rate:.4f}")
        for flag, count in self.first_differences.most_common(10):
            rows.append(f"  first difference {flag}: {count}, e.g. {self.examples[flag]}")
        return "\n".join(rows)


def compare(oracle: dict[Key, dict[str, Any]], mine: Iterable[dict[str, Any]]) -> Comparison:
    ours: dict[Key, dict[str, Any]] = {}
    skipped: set[Key] = set()
    for line in mine:
        key_tail = (str(line.get("variant")), str(line.get("hardware")), str(line.get("strategy")))
        if line.get("skipped"):
            skipped.add((str(line.get("model")), *key_tail))
            continue
        nodes = _nodes(line)
        model, _ = parse_argv(nodes[0]) if nodes and nodes[0] else (None, {})
        ours[(str(line.get("model")), *key_tail)] = line
        ours[(str(model), *key_tail)] = line
    result = Comparison()
    for key, site in oracle.items():
        found = ours.get(key)
        if found is None:
            result.counts["skipped" if key in skipped else "missing"] += 1
            continue
        verdict, flag = _judge(site, found)
        result.counts[verdict] += 1
        if flag:
            result.first_differences[flag] += 1
            result.examples.setdefault(flag, "/".join(key))
    return result


def _judge(site: dict[str, Any], mine: dict[str, Any]) -> tuple[str, str | None]:
    deviations = {d.get("flag") for d in mine.get("deviations") or [] if isinstance(d, dict)}
    site_nodes, my_nodes = _nodes(site), _nodes(mine)
    if len(site_nodes) != len(my_nodes):
        return "differs", "node count"
    deviated = False
    for theirs, ours in zip(site_nodes, my_nodes, strict=True):
        _, their_flags = parse_argv(theirs)
        _, our_flags = parse_argv(ours)
        for name in sorted(set(their_flags) | set(our_flags)):
            if their_flags.get(name) != our_flags.get(name) or (name in their_flags) != (name in our_flags):
                if name not in deviations:
                    return "differs", name
                deviated = True
    their_env = {k: _value(v) for k, v in (site.get("env") or {}).items()}
    our_env = {k: _value(v) for k, v in (mine.get("env") or {}).items()}
    for name, value in their_env.items():
        if our_env.get(name) != value and name not in deviations:
            return "differs", f"env {name}"
    return ("deviation" if deviated else "equal"), None
