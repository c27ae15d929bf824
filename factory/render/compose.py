"""The compose format: one compose file per process of a deployment, printed from its run spec.

Everything compose-specific lives here: the folder and file names, the project names, how a setting is
written (`${NAME:-default}`, `${NAME:?what to set}`), and the `.env.example` beside the files. What a
process runs with is the run spec's; this module decides no run option.
"""

from __future__ import annotations

import json
from pathlib import PurePosixPath

from factory.base.outputs import OutputFile
from factory.base.templating import environment
from factory.catalog.schema import Writable
from factory.plan.deployment import Deployment, NodeRole
from factory.plan.runspec import RunSpec
from factory.plan.settings import PLACEHOLDER, known_setting, placeholder_names, setting

# Run spec fields compose files cannot express, and why (a test keeps this list complete).
CANNOT_EXPRESS = {
    "gpus": "Docker does not allocate GPUs: a device request for N always takes the node's first N, so "
    "every process reserves all of its node's GPUs (the recipe pages' --gpus all)",
    "requests": "what a scheduler places a pod by: one engine on one host has no scheduler, and a memory "
    "reservation is a soft limit that starts nothing elsewhere",
    "cache_gb": "the model cache is a host folder the user names (HF_CACHE): the host's disk bounds it",
    "gpu_resource": "a Kubernetes device plugin's name: Docker gives GPUs by driver (a device request) "
    "or by device path",
    "rpc_port": "the Mooncake master runs on the host's network, where its command says where it listens "
    "(-rpc_port): compose publishes only a process's API, and only off the host's network",
    "liveness": "the engine restarts no container for failing its health check (it marks it unhealthy): "
    "only a scheduler that restarts on a failed check takes it",
    "cache_basis": "the model cache is a host folder the user names (HF_CACHE): its size is the host's",
    "disk_gib": "disk a scheduler reserves for a pod: one engine on one host reserves none (the host's disk "
    "bounds it)",
}
# ... and, for a process on the host's network (multi-node and P/D), these too: nothing is published there.
CANNOT_EXPRESS_ON_HOST_NETWORK = {
    "port": "on the host's network the process listens where its own command says (--port, its program's "
    "default): compose publishes no port there",
    "publish_address": "on the host's network nothing is published: the process's own --host decides where "
    "it listens",
}
IMAGE_SETTING = "FACTORY_IMAGE"  # runs another image (a mirror, a test build) with the same file
ROUTER_IMAGE_SETTING = "VLLM_ROUTER_IMAGE"  # the same for the PD router's image
COMMAND_NOTES = {
    "vllm": "The whole `vllm serve` command of this node: the image's entrypoint runs `vllm serve` with it.",
    "vllm-router": "The router's whole command: the image's entrypoint runs `vllm-router` with it.",
    "mooncake-master": "The Mooncake master's whole command, after its program (entrypoint).",
    "mooncake-store": "The Mooncake store service's whole command, after its program (entrypoint).",
}
SERVICES = {"vllm": "vllm", "vllm-router": "router", "mooncake-master": "master", "mooncake-store": "store"}
MOONCAKE_NOTES = (
    "Mooncake's own program, from this deployment's image: every Mooncake process runs one locked wheel.",
)
ROUTER_NOTES = (
    "vllm-router is its own program (PyPI: vllm-router), in the factory's router image "
    "(`factory build vllm-router`).",
)
PORT_SETTING = "API_PORT"  # the host port a one-node deployment publishes its API on
BIND_SETTING = "BIND_ADDRESS"  # the host address it is published on (loopback unless set)


def directory(deployment: Deployment) -> PurePosixPath:
    image = deployment.image
    base = PurePosixPath("compose") / image.slug / f"{image.hardware}-{image.variant}"
    if deployment.deploy_type == "multi_node":
        return base / deployment.layout / f"{deployment.nodes}-nodes"
    return base / deployment.layout


def file_name(deployment: Deployment, role: NodeRole) -> str:
    return "compose.yaml" if len(deployment.roles) == 1 else f"{role.name}.compose.yaml"


def path(deployment: Deployment, role: NodeRole) -> PurePosixPath:
    return directory(deployment) / file_name(deployment, role)


def project_name(deployment: Deployment, role: NodeRole) -> str:
    image = deployment.image
    parts = [image.slug, image.hardware, image.variant, deployment.layout]
    if len(deployment.roles) > 1:
        parts.append(role.name)
    return "-".join(parts).replace("_", "-").replace(".", "-").lower()


def compose_value(value: str) -> str:
    """A value for a compose file: placeholders become ${NAME:-default} or ${NAME:?what to set}; every other
    `$` is doubled, so compose passes it through as it is."""
    parts = []
    last = 0
    for match in PLACEHOLDER.finditer(value):
        name = match.group("braced") or match.group("bare")
        known = known_setting(name)
        if known is None:
            continue
        parts.append(value[last : match.start()].replace("$", "$$"))
        if known.default is not None:
            parts.append(f"${{{name}:-{known.default}}}")
        else:
            parts.append(f"${{{name}:?set {name}: {known.why} (see .env.example)}}")
        last = match.end()
    parts.append(value[last:].replace("$", "$$"))
    return "".join(parts)


def settings_used(deployment: Deployment) -> list[str]:
    """Every setting the deployment's files name, for its .env.example."""
    texts: list[str] = []
    for role in deployment.roles:
        spec = deployment.spec(role)
        texts += [*spec.argv, *spec.environment.values(), *spec.groups]
        texts += [spec.image] if spec.image.startswith("$") else []
    return placeholder_names(texts)


def render(deployment: Deployment, role: NodeRole) -> str:
    spec = deployment.spec(role)
    name = file_name(deployment, role)
    start = f"docker compose -f {name} up -d" + (
        # A headless rank has no API to wait for (compose's --wait refuses a service whose check is off); the
        # head turns healthy only once every rank has joined, so its --wait covers it.
        " --wait" if spec.probe else "  (headless: the head's --wait covers this node)"
    )
    if spec.after:  # each file is one host's: compose cannot wait across them, the order is said here
        start = f"{start}  (once these answer: {', '.join(spec.after)})"
    notes = {"vllm": (), "vllm-router": ROUTER_NOTES}.get(spec.program, MOONCAKE_NOTES)
    return (
        environment()
        .get_template("compose.yaml.j2")
        .render(
            service=SERVICES[spec.program],
            image_notes=notes,
            entrypoint=[compose_value(word) for word in spec.entrypoint],
            configs=[(config, f"./{config.file}") for config in spec.configs],
            command_note=COMMAND_NOTES[spec.program],
            device_note=_device_note(deployment, spec),
            image=deployment.image,
            plan=deployment,
            role_title=deployment.role_title(role),
            start=start,
            project_name=project_name(deployment, role),
            spec=spec,
            image_ref=_image(spec, deployment.image.published),
            command=[compose_value(arg) for arg in spec.argv],
            env={name: compose_value(value) for name, value in spec.environment.items()},
            labels=[(name, value.replace("$", "$$")) for name, value in spec.all_labels],  # text, as written
            secrets=[(secret, f"${{{secret.env}:-}}") for secret in spec.secrets],
            volumes=[(volume, f"${{{volume.setting}:-{volume.default}}}") for volume in spec.volumes],
            owner_note=owner_note(spec),
            tmpfs=[(folder, tmpfs_mount(spec, folder)) for folder in spec.writable],
            groups=[compose_value(group) for group in spec.groups],
            group_notes=dict(_group_notes(deployment)),
            published=f"${{{BIND_SETTING}:-{spec.publish_address}}}:${{{PORT_SETTING}:-{spec.port}}}:{spec.port}",
            health=_health(spec),
        )
    )


def tmpfs_mount(spec: RunSpec, folder: Writable) -> str:
    """A writable folder as a tmpfs of its size, owned by the process's user (`exec` where it holds compiled
    kernels: Docker mounts a tmpfs noexec unless told)."""
    user = spec.user
    options = ["exec"] if folder.exec else []
    options += [f"size={folder.size_gib}g", f"uid={user.uid}", f"gid={user.gid}", "mode=0700"]
    return f"{folder.target}:{','.join(options)}"


def owner_note(spec: RunSpec) -> str:
    """What a host folder mounted into the container needs: the process's user must own it (once, for a new
    folder or one a root image filled)."""
    ids = spec.user.ids
    return f"it must be writable by {ids} (once: sudo chown -R {ids} FOLDER)"


def _device_note(deployment: Deployment, spec: RunSpec) -> str | None:
    """What a process with no devices to reserve is told (the router uses no GPU: nothing to say)."""
    if spec.gpu_request or spec.devices or spec.program != "vllm":
        return None
    return f"{deployment.vendor.name}: no devices to reserve."


def _image(spec: RunSpec, published: str | None) -> str:
    """The image, a setting may replace; the router's is quoted (with no lock it is a setting whose message
    holds colons, which YAML would read as a mapping). A published image runs by registry and digest
    (`published`: the publish record's, a multi-platform list's where it joined one)."""
    router = spec.program == "vllm-router"
    if spec.image.startswith("$"):
        value = compose_value(spec.image)
    else:
        setting = ROUTER_IMAGE_SETTING if router else IMAGE_SETTING
        value = f"${{{setting}:-{published if published and not router else spec.image}}}"
    return json.dumps(value) if router else value


def _group_notes(deployment: Deployment) -> list[tuple[str, str]]:
    return [(compose_value(g.group), g.why) for g in deployment.vendor.group_add if g.why]


def _health(spec: RunSpec) -> list[str] | None:
    if spec.probe is None:
        return None
    host = spec.probe.host
    assert isinstance(host, str)
    return ["CMD", *(compose_value(word) for word in spec.probe.command(host))]


def env_example(deployment: Deployment) -> str | None:
    names = settings_used(deployment)
    if not names:
        return None
    settings = {name: setting(name) for name in names}
    return environment().get_template("env.example.j2").render(settings=settings)


def files(deployment: Deployment) -> list[OutputFile]:
    """Each process's compose file, the settings' .env.example, and the configs its processes read."""
    files = [
        OutputFile(path(deployment, role), render(deployment, role).encode()) for role in deployment.roles
    ]
    example = env_example(deployment)
    if example is not None:
        files.append(OutputFile(directory(deployment) / ".env.example", example.encode()))
    # The config templates its processes read (a KV store's Mooncake configs), beside the files mounting them.
    configs = {config.file: config for group in deployment.run for config in group.spec.configs}
    files += [
        OutputFile(directory(deployment) / name, config.content.encode())
        for name, config in sorted(configs.items())
    ]
    return files
