"""Checks inside an image that need no GPU: the installed vLLM is the pin, torch did not drift,
the pinned environment is set, and vLLM's own parser accepts every generated serve command."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

import docker

from factory import image_paths
from factory.leftovers import labels
from factory.plan.models import Deployment, ImagePlan
from factory.plan.settings import example_value
from factory.render import compose

# Values for settings without a default, when a node's command is only parsed, never run.
EXAMPLE_SETTINGS = {"IFACE_NAME": "eth0", "RENDER_GID": "109"}


@dataclass(frozen=True)
class CheckResult:
    name: str
    ok: bool
    detail: str


def run_in_image(client: docker.DockerClient, image: str, command: list[str], env: dict[str, str]) -> str:
    """Run a short command in a throwaway container and return its output; the container is removed.

    Not `containers.run(remove=True)`: with a command that exits at once it sometimes returns empty
    output on Engine 20.10 (seen here), so wait for the exit first and read the logs after."""
    container = client.containers.create(
        image,
        entrypoint=command[:1],
        command=command[1:],
        environment=env,
        labels=labels("validate-static"),
        network_disabled=True,
    )
    try:
        container.start()
        status = container.wait(timeout=600)
        output = bytes(container.logs(stdout=True, stderr=True)).decode(errors="replace")
    finally:
        container.remove(force=True)
    if status.get("StatusCode") != 0:
        raise RuntimeError(
            f"`{' '.join(command[:2])}` exited {status.get('StatusCode')}: {output.strip()[-2000:]}"
        )
    return output


def installed_versions(client: docker.DockerClient, image: ImagePlan) -> dict[str, Any]:
    output = run_in_image(client, image.reference, ["python3", image_paths.IMAGE_INFO], {})
    info: dict[str, Any] = json.loads(output.strip().splitlines()[-1])
    return info


def check_versions(client: docker.DockerClient, image: ImagePlan) -> list[CheckResult]:
    info = installed_versions(client, image)
    release = str(info.get("vllm") or "").split("+")[0]
    results = [
        CheckResult(
            "vllm-version",
            release == image.vllm_version,
            f"installed vLLM {info.get('vllm')}, pinned {image.vllm_version}",
        )
    ]
    recorded = run_in_image(client, image.reference, ["cat", image_paths.VERSIONS], {})
    at_build = json.loads(recorded)
    results.append(
        CheckResult(
            "no-drift",
            at_build.get("vllm") == info.get("vllm") and at_build.get("torch") == info.get("torch"),
            f"vLLM {info.get('vllm')} and torch {info.get('torch')} now; {at_build} after our install step",
        )
    )
    if image.install and image.install.kind == "vendor-image":
        base = json.loads(run_in_image(client, image.reference, ["cat", image_paths.BASE_VERSIONS], {}))
        results.append(
            CheckResult(
                "vendor-versions-kept",
                base.get("vllm") == info.get("vllm") and base.get("torch") == info.get("torch"),
                f"base image had {base}; image has {info}",
            )
        )
    return results


def check_env(client: docker.DockerClient, image: ImagePlan) -> CheckResult:
    config_env = client.images.get(image.reference).attrs["Config"].get("Env") or []
    present = dict(item.split("=", 1) for item in config_env if "=" in item)
    missing = {k: v for k, v in image.env.items() if present.get(k) != v}
    detail = f"wrong or missing: {missing}" if missing else f"set: {image.env or '(the recipe pins none)'}"
    return CheckResult("pinned-env", not missing, detail)


def argv_sets(image: ImagePlan, composes: list[Deployment]) -> dict[str, list[str]]:
    """Every `vllm serve` command the image runs (its default, each node of each deployment), with example
    settings filled in: what vLLM's parser is given."""
    sets = {"image-default": list(image.default_command)}
    for plan in composes:
        for role in plan.roles:
            if role.program == "vllm":
                args = [example_value(arg, EXAMPLE_SETTINGS) for arg in role.args]
                sets[str(compose.path(plan, role))] = args
    return sets


def check_serve_args(
    client: docker.DockerClient, image: ImagePlan | str, sets: dict[str, list[str]]
) -> list[CheckResult]:
    """Each command parsed by the vLLM inside `image` (a plan, or a reference to any built image)."""
    script = resources.files("factory.validate").joinpath("check_serve_args.py").read_text(encoding="utf-8")
    reference = image if isinstance(image, str) else image.reference
    output = run_in_image(
        client, reference, ["python3", "-c", script], {"FACTORY_ARGV_SETS": json.dumps(sets)}
    )
    line = next(line for line in output.splitlines() if line.startswith("FACTORY-RESULT "))
    parsed = json.loads(line.removeprefix("FACTORY-RESULT "))
    return [
        CheckResult(f"serve-args:{name}", bool(result["ok"]), result["error"] or "accepted by vLLM's parser")
        for name, result in parsed.items()
    ]
