"""Signing keys in cosign's own format (an encrypted EC P-256 private key, a PEM public key).

The private key is a file the user names, or the text of an environment variable (a CI secret); its
passphrase is COSIGN_PASSWORD. The factory never reads the key's text: cosign does, from the file or through
`--key env://FACTORY_SIGNING_KEY`, so the key is never on a command line, in a log, an image or the output
tree. A key inside the project folder is refused: one `git add` would publish it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from factory.base.errors import InputError
from factory.trust.cosign import run_cosign

KEY_ENV = "FACTORY_SIGNING_KEY"  # the private key's text (cosign's encrypted PEM), e.g. from a CI secret
PASSWORD_ENV = "COSIGN_PASSWORD"  # its passphrase, which cosign reads itself
KEY_NAME, PUBLIC_NAME = "cosign.key", "cosign.pub"


@dataclass(frozen=True)
class SigningKey:
    """Where cosign reads the private key from: what its --key gets (a path, or env://NAME), and how a
    message names it (never its content)."""

    argument: str
    described: str


def _outside(path: Path, folders: list[Path], what: str) -> None:
    resolved = path.resolve()
    for folder in folders:
        if resolved == folder.resolve() or resolved.is_relative_to(folder.resolve()):
            raise InputError(
                f"{what} is inside the project folder {folder}, where one `git add` publishes it",
                value=str(path),
                hint="keep keys outside the project (e.g. ~/.config/factory/keys)",
            )


def _need_password() -> None:
    if PASSWORD_ENV not in os.environ:
        raise InputError(
            f"{PASSWORD_ENV} is not set: cosign reads the key's passphrase from it (it may be empty)",
            hint=f"export {PASSWORD_ENV}=... (from a secret store; it is never printed)",
        )


def signing_key(path: Path | None, project_folders: list[Path]) -> SigningKey:
    """The key to sign with: the file given, else the text in FACTORY_SIGNING_KEY."""
    _need_password()
    if path is not None:
        if not path.is_file():
            raise InputError("no such key file", field="--key", value=str(path))
        _outside(path, project_folders, "the private key")
        return SigningKey(str(path.resolve()), f"the key file {path}")
    if os.environ.get(KEY_ENV):
        return SigningKey(f"env://{KEY_ENV}", f"the key in {KEY_ENV}")
    raise InputError(
        f"no signing key: give --key FILE, or the key's text in {KEY_ENV}",
        hint="make a pair with `factory keygen --out DIR`; --unsigned publishes without (not recommended)",
    )


def public_key(key: SigningKey) -> str:
    """The public key (PEM) of the signing key, as cosign derives it (which also proves the passphrase)."""
    done = run_cosign(["public-key", "--key", key.argument])
    if not done.ok or "BEGIN PUBLIC KEY" not in done.stdout:
        raise InputError(f"cosign cannot read {key.described}: {done.error}", hint=f"check {PASSWORD_ENV}")
    start = done.stdout.index("-----BEGIN PUBLIC KEY-----")
    return done.stdout[start:].strip() + "\n"


def generate_key_pair(out: Path, project_folders: list[Path]) -> tuple[Path, Path]:
    """cosign.key (encrypted with COSIGN_PASSWORD, readable by its owner only) and cosign.pub in `out`."""
    _need_password()
    _outside(out, project_folders, "the key folder")
    key, public = out / KEY_NAME, out / PUBLIC_NAME
    for existing in (key, public):
        if existing.exists():
            raise InputError("a key is already there; the factory never overwrites one", value=str(existing))
    out.mkdir(parents=True, exist_ok=True)
    done = run_cosign(["generate-key-pair", "--output-key-prefix", str(out / "cosign")])
    if not done.ok or not key.is_file():
        raise InputError(f"cosign could not make the key pair in {out}: {done.error}")
    key.chmod(0o600)
    return key, public
