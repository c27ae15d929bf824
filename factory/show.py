"""`factory show`: what a recipe page prints for one deployment, and what the factory adds to it: the install
the image runs, each process's `vllm serve` (or router) command and `docker run`, the compose files, the
settings they need, where the commands deliberately differ from the site's, and what the recipe sets that
the factory does not use."""

from __future__ import annotations

import shlex

from factory.blueprint import Blueprint
from factory.catalog.schema import Server
from factory.plan.models import Deployment, ImagePlan, NodeRole
from factory.plan.settings import PLACEHOLDER, known_setting, setting
from factory.synthesis.args import units


def install_commands(image: ImagePlan) -> list[str]:
    """What the image's Dockerfile runs to install vLLM (or why the factory builds no image here)."""
    install = image.install
    if install is None:
        return [f"# no image: {image.unbuildable}"]
    if install.kind == "vendor-image":
        return [f"docker pull {install.base_image}  # vLLM {image.vllm_version} preinstalled"]
    extra = f" --extra-index-url {install.extra_index_url}" if install.extra_index_url else ""
    folder = image.directory / "requirements"
    what = (
        f"torch {install.torch}" + (f", CUDA {install.cuda}" if install.cuda else ""),
        f"the other dependencies of {install.package}",
        f"{install.package}=={image.vllm_version}: the locked set {install.lock_key}",
    )
    return [
        f"python{install.python} -m venv /opt/vllm && . /opt/vllm/bin/activate",
        f"pip install --require-hashes --no-deps --target /tmp/uv -r {folder}/uv.txt",
    ] + [
        f"/tmp/uv/bin/uv pip install --require-hashes --no-deps{extra} -r {folder}/{name}  # {comment}"
        for (name, _), comment in zip(install.layers, what, strict=True)
    ]


def _quote(arg: str) -> str:
    """Shell-quote, but leave a whole-token $SETTING expandable, as the recipe pages print it."""
    match = PLACEHOLDER.fullmatch(arg)
    known = match is not None and known_setting(match.group("braced") or match.group("bare")) is not None
    return arg if known else shlex.quote(arg)


def _lines(words: list[str]) -> str:
    return " \\\n  ".join(words)


def _pairs(args: list[str]) -> list[str]:
    """One flag with its value per line, as the recipe pages print them."""
    return [" ".join(_quote(token) for token in unit.tokens()) for unit in units(args)]


def serve_command(role: NodeRole) -> str:
    exports = [f"export {key}={_quote(value)}" for key, value in role.env.items()]
    program = "vllm serve " + _quote(role.args[0]) if role.program == "vllm" else "vllm-router"
    rest = role.args[1:] if role.program == "vllm" else role.args
    return "\n".join([*exports, _lines([program, *_pairs(rest)])])


def docker_run(plan: Deployment, role: NodeRole, server: Server) -> str:
    if role.program != "vllm":
        return (
            "# the router runs outside the factory's images: pip install vllm-router, then the command above"
        )
    port = role.port or server.port
    network = ["--network host"] if plan.host_network else [f"-p 127.0.0.1:{port}:{port}"]
    head = [
        "docker run --rm",
        *(_quote(flag) for flag in plan.vendor.docker_run_flags()),
        "--ipc=host",
        *network,
        *(f"-e {key}={_quote(value)}" for key, value in role.env.items()),
        "-v ~/.cache/huggingface:/root/.cache/huggingface",
        "-e HF_TOKEN",
        plan.image.reference,
    ]
    return _lines([" ".join(head), *_pairs(role.args)])


def render_show(blueprint: Blueprint, plan: Deployment) -> str:
    image, server = blueprint.image, blueprint.server
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
            docker_run(plan, role, server),
            "",
        ]
    out += ["## Compose", *(f"{plan.directory / plan.file_name(role)}" for role in plan.roles)]
    if plan.settings_used:
        out += ["", f"## Settings ({plan.directory / '.env.example'})"]
        out += [f"{name}={setting(name).default or ''}  # {setting(name).why}" for name in plan.settings_used]
    if plan.deviations:
        out += ["", "## Where these commands differ from the recipes site"]
        out += [f"{d.flag}: {d.reason}" for d in plan.deviations]
    if blueprint.findings:
        out += ["", "## Preflight", *(str(finding) for finding in blueprint.findings)]
    if blueprint.notes:
        out += ["", "## Not used by the factory", *blueprint.notes]
    return "\n".join(out) + "\n"
