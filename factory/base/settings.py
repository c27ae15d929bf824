"""Build settings for builds behind a firewall: base-image override, pip sources, CA bundle, the build's
network.

Read, later winning: .factory.local.toml in the project (testbench/up writes one for its machine),
then FACTORY_* environment variables, then command-line flags. The CA bundle and pip.conf reach
builds only as BuildKit secrets; no setting is ever written into an image, a build argument or a log.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError

from factory.base.errors import InputError
from factory.base.files import write_text_atomic
from factory.base.models import Strict

LOCAL_SETTINGS = ".factory.local.toml"
# The network of a build's RUN steps: BuildKit's own ("default") or the build host's ("host"), for an index
# that listens on the host's loopback. Each front end writes it in its own words (factory/builder/network.py).
Network = Literal["default", "host"]


class BuildSettings(Strict):
    base_image: str | None = Field(None, description="use this image instead of every target's upstream base")
    arm64_base_image: str | None = Field(
        None,
        description="the base of linux/arm64 targets (Grace) instead of base_image, where that one is for"
        " amd64 only (a local image); base_image then serves as the install stage's base on the build's"
        " platform",
    )
    ca_bundle: Path | None = Field(
        None, description="CA bundle for TLS-inspecting proxies (a BuildKit secret)"
    )
    pip_conf: Path | None = Field(
        None, description="a pip.conf with index URLs and credentials (a BuildKit secret)"
    )
    uv_env: Path | None = Field(
        None,
        description="an env file for uv (UV_INDEX_URL=..., UV_INDEX_<NAME>_PASSWORD=...), a BuildKit secret:"
        " uv does not read pip.conf",
    )
    find_links: Path | None = Field(None, description="a folder of wheels pip may install from")
    pip_extra_index_url: str | None = Field(
        None,
        description='replaces the catalog\'s extra index ("" for none); not for credentials: use pip_conf',
    )
    registry: str | None = Field(None, description="registry host[:port] that image names are prefixed with")
    network: Network = Field(
        "default",
        description='"host": RUN steps share the build host\'s network, to reach an index on its loopback',
    )

    def base_for(self, platform: str) -> str | None:
        """The base image setting a target of this platform builds on (None: the catalog's own)."""
        if platform == "linux/arm64" and self.arm64_base_image:
            return self.arm64_base_image
        return self.base_image


ENV_NAMES = {
    "base_image": "FACTORY_BASE_IMAGE",
    "arm64_base_image": "FACTORY_ARM64_BASE_IMAGE",
    "ca_bundle": "FACTORY_CA_BUNDLE",
    "pip_conf": "FACTORY_PIP_CONF",
    "uv_env": "FACTORY_UV_ENV",
    "find_links": "FACTORY_FIND_LINKS",
    "pip_extra_index_url": "FACTORY_PIP_EXTRA_INDEX_URL",
    "registry": "FACTORY_REGISTRY",
    "network": "FACTORY_BUILD_NETWORK",
}


def load_settings(root: Path, overrides: dict[str, object] | None = None) -> BuildSettings:
    values: dict[str, object] = {}
    origins: dict[str, tuple[Path | None, str]] = {}  # setting -> where its value was read, for errors
    path = root / LOCAL_SETTINGS
    if path.is_file():
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise InputError(f"malformed TOML: {exc}", file=path) from exc
        build = data.get("build", {})
        unknown = set(build) - set(BuildSettings.model_fields)
        if unknown:
            raise InputError(
                "unknown setting",
                file=path,
                field="build",
                value=sorted(unknown)[0],
                valid=BuildSettings.model_fields,
            )
        values.update(build)
        origins.update({field: (path, f"build.{field}") for field in build})
    for field, env_name in ENV_NAMES.items():
        if env_name in os.environ:
            values[field] = os.environ[env_name]
            origins[field] = (None, env_name)
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    values.update(given)
    origins.update({field: (None, f"the command line's {field}") for field in given})
    try:
        settings = BuildSettings.model_validate(values)
    except ValidationError as exc:
        first = exc.errors()[0]
        file, field = origins.get(str(first["loc"][0]), (None, str(first["loc"][0])))
        expected = first.get("ctx", {}).get("expected")
        valid = [c.strip(" '") for c in str(expected).replace(" or ", ",").split(",")] if expected else None
        raise InputError(
            first["msg"], file=file, field=field, value=first.get("input"), valid=valid
        ) from None
    for field in ("ca_bundle", "pip_conf", "uv_env", "find_links"):
        value = getattr(settings, field)
        if value is not None and not value.exists():
            raise InputError(
                "this path does not exist",
                file=path if path.is_file() else None,
                field=field,
                value=str(value),
            )
    return settings


def write_testbench_settings(path: Path, base_image: str, arm64_base_image: str | None = None) -> None:
    """The settings this machine needs: local base images, local wheels, the proxy's CA bundle."""
    lines = [
        "# Written by testbench/up for this machine; see docs/air-gapped.md.",
        "[build]",
        "# No registry is reachable here: every target builds on the locally bootstrapped Debian image.",
        f'base_image = "{base_image}"',
    ]
    if arm64_base_image:
        lines += [
            "# linux/arm64 targets (Grace) on the arm64 Debian image testbench/up-tests bootstraps (QEMU).",
            f'arm64_base_image = "{arm64_base_image}"',
        ]
    ca_bundle = os.environ.get("PIP_CERT") or os.environ.get("SSL_CERT_FILE")
    if ca_bundle and Path(ca_bundle).is_file():
        lines += [
            "# The TLS-inspecting proxy's CA bundle, passed to pip as a BuildKit secret.",
            f'ca_bundle = "{ca_bundle}"',
        ]
    find_links = os.environ.get("PIP_FIND_LINKS")
    if find_links and Path(find_links).is_dir() and any(Path(find_links).glob("*.whl")):
        lines += [
            "# Wheels on this machine that no index serves (a +cpu torch).",
            f'find_links = "{find_links}"',
        ]
    lines += [
        "# Only the package index is reached from here (the PyTorch indexes are not): the +cpu torch comes",
        "# from find_links when this machine has it, else the catalog's stand-in is locked.",
        'pip_extra_index_url = ""',
    ]
    write_text_atomic(path, "\n".join(lines) + "\n")


def registry_of(root: Path, given: str | None) -> str:
    """The registry to publish to: the one given, else the `registry` setting (or FACTORY_REGISTRY)."""
    registry = given or load_settings(root).registry
    if not registry:
        raise InputError(
            "no registry given",
            field="--registry",
            hint="pass --registry HOST[:PORT][/NAMESPACE] or set FACTORY_REGISTRY",
        )
    return registry
