"""Exact conformance with the upstream recipes site: each of the site's renderings (its JSON API, as the
site's own build script writes it for a recipes tree) against the factory's rendering of the same recipe,
variant, hardware and strategy, process by process.

A process is equal when it has the same program, the same served model, the same multiset of flag units (a
flag with the values after it) and the same environment both ways. Nothing is normalised: placeholders are
compared by name. Where the factory deviates, the rendering's deviations carry the edits their rules made
(`{"process", "before", "after"}`, or `{"process", "env", "before", "after"}`); the edits are applied to
the site's process, and the result must be the factory's exactly. An edit no rule made is a difference.

Every site rendering is compared once, keyed by the site's folder (the recipe id, or a promoted variant's
model id), never by served model. What has no counterpart is counted both ways with why.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from factory.report.site import Key, Oracle, at_path, oracle_renderings, site_processes, split

__all__ = ["Comparison", "Oracle", "compare", "judge", "oracle_renderings"]

VERDICTS = ("equal", "deviation", "differs", "skipped", "missing")


@dataclass
class Comparison:
    counts: Counter[str] = field(default_factory=Counter)
    reasons: Counter[str] = field(default_factory=Counter)  # why a rendering differs or is missing
    examples: dict[str, str] = field(default_factory=dict)  # reason -> one rendering showing it
    uncompared: Counter[str] = field(default_factory=Counter)  # either side's, with why

    @property
    def total(self) -> int:
        return sum(self.counts[verdict] for verdict in VERDICTS)

    @property
    def rate(self) -> float:
        """Equal, or equal after the recorded edits, of the site's renderings on hardware the factory
        builds for: 1.0 means exact."""
        covered = self.total - self.counts["skipped"]
        return (self.counts["equal"] + self.counts["deviation"]) / covered if covered else 0.0

    def table(self) -> str:
        rows = [f"{'result':12} {'renderings':>10}"]
        rows += [f"{name:12} {self.counts[name]:>10}" for name in VERDICTS]
        rows.append(f"{'total':12} {self.total:>10}")
        rows.append(
            f"conformance (equal, or equal after the edits the rules recorded; skipped hardware aside): "
            f"{self.rate:.4f}"
        )
        for reason, count in self.reasons.most_common(10):
            rows.append(f"  {reason}: {count}, e.g. {self.examples[reason]}")
        rows.append("not compared:")
        rows += [f"  {why}: {count}" for why, count in sorted(self.uncompared.items())]
        return "\n".join(rows)


def compare(oracle: Oracle, mine: Iterable[dict[str, Any]]) -> Comparison:
    """Each site rendering against the factory's of the same key; both sides' leftovers counted."""
    ours: dict[Key, dict[str, Any]] = {}
    skipped: dict[Key, str] = {}
    lines = list(mine)
    # The site's folder is the recipe id, or a promoted variant's model id (whose folder also holds the
    # renderings of another variant where that one does not fit): both name the recipe.
    recipe_of = {
        str(line.get(name)): str(line.get("recipe")) for line in lines for name in ("model", "recipe")
    }
    for line in lines:
        key = (
            str(line.get("recipe")),
            str(line.get("variant")),
            str(line.get("hardware")),
            str(line.get("strategy")),
        )
        if line.get("skipped"):
            skipped.setdefault(key, str(line["skipped"]))
        elif not line.get("file"):
            ours.setdefault(key, line)
    result = Comparison(uncompared=Counter(oracle.uncompared))
    used: set[int] = set()
    for site_key, site in oracle.renderings.items():
        key = (recipe_of.get(site_key[0], site_key[0]), *site_key[1:])
        found = ours.get(key)
        if found is None:
            why = skipped.get(key) or skipped.get((key[0], key[1], key[2], "None"))
            # Excused: hardware the factory has no catalog entry for (TPU, XPU, NPU).
            verdict = "skipped" if why and "no catalog entry" in why else "missing"
            result.counts[verdict] += 1
            if verdict == "missing":
                _note(result, f"missing: {(why or 'no rendering')[:70]}", site_key)
            continue
        used.add(id(found))
        verdict, reason = judge(site, found)
        result.counts[verdict] += 1
        if reason:
            _note(result, re.sub(r"\[\d+\]", "[i]", reason), site_key)
    for line in lines:
        if line.get("skipped") or line.get("file") or id(line) in used:
            continue
        result.uncompared[_why_no_site(line)] += 1
    for line in lines:
        if id(line) in used:
            for pool in ("prefill", "decode"):
                extra = len(at_path(line, f"roles.{pool}.node_argvs") or []) - 1
                if extra > 0:
                    result.uncompared["factory PD ranks above the first (the site renders rank 0)"] += extra
    return result


def _why_no_site(line: dict[str, Any]) -> str:
    if str(line.get("strategy", "")).startswith("omni"):
        return "factory omni tasks (the site renders no command for omni recipes)"
    return "factory renderings the site has no file for (hardware, variant or node count of its own)"


def _note(result: Comparison, reason: str, key: Key) -> None:
    result.reasons[reason] += 1
    result.examples.setdefault(reason, "/".join(key))


def _edits(rendering: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        edit
        for deviation in rendering.get("deviations") or []
        if isinstance(deviation, dict)
        for edit in deviation.get("edits") or []
        if isinstance(edit, dict)
    ]


# What a KV-store rendering has besides processes, compared exactly: the site's value, and the factory's.
KV_FIELDS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "serving_strategy": lambda data: data.get("serving_strategy"),
    "node_count": lambda data: data.get("node_count"),
    "instances": lambda data: data.get("instances"),
    "kv_min_vllm_version": lambda data: data.get("kv_min_vllm_version"),
    "vllm_install": lambda data: data.get("vllm_install"),
    "master": lambda data: (data.get("master") or {}).get("command"),
}
# The configs a KV-store rendering carries, compared with the recorded config edits applied.
KV_CONFIGS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "store.config": lambda data: (data.get("store") or {}).get("config"),
    "mooncake_config": lambda data: data.get("mooncake_config"),
}


def _kv_difference(site: dict[str, Any], mine: dict[str, Any]) -> str | None:
    """The first field of a KV-store rendering that differs (its configs with the recorded edits applied),
    or a process whose flags the two sides share come in another order (the store's connector flags must
    come last: vLLM reads the last one)."""
    for name, read in KV_FIELDS.items():
        if read(site) != read(mine):
            return name
    edits = _edits(mine)
    for path, read in KV_CONFIGS.items():
        expected = read(site)
        if expected is not None:
            expected = dict(expected)
            for edit in (e for e in edits if e.get("process") == path and "key" in e):
                expected.pop(str(edit["key"]), None)
                if edit.get("after") is not None:
                    expected[str(edit["key"])] = edit["after"]
        if expected != read(mine):
            return path
    for path, argv in site_processes(site)[0].items():
        if path == "router_argv" or not isinstance(at_path(mine, path), list):
            continue
        edited = [e for e in edits if e.get("process") == path and "env" not in e]
        removed = {tuple(e.get("before") or ()) for e in edited}
        added = {tuple(e.get("after") or ()) for e in edited}
        theirs = [unit for unit in split(argv).units if unit not in removed]
        ours = [unit for unit in split(at_path(mine, path)).units if unit not in added]
        if theirs != ours:
            return f"{path}: order"
    return None


def judge(site: dict[str, Any], mine: dict[str, Any]) -> tuple[str, str]:
    """'equal', 'deviation' (equal after the recorded edits) or 'differs', with the first difference."""
    if site.get("deploy_type") == "kv_store_lb" and (field := _kv_difference(site, mine)):
        return "differs", f"kv_store_lb {field}"
    processes, envs = site_processes(site)
    edits = _edits(mine)
    used = False
    for path, site_argv in processes.items():
        my_argv = at_path(mine, path)
        if not isinstance(my_argv, list):
            return "differs", f"{path}: no such process"
        theirs, ours = split(site_argv), split(my_argv)
        if theirs.program != ours.program:
            return "differs", f"{path}: program"
        if theirs.model != ours.model:
            return "differs", f"{path}: served model"
        expected = list(theirs.units)
        for edit in edits:
            if edit.get("process") != path or "env" in edit:
                continue
            used = True
            before, after = tuple(edit.get("before") or ()), tuple(edit.get("after") or ())
            if before:
                if before not in expected:
                    return "differs", f"{path}: an edit removes {' '.join(before)}, which the site lacks"
                expected.remove(before)
            if after:
                expected.append(after)
        if Counter(expected) != Counter(ours.units):
            different = (Counter(expected) - Counter(ours.units)) + (Counter(ours.units) - Counter(expected))
            return "differs", f"{path}: {sorted(different)[0][0]}"
    for path, site_env in envs.items():
        expected_env = dict(site_env)
        for edit in edits:
            if edit.get("process") != path or "env" not in edit:
                continue
            used = True
            name = str(edit["env"])
            if edit.get("before") is not None:
                if expected_env.get(name) != edit["before"]:
                    return "differs", f"{path}: an edit of {name} does not match the site's value"
                expected_env.pop(name, None)
            if edit.get("after") is not None:
                expected_env[name] = edit["after"]
        my_env = dict(at_path(mine, path) or {})
        if expected_env != my_env:
            names = set(expected_env) ^ set(my_env) | {
                k for k in expected_env if expected_env[k] != my_env.get(k)
            }
            return "differs", f"{path}: {sorted(names)[0]}"
    return ("deviation" if used else "equal"), ""
