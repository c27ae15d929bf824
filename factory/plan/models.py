"""Plans: everything the templates print, computed once from recipe, strategy and catalog.

An ImageSpec is one image (recipe x hardware x variant) as planned; an ImagePlan is the same spec with its
inputs hash, which is what every later stage receives. A Deployment is one way to run that image (x strategy
x node count), with one NodeRole per compose file. Templates only format these.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from pydantic import BaseModel, ConfigDict, Field

from factory.catalog.schema import Vendor

# Compose files and `factory show` spell these settings as ${NAME}; defaults fill in where vLLM has one.
SETTINGS: dict[str, tuple[str | None, str]] = {
    "HEAD_ADDRESS": (None, "address of the head node, reachable from every node"),
    "MASTER_PORT": ("29501", "torch.distributed rendezvous port on the head (vLLM's default)"),
    "DP_RPC_PORT": ("13345", "data-parallel RPC port on the head"),
    "IFACE_NAME": (None, "network interface NCCL and Gloo use on every node (e.g. eth0, ib0)"),
    "RENDER_GID": (
        None,
        "the host's render group id, which owns /dev/kfd (getent group render | cut -d: -f3)",
    ),
}
PLACEHOLDER = re.compile(r"\$\{?(?P<name>[A-Z_][A-Z0-9_]*)\}?")


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class NodeRole(Frozen):
    name: str  # "node" for one node; "head", "worker-1", ... for several
    rank: int
    serves_http: bool
    args: list[str]  # appended by the compose file to the image's entrypoint


class ImageSpec(Frozen):
    """One image as planned. Its JSON (field order included) is an input of the image's hash."""

    recipe_file: str
    recipe_id: str  # the recipe's model.model_id: how the recipe tree knows it
    model_id: str  # the model served: a variant may serve another (e.g. a quantized copy)
    weights: str  # what --model gets: a hub id, or the folder the image carries
    bundled_model_src: str | None  # project-relative folder copied into the image
    revision: str | None
    slug: str
    variant: str
    hardware: str
    hardware_name: str
    vendor: str
    platform: str
    gpu_arch: str | None
    gpus_per_node: int
    vllm_version: str
    install_kind: str
    package: str
    torch_requirement: str | None
    extra_index_url: str | None
    remove_packages: list[str]
    remove_packages_reason: str | None
    system_packages: list[str]
    base_image: str
    env: dict[str, str]
    entrypoint_args: list[str]
    start_period_s: int
    repository: str
    tag: str

    @property
    def directory(self) -> PurePosixPath:
        """The path spells the image: images/<repository name>/<tag>/."""
        return PurePosixPath("images") / self.slug / self.tag

    @property
    def reference(self) -> str:
        return f"{self.repository}:{self.tag}"

    @property
    def served_model_name(self) -> str:
        return self.model_id

    @property
    def entrypoint(self) -> list[str]:
        return ["factory-serve", *self.entrypoint_args]

    @property
    def model_source(self) -> str:
        """Which Dockerfile part places the model: `bundled` copies it in, `hub` leaves it to the cache."""
        return "bundled" if self.bundled_model_src else "hub"

    @property
    def pip_requirements(self) -> list[str]:
        return [f"{self.package}=={self.vllm_version}", *filter(None, [self.torch_requirement])]

    @property
    def pip_remove_command(self) -> str:
        """Removal in the install's own layer, so the removed files never reach the image."""
        return f"pip uninstall -y {' '.join(self.remove_packages)}" if self.remove_packages else "true"


class ImagePlan(ImageSpec):
    """An ImageSpec with the hash of everything the image is made from: what every stage after planning
    receives. The hash is required, so an unhashed plan cannot reach a build, a tag or a label."""

    inputs_hash: str = Field(pattern=r"^[0-9a-f]{64}$")

    @property
    def immutable_tag(self) -> str:
        return f"{self.tag}-{self.inputs_hash[:12]}"

    @property
    def immutable_reference(self) -> str:
        return f"{self.repository}:{self.immutable_tag}"

    @property
    def labels(self) -> dict[str, str]:
        return image_labels(self, self.inputs_hash)


def image_labels(spec: ImageSpec, inputs_hash: str) -> dict[str, str]:
    """The OCI and factory labels of an image: what it serves, on what, from which inputs."""
    return {
        "org.opencontainers.image.title": f"{spec.model_id} on {spec.hardware_name}",
        "org.opencontainers.image.description": (
            f"vLLM {spec.vllm_version} serving {spec.model_id} ({spec.variant}) on {spec.hardware_name}"
        ),
        "org.opencontainers.image.version": spec.tag,
        "org.opencontainers.image.vendor": "vllm-image-factory",
        "ai.vllm.factory.recipe": spec.recipe_id,
        "ai.vllm.factory.model": spec.model_id,
        "ai.vllm.factory.variant": spec.variant,
        "ai.vllm.factory.hardware": spec.hardware,
        "ai.vllm.factory.gpu-arch": spec.gpu_arch or "none",
        "ai.vllm.factory.platform": spec.platform,
        "ai.vllm.factory.vllm-version": spec.vllm_version,
        "ai.vllm.factory.inputs-hash": inputs_hash,
    }


class Deployment(Frozen):
    """One way to run an image: a strategy on a node count, one NodeRole per compose file."""

    image: ImagePlan
    strategy: str  # the strategy's id, e.g. multi_node_tp: its file name and its compose folder
    strategy_title: str  # its display name, e.g. "Multi-Node Tensor Parallel"
    nodes: int
    roles: list[NodeRole]
    env: dict[str, str]  # the strategy's environment (NCCL/Gloo interface, ...)
    host_network: bool
    vendor: Vendor  # what the containers need to see the GPUs

    @property
    def directory(self) -> PurePosixPath:
        base = PurePosixPath("compose") / self.image.slug / f"{self.image.hardware}-{self.image.variant}"
        if self.nodes == 1:
            return base / self.strategy
        return base / self.strategy / f"{self.nodes}-nodes"

    def file_name(self, role: NodeRole) -> str:
        return "compose.yaml" if self.nodes == 1 else f"{role.name}.compose.yaml"

    def project_name(self, role: NodeRole) -> str:
        parts = [self.image.slug, self.image.hardware, self.strategy.replace("_", "-")]
        if self.nodes > 1:
            parts.append(role.name)
        return "-".join(parts)

    @property
    def network(self) -> str:
        return "host" if self.host_network else "published"

    def role_title(self, role: NodeRole) -> str:
        if self.nodes == 1:
            return "one node"
        headless = "" if role.serves_http else ", headless"
        return f"node rank {role.rank} of {self.nodes} ({role.name}{headless})"

    @property
    def settings_used(self) -> dict[str, tuple[str | None, str]]:
        text = " ".join(
            [
                *self.env.values(),
                *(arg for role in self.roles for arg in role.args),
                *(group.group for group in self.vendor.group_add),
            ]
        )
        names = {match.group("name") for match in PLACEHOLDER.finditer(text)}
        return {name: SETTINGS[name] for name in SETTINGS if name in names}


class Skipped(Frozen):
    """A combination the factory does not generate, and why."""

    what: str
    reason: str


def compose_interpolation(value: str) -> str:
    """${NAME} -> ${NAME:-default} or ${NAME:?why}: compose then fails with a message, not a blank."""

    def spell(match: re.Match[str]) -> str:
        name = match.group("name")
        if name not in SETTINGS:
            return match.group(0)
        default, why = SETTINGS[name]
        return f"${{{name}:-{default}}}" if default else f"${{{name}:?set {name}: {why} (see .env.example)}}"

    return PLACEHOLDER.sub(spell, value)


def normalise_placeholders(value: str) -> str:
    """Upstream strategies write $IFACE_NAME; the factory writes ${IFACE_NAME} everywhere."""
    return PLACEHOLDER.sub(lambda m: "${" + m.group("name") + "}", value)
