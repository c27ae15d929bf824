"""The `docker run` format: one shell command per process, printed from its run spec (`factory show`).

Settings the factory knows stay expandable (`$HEAD_IP`, `${BIND_ADDRESS:-127.0.0.1}`): the operator's shell
fills them as compose would; every other value is quoted. This module decides no run option.
"""

from __future__ import annotations

import shlex

from factory.plan.runspec import RunSpec
from factory.plan.settings import PLACEHOLDER, known_setting
from factory.render.compose import BIND_SETTING, PORT_SETTING, tmpfs_mount
from factory.render.compose import CANNOT_EXPRESS as COMPOSE_CANNOT_EXPRESS

# Run spec fields `docker run` cannot express, and why (a test keeps this list complete).
CANNOT_EXPRESS = {
    **{
        field: COMPOSE_CANNOT_EXPRESS[field]
        for field in (
            "gpus",
            "requests",
            "cache_gb",
            "gpu_resource",
            "rpc_port",
            "liveness",
            "cache_basis",
            "disk_gib",
        )
    },
    "program": "the image's entrypoint (or the spec's own) runs the program: a docker run names none",
}


def shell_word(arg: str) -> str:
    """Shell-quote, but leave a whole-token $SETTING expandable, as the recipe pages print it."""
    match = PLACEHOLDER.fullmatch(arg)
    known = match is not None and known_setting(match.group("braced") or match.group("bare")) is not None
    return arg if known else shlex.quote(arg)


def command_words(spec: RunSpec) -> list[str]:
    """What follows the image: the entrypoint's words after its first (docker run's --entrypoint takes
    one), then the arguments."""
    return [*spec.entrypoint[1:], *spec.argv]


def start_note(spec: RunSpec) -> list[str]:
    """The processes to start first, as a comment line (a docker run starts one process)."""
    return [f"# start it once these answer: {', '.join(spec.after)}"] if spec.after else []


def run_options(spec: RunSpec) -> list[str]:
    """Everything between `docker run --rm` and the image, one option with its value per item."""
    options: list[str] = []
    if spec.entrypoint:  # docker run takes one word here; the rest lead the command (command_words)
        options.append(f"--entrypoint {shlex.quote(spec.entrypoint[0])}")
    options.append(f"--platform {spec.platform}")  # a multi-platform tag: the engine pulls this member
    if spec.gpu_request:
        options.append(f"--gpus {spec.gpu_request.count}")
    options += [f"--device={device}" for device in spec.devices]
    options += [f"--group-add {shell_word(group)}" for group in spec.groups]
    options += [f"--security-opt {shlex.quote(option)}" for option in spec.security_opt]
    options += [f"--cap-add {capability}" for capability in spec.capabilities]
    options.append(f"--user {spec.user.ids}")
    options += ["--read-only"] if spec.read_only_root else []
    options += [f"--tmpfs {tmpfs_mount(spec, folder)}" for folder in spec.writable]
    options += [f"--shm-size {spec.shm_size}"] if spec.shm_size else []
    options += [f"--ulimit {name}={limit}" for name, limit in spec.ulimits]
    options += [f"--restart {spec.restart}"] if spec.restart != "no" else []
    if spec.network == "host":
        options.append("--network host")
    else:
        published = f"${{{BIND_SETTING}:-{spec.publish_address}}}:${{{PORT_SETTING}:-{spec.port}}}"
        options.append(f'-p "{published}:{spec.port}"')
    options += [f"-e {name}={shell_word(value)}" for name, value in spec.environment.items()]
    options += [f"-e {secret.env}" for secret in spec.secrets]  # passed from the shell: never a value here
    options += [
        f'-v "${{{volume.setting}:-{volume.default.replace("~", "$HOME", 1)}}}:{volume.target}"'
        for volume in spec.volumes
    ]
    # a generated config beside the compose files (run from that folder), filled when the process starts
    options += [f'-v "$PWD/{config.file}:{config.template}:ro"' for config in spec.configs]
    options += [f"--label {shlex.quote(f'{name}={value}')}" for name, value in spec.all_labels]
    if spec.probe is None:
        options.append("--no-healthcheck")
    else:
        host = spec.probe.host
        assert isinstance(host, str)
        probe = spec.probe
        options += [
            f"--health-cmd {shlex.quote(' '.join(probe.command(host)))}",
            f"--health-interval {probe.interval_s}s --health-timeout {probe.timeout_s}s",
            f"--health-retries {probe.retries} --health-start-period {probe.start_period_s}s",
        ]
    return options
