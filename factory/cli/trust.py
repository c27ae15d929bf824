"""The commands of trust: keygen, verify, build-verifier. They parse and print; the package decides."""

from __future__ import annotations

import argparse
import json

from factory.cli.output import say, warn
from factory.project import Project


def cmd_keygen(project: Project, args: argparse.Namespace) -> int:
    from factory.trust.keys import generate_key_pair

    key, public = generate_key_pair(args.folder, [project.root, project.out])
    say(f"private key: {key} (encrypted with COSIGN_PASSWORD; keep it secret, outside the project)")
    say(f"public key:  {public}")
    return 0


def cmd_verify(project: Project, args: argparse.Namespace) -> int:
    from factory.trust.gate import report_lines
    from factory.trust.verify import verify_published, verify_reference

    if is_image_reference(args.model):
        if args.key is None:
            warn("error: verifying an image by reference needs its public key: --key cosign.pub")
            return 2
        verdict = verify_reference(project, args.model, args.key)
    else:
        if not args.hardware:
            warn("error: give IMAGE@DIGEST with --key, or a recipe with --hardware (through the record)")
            return 2
        model = args.model or project.catalog.build_recipe(args.hardware)
        verdict = verify_published(project, model, args.hardware, args.variant, args.kv_store, args.key)
    if args.json:
        checks = [{"check": c.name, "ok": c.ok, "detail": c.detail} for c in verdict.checks]
        say(
            json.dumps(
                {
                    "asked": verdict.asked,
                    "reference": verdict.reference,
                    "verified": verdict.ok,
                    "checks": checks,
                }
            )
        )
    else:
        for line in report_lines(verdict.reference, verdict.checks):
            (say if verdict.ok else warn)(line)
    return 0 if verdict.ok else 1


def cmd_build_verifier(project: Project, args: argparse.Namespace) -> int:
    from factory.base.settings import load_settings
    from factory.builder.builder import summary
    from factory.trust.verifier_build import build_verifier

    settings = load_settings(project.root, {"base_image": args.base_image})
    say(summary(build_verifier(settings, report=say)))
    return 0


def is_image_reference(target: str | None) -> bool:
    """A recipe id never holds ':' or '@'; an image reference to verify does (its tag or digest)."""
    return target is not None and (":" in target or "@" in target)
