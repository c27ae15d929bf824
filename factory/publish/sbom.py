"""The image's SBOM (CycloneDX 1.6 JSON, made with cyclonedx-python-lib): every OS package dpkg records as
installed and every Python distribution of the image's interpreter, read from inside the built image itself,
each Python package with the hashes the lock allowed for it.

Made from the image (not from the plan), so it lists what is really there: that the torchvision removed for
the +cpu torch is absent, that the venv's own pip is present. `factory publish` attests it on the pushed
digest; `factory verify` and the compose gate compare its Python packages with the lock (factory.trust.gate).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import docker
from cyclonedx.model import HashAlgorithm, HashType, Property
from cyclonedx.model.bom import Bom, BomMetaData
from cyclonedx.model.component import Component, ComponentType
from cyclonedx.model.tool import ToolRepository
from cyclonedx.output.json import JsonV1Dot6
from docker.errors import ImageNotFound
from packageurl import PackageURL

from factory import __version__
from factory.base.errors import DockerError
from factory.base.files import write_text_atomic
from factory.engine.connect import connect
from factory.plan.models import ImagePlan
from factory.trust.expect import BOOTSTRAP, locked_packages
from factory.trust.gate import canonical
from factory.validate.static import run_in_image

PROPERTY = "ai.vllm.factory:source"  # where a component came from: the lock, the venv itself, dpkg
# Read inside the image with its own interpreter: the Python distributions it imports from, and dpkg's status
# file as dpkg keeps it (only what is installed: a removed package's config files stay listed there).
INVENTORY_SCRIPT = r"""
import importlib.metadata, json
python = sorted({(d.metadata["Name"], d.version) for d in importlib.metadata.distributions()
                 if d.metadata["Name"]})
deb, fields = [], {}
try:
    text = open("/var/lib/dpkg/status", encoding="utf-8", errors="replace").read()
except OSError:
    text = ""
for stanza in text.split("\n\n"):
    fields = dict(line.split(": ", 1) for line in stanza.splitlines() if ": " in line and line[0] != " ")
    if fields.get("Status", "").endswith(" installed") and "Package" in fields:
        deb.append([fields["Package"], fields.get("Version", ""), fields.get("Architecture", "")])
release = {}
try:
    for line in open("/etc/os-release", encoding="utf-8"):
        key, _, value = line.strip().partition("=")
        release[key] = value.strip('"')
except OSError:
    pass
print("FACTORY-SBOM " + json.dumps({"python": python, "deb": sorted(deb), "os": release.get("ID", "linux"),
                                    "os_version": release.get("VERSION_ID", "")}))
"""


def inventory(client: docker.DockerClient, image: str) -> dict[str, Any]:
    output = run_in_image(client, image, ["python3", "-c", INVENTORY_SCRIPT], {})
    line = next(line for line in output.splitlines() if line.startswith("FACTORY-SBOM "))
    found: dict[str, Any] = json.loads(line.removeprefix("FACTORY-SBOM "))
    return found


def _python_component(name: str, version: str, locked: dict[str, tuple[str, list[str]]]) -> Component:
    entry = locked.get(canonical(name))
    source = "lock" if entry else ("venv" if canonical(name) in BOOTSTRAP else "image")
    hashes = [HashType(alg=HashAlgorithm.SHA_256, content=h) for h in entry[1]] if entry else []
    purl = PackageURL(type="pypi", name=canonical(name), version=version)
    return Component(
        name=name,
        version=version,
        purl=purl,
        bom_ref=purl.to_string(),
        hashes=hashes,
        properties=[Property(name=PROPERTY, value=source)],
    )


def _deb_component(name: str, version: str, arch: str, found: dict[str, Any]) -> Component:
    distro = f"{found['os']}-{found['os_version']}" if found.get("os_version") else None
    qualifiers = {"arch": arch, **({"distro": distro} if distro else {})}
    purl = PackageURL(type="deb", namespace=found["os"], name=name, version=version, qualifiers=qualifiers)
    return Component(
        name=name,
        version=version,
        purl=purl,
        bom_ref=purl.to_string(),
        properties=[Property(name=PROPERTY, value="dpkg")],
    )


def cyclonedx(client: docker.DockerClient, image: ImagePlan) -> dict[str, Any]:
    """The SBOM of the built image (by its local reference) as a JSON object, CycloneDX 1.6."""
    try:
        built = client.images.get(image.immutable_reference)  # the build of exactly these inputs
    except ImageNotFound:
        raise DockerError(
            f"{image.immutable_reference} is not built on this engine; build it first"
        ) from None
    found = inventory(client, image.immutable_reference)
    locked = locked_packages(image)
    container = Component(
        type=ComponentType.CONTAINER,
        name=image.repository,
        version=image.tag,
        bom_ref=image.immutable_reference,
        hashes=[HashType(alg=HashAlgorithm.SHA_256, content=str(built.id).removeprefix("sha256:"))],
        properties=[Property(name="ai.vllm.factory:inputs-hash", value=image.inputs_hash)],
    )
    tool = Component(type=ComponentType.APPLICATION, name="vllm-image-factory", version=__version__)
    components = [
        *(_python_component(name, version, locked) for name, version in found["python"]),
        *(_deb_component(name, version, arch, found) for name, version, arch in found["deb"]),
    ]
    bom = Bom(
        metadata=BomMetaData(component=container, tools=ToolRepository(components=[tool])),
        components=components,
    )
    bom.register_dependency(container, components)  # the image holds every one of them
    document: dict[str, Any] = json.loads(JsonV1Dot6(bom).output_as_string())
    return document


def write_sbom(image: ImagePlan, reports: Path) -> tuple[Path, int]:
    """Write the SBOM of the built image under `reports`; returns the path and its component count."""
    path = reports / f"sbom-{image.slug}-{image.tag}.cdx.json"
    bom = cyclonedx(connect(), image)
    write_text_atomic(path, json.dumps(bom, indent=2) + "\n")
    return path, len(bom["components"])
