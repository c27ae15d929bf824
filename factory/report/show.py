"""`factory show`: what a recipe page prints for one deployment, and what the factory adds to it: the install
the image runs, each process's `vllm serve` (or router) command and `docker run`, the compose files, the
settings they need, where the commands deliberately differ from the site's, and what the recipe sets that
the factory does not use."""

from __future__ import annotations

import re

from factory.blueprint import Blueprint
from factory.plan.deployment import Deployment, NodeRole
from factory.plan.models import ImagePlan
from factory.plan.settings import setting
from factory.recipes.tree_schema import KvOffloadOption
from factory.render import compose
from factory.render.docker_run import command_words, run_options, shell_word, start_note
from factory.synthesis.args import units


def install_commands(image: ImagePlan) -> list[str]:
    """What the image's Dockerfile runs to install vLLM (or why the factory builds no image here)."""
    install = image.install
    passed = [f"# {note}" for note in image.passed_over]
    if install is None:
        return [f"# no image: {image.unbuildable}", *passed]
    if install.kind == "vendor-image":
        return [f"docker pull {install.base_image}  # vLLM {image.vllm_version} preinstalled"]
    if install.stand_in:
        passed.append(f"# {install.stand_in}: the catalog's stand-in for a build no index here serves")
    extra = f" --extra-index-url {install.extra_index_url}" if install.extra_index_url else ""
    folder = image.directory / "requirements"
    what = (
        f"torch {install.torch}" + (f", CUDA {install.cuda}" if install.cuda else ""),
        f"the other dependencies of {install.package}",
        f"{install.package}=={image.vllm_version}: the locked set {install.lock_key}",
    ) + ((f"vllm-omni=={install.omni} and what only it needs",) if install.omni else ())
    if install.mooncake:
        libraries = " ".join(install.mooncake_system_packages)
        what += (f"Mooncake {install.mooncake} and what vLLM's set lacks (apt: {libraries})",)
    return (
        passed
        + [
            f"python{install.python} -m venv /opt/vllm && . /opt/vllm/bin/activate",
            f"pip install --require-hashes --no-deps --target /tmp/uv -r {folder}/uv.txt",
        ]
        + [
            f"/tmp/uv/bin/uv pip install --require-hashes --no-deps{extra} -r {folder}/{name}  # {comment}"
            for (name, _), comment in zip(install.layers, what, strict=True)
        ]
    )


def _lines(words: list[str]) -> str:
    return " \\\n  ".join(words)


def _pairs(args: list[str]) -> list[str]:
    """One flag with its value per line, as the recipe pages print them."""
    return [" ".join(shell_word(token) for token in unit.tokens()) for unit in units(args)]


def serve_command(role: NodeRole) -> str:
    exports = [f"export {key}={shell_word(value)}" for key, value in role.environment.items()]
    words = role.argv
    # `vllm serve MODEL` on one line, as the recipe pages print it; every other program's words, then flags
    head = 3 if role.program == "vllm" else len(words) - len(role.words)
    program = " ".join(shell_word(word) for word in words[:head])
    return "\n".join([*exports, _lines([program, *_pairs(words[head:])])])


def docker_run(plan: Deployment, role: NodeRole) -> str:
    spec = plan.spec(role)
    # --rm removes a container that exits, which Docker refuses beside a restart policy
    start = "docker run --rm" if spec.restart == "no" else "docker run"
    command = _lines([start, *run_options(spec), spec.image, *_pairs(command_words(spec))])
    return "\n".join([*start_note(spec), command])


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _printable(text: str) -> str:
    """The option's own text for a terminal: lines kept, control characters escaped (a terminal acts on an
    escape sequence, and the taxonomy is someone else's file)."""
    return _CONTROL.sub(lambda found: ascii(found.group())[1:-1], text)


def kv_offload_section(plan: Deployment, option: KvOffloadOption) -> list[str]:
    """The option as the page describes it (its companion's command too), and what the deployment lacks."""
    out = ["", f"## KV offload: {option.display_name or plan.kv_offload}"]
    out += [_printable(option.description)] if option.description else []
    out += [f"Note: {note}." for note in plan.kv_offload_notes]
    if option.companion is not None and option.companion.command:
        label = option.companion.label or plan.kv_offload or ""
        about = _printable(f"{label}: {option.companion.description}".rstrip(": "))
        out += [about, _printable(option.companion.command.rstrip())]
    return out


def render_show(
    blueprint: Blueprint,
    plan: Deployment,
    offload: KvOffloadOption | None = None,
    offered: tuple[str, ...] = (),
) -> str:
    image = blueprint.image
    out = [
        f"# {image.model_id} on {image.hardware_name}",
        f"Configuration: hardware `{image.hardware}` · strategy `{plan.strategy}` ({plan.strategy_title}) · "
        f"variant `{image.variant}` · nodes {plan.nodes} · vLLM {image.vllm_version or 'unresolved'}",
        "",
        "## Install (what the image runs)",
        *install_commands(image),
        "",
    ]
    for role in plan.roles:
        title = "" if len(plan.roles) == 1 else f" — {plan.role_title(role)}"
        out += [
            f"## Serve{title}",
            serve_command(role),
            "",
            f"## Docker{title}",
            docker_run(plan, role),
            "",
        ]
    if plan.kv_offload is None:
        out += ["## Compose", *(str(compose.path(plan, role)) for role in plan.roles)]
    else:  # a pick of the page, not a default: `factory generate` writes no files for it
        out += ["## Compose", "not written by `factory generate` (`--format k8s` prints the manifest)"]
    settings = compose.settings_used(plan)
    if settings:
        where = compose.directory(plan) / ".env.example" if plan.kv_offload is None else "the environment"
        out += ["", f"## Settings ({where})"]
        out += [f"{name}={setting(name).default or ''}  # {setting(name).why}" for name in settings]
    if plan.kv_offload is not None and offload is not None:
        out += kv_offload_section(plan, offload)
    if offered:
        out += ["", "## KV-offload options the recipes site offers here (`--kv-offload OPTION`)", *offered]
    if plan.deviations:
        out += ["", "## Where these commands differ from the recipes site"]
        out += [f"{d.flag}: {d.reason}" for d in plan.deviations]
    if blueprint.findings:
        out += ["", "## Preflight", *(str(finding) for finding in blueprint.findings)]
    if blueprint.notes:
        out += ["", "## Not used by the factory", *blueprint.notes]
    return "\n".join(out) + "\n"
