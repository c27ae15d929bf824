"""A CycloneDX SBOM of a built image, read from inside it: its Python distributions and its OS packages.

Made from the image itself (not from the plan), so it lists what is really there, e.g. that the
torchvision removed for the +cpu torch is absent. CI attaches it to the pushed digest with cosign."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import docker
from docker.errors import ImageNotFound

from factory import __version__
from factory.base.errors import DockerError
from factory.base.files import write_text_atomic
from factory.engine.connect import connect
from factory.plan.models import ImagePlan
from factory.plan.router import RouterImage
from factory.validate.static import run_in_image

INVENTORY_SCRIPT = r"""
import importlib.metadata, json, subprocess
dists = importlib.metadata.distributions()
python = sorted({(d.metadata["Name"], d.version) for d in dists if d.metadata["Name"]})
try:
    listing = subprocess.run(["dpkg-query", "-W", "-f=${Package}\t${Version}\t${Architecture}\n"],
                             capture_output=True, text=True, check=False).stdout
except FileNotFoundError:
    listing = ""
os_id = "linux"
try:
    for line in open("/etc/os-release"):
        if line.startswith("ID="):
            os_id = line.split("=", 1)[1].strip().strip('"')
except OSError:
    pass
deb = [line.split("\t") for line in listing.splitlines() if line.count("\t") == 2]
print("FACTORY-SBOM " + json.dumps({"python": python, "deb": deb, "os": os_id}))
"""


def inventory(client: docker.DockerClient, image: str) -> dict[str, Any]:
    output = run_in_image(client, image, ["python3", "-c", INVENTORY_SCRIPT], {})
    line = next(line for line in output.splitlines() if line.startswith("FACTORY-SBOM "))
    found: dict[str, Any] = json.loads(line.removeprefix("FACTORY-SBOM "))
    return found


def cyclonedx(client: docker.DockerClient, reference: str) -> dict[str, Any]:
    try:
        image = client.images.get(reference)
    except ImageNotFound:
        raise DockerError(f"{reference} is not built on this engine; build it first") from None
    found = inventory(client, reference)
    components = [
        {
            "type": "library",
            "name": name,
            "version": version,
            "purl": f"pkg:pypi/{name.lower().replace('_', '-')}@{quote(version, safe='')}",
        }
        for name, version in found["python"]
    ]
    components += [
        {
            "type": "library",
            "name": name,
            "version": version,
            "purl": f"pkg:deb/{found['os']}/{name}@{quote(version, safe='')}?arch={arch}",
        }
        for name, version, arch in found["deb"]
    ]
    return {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "version": 1,
        "metadata": {
            "timestamp": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "tools": {
                "components": [{"type": "application", "name": "vllm-image-factory", "version": __version__}]
            },
            "component": {
                "type": "container",
                "name": reference.rsplit(":", 1)[0],
                "version": reference.rsplit(":", 1)[1],
                "hashes": [{"alg": "SHA-256", "content": str(image.id).removeprefix("sha256:")}],
            },
        },
        "components": components,
    }


def write_sbom(image: ImagePlan | RouterImage, reports: Path) -> tuple[Path, int]:
    """Write the CycloneDX SBOM of the built image under `reports`; returns the path and component count."""
    path = reports / f"sbom-{image.slug}-{image.tag}.cdx.json"
    bom = cyclonedx(connect(), image.reference)
    write_text_atomic(path, json.dumps(bom, indent=2) + "\n")
    return path, len(bom["components"])
