"""The public keys a cluster trusts the published images by: one PEM file per key, `<name>.pub`, in a folder
beside the publish record (recipes/lock/trusted-keys/, or the output folder's lock/trusted-keys/).

Committed with the project, like the record, so `factory generate --check` reads the same keys on every
machine. Rotating a key is a change of files: add the new key's file, publish with the new key, then delete
the old key's file; `factory generate` prints the admission policy from whatever is there. Only public keys
belong here: a private key, or anything that is not exactly one PEM public key, is an error that names the
file and never quotes its content (it would be printed into k8s/_verify/).
"""

from __future__ import annotations

import base64
import binascii
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

from factory.base.errors import InputError

FOLDER_NAME = "trusted-keys"
SUFFIX = ".pub"
# A key's name becomes the name of a policy's authority: a DNS label, as Kubernetes names are.
NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
_PEM = re.compile(r"-----BEGIN PUBLIC KEY-----\s*\n([A-Za-z0-9+/=\s]+?)-----END PUBLIC KEY-----\s*")
_ANY_PEM = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----")
MAX_BYTES = 16 * 1024  # an RSA-4096 public key is under 1 kB in PEM


@dataclass(frozen=True)
class TrustedKey:
    name: str  # the file's name without .pub
    pem: str  # the key as a PEM block, re-encoded here from its DER bytes: nothing else from the file


def keys_folder(lock_path: Path) -> Path:
    """Beside the lock and the publish record."""
    return lock_path.parent / FOLDER_NAME


def read_trusted_keys(folder: Path) -> list[TrustedKey]:
    """Every `<name>.pub` in the folder, by name; none when the folder does not exist."""
    if not folder.is_dir():
        return []
    keys = []
    for path in sorted(folder.iterdir()):
        if path.name.startswith("."):
            continue
        if path.suffix != SUFFIX or not path.is_file():
            raise InputError(
                "only public keys named <name>.pub belong here",
                file=path,
                hint="a private key must never be in the project: keep it where `cosign sign` reads it",
            )
        name = path.stem
        if not NAME.fullmatch(name):
            raise InputError(
                "a key's name must be a DNS label (lower-case letters, digits, '-'; at most 63)",
                file=path,
                value=name,
            )
        keys.append(TrustedKey(name, _public_key(path)))
    return keys


def _public_key(path: Path) -> str:
    with path.open("rb") as file:
        data = file.read(MAX_BYTES + 1)
    text = data.decode("ascii", errors="replace")
    kinds = _ANY_PEM.findall(text)
    if len(data) > MAX_BYTES or kinds != ["PUBLIC KEY"]:
        found = "a private key" if any("PRIVATE" in kind for kind in kinds) else "not one PEM public key"
        raise InputError(
            f"{found}: a trusted key is one PEM block, -----BEGIN PUBLIC KEY----- (cosign.pub)",
            file=path,
            hint="its content is not shown; `cosign public-key --key cosign.key` prints the public key",
        )
    match = _PEM.search(text)
    try:
        der = base64.b64decode("".join(match.group(1).split()) if match else "", validate=True)
    except binascii.Error:
        der = b""
    if not der.startswith(b"\x30"):  # a DER SubjectPublicKeyInfo is a SEQUENCE
        raise InputError("the PEM block does not hold a DER public key", file=path)
    body = "\n".join(textwrap.wrap(base64.b64encode(der).decode(), 64))
    return f"-----BEGIN PUBLIC KEY-----\n{body}\n-----END PUBLIC KEY-----\n"
