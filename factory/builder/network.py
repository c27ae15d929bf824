"""The network a build's RUN steps get: the `network` build setting, written by each BuildKit front end in
its own words, or refused where a front end cannot carry it (never dropped in silence).

`host` is for a package index (a mirror) that listens on the build host's loopback: in the default
network a RUN step has its own loopback, and 127.0.0.1 there is not the host's."""

from __future__ import annotations

from packaging.version import Version

from factory.base.errors import DockerError
from factory.base.settings import Network

DEFAULT: Network = "default"
# What buildx calls the privilege of a build that shares the host's network.
HOST_ENTITLEMENT = "network.host"
# From 0.17.0 bake refuses a target with `network = "host"` unless the command grants it with
# `--allow network.host` (docker/buildx bake/entitlements.go); older bake has no `--allow` flag at all.
BAKE_ALLOW_FROM = Version("0.17.0")
SETTING = "the build setting network (.factory.local.toml [build], FACTORY_BUILD_NETWORK or --build-network)"


def compose_build_fields(network: Network) -> dict[str, str]:
    """The compose file's `build.network` (Compose passes it to BuildKit as the network of every RUN)."""
    return {} if network == DEFAULT else {"network": network}


def bake_target_fields(network: Network) -> dict[str, object]:
    """The bake target's `network`, and the entitlement it needs declared."""
    return {} if network == DEFAULT else {"network": network, "entitlements": [HOST_ENTITLEMENT]}


def bake_flags(network: Network) -> list[str]:
    """`docker buildx bake` grants the entitlement only on its command line (no prompt in a pipe)."""
    return [] if network == DEFAULT else ["--allow", HOST_ENTITLEMENT]


def check_backend(network: Network, backend: str, buildx: Version | None) -> None:
    """Refuse a backend that cannot give the build this network. `buildx`: the plugin's release, None
    without it."""
    if network == DEFAULT:
        return
    if backend == "bake" and (buildx is None or buildx < BAKE_ALLOW_FROM):
        raise DockerError(
            f'{SETTING} is "{network}", which the bake backend grants from buildx {BAKE_ALLOW_FROM} on '
            f"(`--allow {HOST_ENTITLEMENT}`); this machine's buildx is {buildx or 'missing'}: "
            "upgrade buildx, or build with --backend compose on a machine without buildx"
        )
    if backend == "compose" and buildx is not None:
        # Compose hands its builds to `buildx bake` wherever buildx is installed (COMPOSE_BAKE, the default
        # from Compose 2.37) and grants bake no network.host (pkg/compose/build_bake.go in 2.40.3): bake
        # would stop with "additional privileges requested".
        raise DockerError(
            f'{SETTING} is "{network}", which the compose backend cannot give where buildx is installed '
            f"(Compose passes the build to buildx bake without `--allow {HOST_ENTITLEMENT}`); "
            "build with --backend bake (or auto), which grants it"
        )
