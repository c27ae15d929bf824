"""The grammar of the commands that publish and establish trust: publish, publish-platforms, sbom, keygen,
verify, build-verifier, and the test bench's settings."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from factory.cli.files import cmd_testbench_settings
from factory.cli.images import cmd_publish, cmd_publish_platforms, cmd_sbom
from factory.cli.trust import cmd_build_verifier, cmd_keygen, cmd_verify

TargetArgs = Callable[..., None]


def add_publishing(sub: Any, target_args: TargetArgs) -> None:
    publish = sub.add_parser(
        "publish",
        help="push the tags of validated images, check the registry's digest, sign and attest it by digest",
    )
    target_args(publish)
    publish.add_argument(
        "--registry", help="HOST[:PORT][/NAMESPACE] (default: the registry setting / FACTORY_REGISTRY)"
    )
    publish.add_argument(
        "--tag",
        action="append",
        default=[],
        help="an extra tag, a template: '{tag}-1.2.0', '{tag}-sha-abc1234', 'latest-{hardware}-{variant}'",
    )
    publish.add_argument("--reports", type=Path, default=Path("reports"))
    publish.add_argument(
        "--force-unvalidated",
        action="store_true",
        help="publish although no passing validation is recorded (loud)",
    )
    publish.add_argument(
        "--allow-no-gpu",
        action="store_true",
        help="accept a validation whose static checks passed but whose GPU probes could not run here (a GPU"
        " image on a machine without its GPU: a Grace image on an amd64 host)",
    )
    signing = publish.add_mutually_exclusive_group()
    signing.add_argument(
        "--key",
        type=Path,
        help="the cosign private key file (default: its text in FACTORY_SIGNING_KEY);"
        " its passphrase: COSIGN_PASSWORD",
    )
    signing.add_argument(
        "--keyless", action="store_true", help="sign with the CI job's OIDC identity (GitHub Actions) instead"
    )
    signing.add_argument(
        "--unsigned", action="store_true", help="publish without signing (loud; not verifiable)"
    )
    publish.set_defaults(func=cmd_publish)

    platforms = sub.add_parser(
        "publish-platforms", help="join published images that differ only in CPU platform under one tag"
    )
    platforms.add_argument("model")
    platforms.add_argument(
        "--registry", help="HOST[:PORT][/NAMESPACE] (default: the registry setting / FACTORY_REGISTRY)"
    )
    platforms.set_defaults(func=cmd_publish_platforms)

    sbom = sub.add_parser("sbom", help="write a CycloneDX SBOM of a built image, read from inside it")
    target_args(sbom)
    sbom.add_argument("--reports", type=Path, default=Path("reports"))
    sbom.set_defaults(func=cmd_sbom)

    _add_trust(sub, target_args)

    bench = sub.add_parser(
        "testbench-settings", help="write .factory.local.toml for this machine (testbench/up)"
    )
    bench.add_argument("--base-image", required=True)
    bench.add_argument("--arm64-base-image", help="the base of linux/arm64 targets (testbench/up-tests)")
    bench.add_argument("--output", type=Path, required=True)
    bench.set_defaults(func=cmd_testbench_settings)


def _add_trust(sub: Any, target_args: TargetArgs) -> None:
    keygen = sub.add_parser(
        "keygen", help="make a cosign key pair (cosign.key, encrypted with COSIGN_PASSWORD; cosign.pub)"
    )
    keygen.add_argument("folder", type=Path, help="where to write them (outside the project)")
    keygen.set_defaults(func=cmd_keygen)

    verify = sub.add_parser(
        "verify",
        help="check a published image's signature, SBOM and provenance against this tree",
        description="IMAGE@DIGEST (or IMAGE:TAG) with --key; or MODEL --hardware H, through the record",
    )
    target_args(verify)
    verify.add_argument(
        "--key", type=Path, help="the public key (default for a recorded image: the record's)"
    )
    verify.add_argument("--json", action="store_true", help="one JSON object: each check and the verdict")
    verify.set_defaults(func=cmd_verify)

    verifier = sub.add_parser(
        "build-verifier", help="build the verifier image compose runs before a published image (holds cosign)"
    )
    verifier.add_argument("--base-image", help="build on this image instead of its base (a mirror)")
    verifier.set_defaults(func=cmd_build_verifier)
