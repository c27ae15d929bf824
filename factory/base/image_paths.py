"""Where the factory's own files live inside every image it builds: one home for each path, read by the
Dockerfile templates, the static checks and the SBOM."""

from __future__ import annotations

LIBRARY = "/usr/local/lib/factory"
IMAGE_INFO = f"{LIBRARY}/image_info.py"  # records and checks the installed vLLM and torch
VERSIONS = f"{LIBRARY}/versions.json"  # what our install step left
BASE_VERSIONS = f"{LIBRARY}/base-versions.json"  # what a vendor base image brought, before our layers
FIT_LAYER = f"{LIBRARY}/fit_layer.py"  # fits a locked layer onto a vendor image's own packages
LAUNCHER = "/usr/local/bin/factory-serve"  # the image's entrypoint
BUNDLED_MODELS = "/opt/models"  # where an image that carries its model keeps it
VENV = "/opt/vllm"  # the venv a pip install makes (the Dockerfile templates name it too)
CHECKS = "/tmp/factory-checks"  # where validation copies the checks it runs inside a container

TEMPLATE_GLOBALS = {
    "image_info": IMAGE_INFO,
    "versions_file": VERSIONS,
    "base_versions_file": BASE_VERSIONS,
    "fit_layer": FIT_LAYER,
    "launcher": LAUNCHER,
}
