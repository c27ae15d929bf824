"""`factory show`: the commands a recipe page prints, for one model, hardware, strategy and node count."""

from __future__ import annotations

import shlex

from factory.catalog.schema import Server
from factory.plan.models import Deployment, ImagePlan, NodeRole
from factory.serve_args import split_flags


def install_commands(image: ImagePlan) -> list[str]:
    if image.install_kind == "vendor-image":
        return [f"docker pull {image.base_image}  # vLLM {image.vllm_version} preinstalled"]
    if image.package == "vllm":
        # As the recipe pages print it: uv picks the torch build for the machine's driver.
        return [f"uv pip install vllm=={image.vllm_version} --torch-backend auto"]
    extra = f" --extra-index-url {image.extra_index_url}" if image.extra_index_url else ""
    return [f"pip install {' '.join(image.pip_requirements)}{extra}"]


def _quote(arg: str) -> str:
    """Shell-quote, but leave ${SETTING} placeholders expandable."""
    return f'"{arg}"' if arg.startswith("${") else shlex.quote(arg)


def _lines(words: list[str]) -> str:
    return " \\\n  ".join(words)


def serve_command(plan: Deployment, role: NodeRole) -> str:
    image = plan.image
    args = list(image.entrypoint_args)
    model = args[1]  # entrypoint args start with --model <weights>
    rest = args[2:] + role.args
    exports = [f"export {k}={_quote(v)}" for k, v in {**image.env, **plan.env}.items()]
    words = ["vllm serve " + shlex.quote(model), *_pairs(rest)]
    return "\n".join([*exports, _lines(words)])


def docker_run(plan: Deployment, role: NodeRole, server: Server) -> str:
    image = plan.image
    port = server.port
    network = ["--network", "host"] if plan.host_network else ["-p", f"127.0.0.1:{port}:{port}"]
    env = [f"-e {k}={_quote(v)}" for k, v in plan.env.items()]
    head = [
        "docker run --rm",
        *(_quote(flag) for flag in plan.vendor.docker_run_flags()),
        "--ipc=host",
        *network,
        *env,
        "-v ~/.cache/huggingface:/root/.cache/huggingface",
        "-e HF_TOKEN",
        image.reference,
    ]
    return _lines([" ".join(head), *_pairs(role.args)])


def _pairs(args: list[str]) -> list[str]:
    """One flag with its values per line, as the recipe pages print them."""
    return [" ".join(_quote(token) for token in flag.tokens()) for flag in split_flags(args, "show")]


def render_show(plan: Deployment, findings: list[str], server: Server) -> str:
    image = plan.image
    out = [
        f"# {image.model_id} on {image.hardware_name}",
        f"Configuration: hardware `{image.hardware}` · strategy `{plan.strategy}` ({plan.strategy_title}) · "
        f"variant `{image.variant}` · nodes {plan.nodes} · vLLM {image.vllm_version}",
        "",
        "## Install",
        *install_commands(image),
        "",
    ]
    for role in plan.roles:
        title = "" if plan.nodes == 1 else f" — {plan.role_title(role)}"
        out += [
            f"## Serve{title}",
            serve_command(plan, role),
            "",
            f"## Docker{title}",
            docker_run(plan, role, server),
            "",
        ]
    out += ["## Compose", *(f"{plan.directory / plan.file_name(role)}" for role in plan.roles)]
    if plan.settings_used:
        out.append(f"{plan.directory / '.env.example'}  (settings: {', '.join(plan.settings_used)})")
    if findings:
        out += ["", "## Preflight", *findings]
    return "\n".join(out) + "\n"
