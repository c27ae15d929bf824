"""Running cosign: found once, run with an environment of its own, its failures read as one line.

cosign does the cryptography and speaks the registry's signature layout; the factory decides what to sign and
what must hold. Nothing secret is ever on cosign's command line: a private key is a file path, or cosign reads
it from an environment variable (`--key env://NAME`); its passphrase is COSIGN_PASSWORD, which cosign reads
itself; registry credentials go into a Docker config file of the run's own, which go-containerregistry reads.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from factory.base.errors import DockerError
from factory.publish.registry import Credentials
from factory.trust.gate import error_line

# The cosign release this code is written for: testbench/go/cosign pins it, the verifier image checks it.
COSIGN_VERSION = "v3.1.3"
# Signing and attesting with a key, offline: no Sigstore signing config (it would name Fulcio and Rekor), no
# transparency log, and cosign's legacy layout (`sha256-<digest>.sig` and `.att` tags) rather than v3's
# bundles, because the cluster's policy-controller (v0.13.1) verifies a key's signatures only in the
# legacy layout (sigstore/policy-controller#1958).
OFFLINE_KEYED = ("--use-signing-config=false", "--tlog-upload=false", "--new-bundle-format=false")
COSIGN_ENV = "FACTORY_COSIGN"  # where cosign is, when not on PATH


def cosign_binary() -> Path:
    """cosign: FACTORY_COSIGN, else the one on PATH."""
    named = os.environ.get(COSIGN_ENV)
    found = named or shutil.which("cosign")
    if not found or not Path(found).is_file():
        where = f"{COSIGN_ENV}={named} is not a file" if named else "cosign is not on PATH"
        raise DockerError(
            f"{where}\n  hint: install cosign {COSIGN_VERSION} (or build it from its Go module,"
            f" testbench/go/cosign) and put it on PATH or in {COSIGN_ENV}"
        )
    return Path(found)


@dataclass(frozen=True)
class CosignResult:
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def error(self) -> str:
        """cosign's own reason in one line ("no signatures found"), its warnings and banners left out."""
        return error_line(self.stderr)


@contextmanager
def registry_config(registry_host: str | None, credentials: Credentials | None) -> Iterator[dict[str, str]]:
    """The environment that gives cosign the registry's credentials: a Docker config of its own (removed
    after) when the factory has credentials for the host, else the user's own Docker config."""
    if credentials is None or registry_host is None:
        yield {}
        return
    with tempfile.TemporaryDirectory(prefix="factory-cosign-") as folder:
        token = base64.b64encode(f"{credentials.username}:{credentials.password}".encode()).decode()
        config = Path(folder) / "config.json"
        handle = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(handle, "w", encoding="utf-8") as written:
            json.dump({"auths": {registry_host: {"auth": token}}}, written)
        yield {"DOCKER_CONFIG": folder}


def run_cosign(
    arguments: Sequence[str],
    registry_host: str | None = None,
    credentials: Credentials | None = None,
    extra_env: dict[str, str] | None = None,
    timeout_s: float = 300,
) -> CosignResult:
    """One cosign command. Its environment is this process's (COSIGN_PASSWORD and a key named by env:// reach
    it there) plus the registry's credentials; what it prints is returned, never logged here."""
    binary = cosign_binary()
    with registry_config(registry_host, credentials) as registry_env:
        env = {**os.environ, **registry_env, **(extra_env or {})}
        try:
            done = subprocess.run(
                [str(binary), *arguments],
                capture_output=True,
                text=True,
                env=env,
                timeout=timeout_s,
                check=False,
                stdin=subprocess.DEVNULL,  # never a prompt: a missing passphrase fails instead of waiting
            )
        except subprocess.TimeoutExpired:
            return CosignResult(124, "", f"Error: cosign {arguments[0]} did not finish in {timeout_s:.0f} s")
    return CosignResult(done.returncode, done.stdout, done.stderr)
