"""Apply the catalog's deviation rules to a process's flags: where and why the factory's commands differ
from the upstream site's. The rules are data (catalog/deviations.yaml); this module only matches them, and
records each change a rule makes as it makes it (the site's tokens before, the factory's after)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from factory.catalog.schema import DeviationRule
from factory.plan.deployment import Deviation, FlagEdit
from factory.recipes.grammar import FLAG_AND_VALUE
from factory.synthesis.args import units


@dataclass(frozen=True)
class Process:
    """What the rules may ask about the process they change."""

    version: str | None  # the vLLM release it would run (None: no readable version, e.g. `nightly`)
    context_length: int | None  # the model's
    host_network: bool  # its deployment runs on the host's network
    bind_address: str  # where it should listen when it is on the host's network
    path: str = "argv"  # its key path in a rendering: argv, head_argv, worker_argvs[0], roles.prefill.argv
    program: str = "vllm"  # vllm, or vllm-router (the P/D router)
    workers_start_s: int = 0  # the router: the start budget of the vLLM processes it fronts


def apply(
    rules: Sequence[DeviationRule], args: Sequence[str], process: Process
) -> tuple[list[str], list[Deviation]]:
    """The flags after every matching rule, and the rules that changed them with the edits they made."""
    result = list(args)
    values = _values(result)
    applied: list[Deviation] = []
    for rule in rules:
        changed = (
            _split(result, process)
            if rule.split_flag_and_value
            else _apply_one(rule, result, values, process)
        )
        if changed is not None:
            result, edits = changed
            values = _values(result)
            applied.append(_deviation(rule, edits))
    return result, applied


def _deviation(rule: DeviationRule, edits: list[FlagEdit]) -> Deviation:
    source = f" (source: {'; '.join(rule.sources)})" if rule.sources else ""
    return Deviation(flag=rule.flag, reason=" ".join(rule.reason.split()) + source, edits=edits)


def _split(args: list[str], process: Process) -> tuple[list[str], list[FlagEdit]] | None:
    """Each `--flag value` entry as the two words the page's shell reads."""
    flags: list[str] = []
    edits: list[FlagEdit] = []
    for token in args:
        match = FLAG_AND_VALUE.fullmatch(token)
        if match is None:
            flags.append(token)
            continue
        words = [match.group("flag"), match.group("value")]
        flags += words
        edits.append(FlagEdit(process=process.path, before=[token], after=words))
    return (flags, edits) if edits else None


def _gather(
    rule: DeviationRule, args: list[str], process: Process
) -> tuple[list[str], list[FlagEdit]] | None:
    """Every `gather` flag with its value, replaced by one `flag` with all the values, where the first was;
    recorded as one edit per unit removed and one for the unit added (the units the site's command has)."""
    parsed = units(args)
    gathered = [unit for unit in parsed if unit.flag == rule.gather and unit.value is not None]
    if not gathered:
        return None
    joined = [rule.flag, *(str(unit.value) for unit in gathered)]
    flags: list[str] = []
    for unit in parsed:
        if unit is gathered[0]:
            flags += joined
        elif unit not in gathered:
            flags += unit.tokens()
    edits = [FlagEdit(process=process.path, before=unit.tokens(), after=[]) for unit in gathered]
    return flags, [*edits, FlagEdit(process=process.path, before=[], after=joined)]


def _values(args: list[str]) -> dict[str, str | None]:
    """Each flag of the command with its (last) value."""
    return {unit.flag: unit.value for unit in units(args) if unit.flag}


def _apply_one(
    rule: DeviationRule, args: list[str], values: dict[str, str | None], process: Process
) -> tuple[list[str], list[FlagEdit]] | None:
    """The flags after this rule and the edit it made, or None when it does not match."""
    matches = (
        rule.program == process.program
        and rule.applies_to(process.version)
        and (process.host_network or not rule.when_host_network)
        and all(flag in values for flag in rule.when_present)
        and not any(flag in values for flag in rule.when_absent)
        and all(values.get(flag) not in (None, "0") for flag in rule.when_nonzero)
    )
    if not matches:
        return None
    if rule.gather:
        return _gather(rule, args, process)
    if rule.add and rule.flag not in values:
        # {bind_address} alone is the address itself (a pool node's own address keeps its rule).
        bind, start = process.bind_address, process.workers_start_s
        added = [
            bind if token == "{bind_address}" else token.format(bind_address=bind, workers_start_s=start)
            for token in rule.add
        ]
        return [*args, *added], [FlagEdit(process=process.path, before=[], after=added)]
    value = values.get(rule.flag)
    if value is None or value not in rule.replace_values:
        return None
    template = rule.replace_values[value]
    if template is not None and "{context_length}" in template and process.context_length is None:
        return None  # nothing to put in its place: the parser check will judge the value as it is
    after = [] if template is None else [rule.flag, template.format(context_length=process.context_length)]
    flags = [token for unit in units(args) for token in (after if unit.flag == rule.flag else unit.tokens())]
    return flags, [FlagEdit(process=process.path, before=[rule.flag, value], after=after)]
