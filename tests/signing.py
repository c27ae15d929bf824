"""Images to admit and to refuse, for the admission tests: small OCI images pushed straight to a registry of
the test's own, signed and attested with the real cosign (from testbench/go/cosign) in its legacy layout
(`sha256-<digest>.sig` and `.att` tags) with keys made for the test, and a provenance changed after it was
signed, as someone with write access to the registry could change it.

Until `factory publish` signs (issue 45), the tests sign as it will: `cosign sign` and `cosign attest --type
slsaprovenance1` by digest, offline (no transparency log, no signing config), the passphrase in
COSIGN_PASSWORD and the registry's credentials in a Docker config file, never in an argument."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import secrets
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from tests.registry import LocalRegistry

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OFFLINE = ("--use-signing-config=false", "--tlog-upload=false", "--new-bundle-format=false", "-y")


def provenance(inputs_hash: str | None) -> dict[str, Any]:
    """An SLSA provenance v1 predicate as `factory publish` is to write it: the inputs hash under
    buildDefinition.internalParameters.inputsHash (the field the admission policy checks)."""
    internal = {"inputsHash": inputs_hash} if inputs_hash is not None else {}
    return {
        "buildDefinition": {
            "buildType": "https://vllm-factory.dev/image-build/v1",
            "externalParameters": {"recipe": "recipes/models/factory/tiny-random-llama.yaml"},
            "internalParameters": internal,
        },
        "runDetails": {"builder": {"id": "https://vllm-factory.dev/tests"}},
    }


class Registry:
    """The registry's HTTP API, as the test's tamperer and pusher speak it."""

    def __init__(self, registry: LocalRegistry) -> None:
        self.address = registry.address
        self.auth = (registry.user, registry.password)

    def _url(self, repository: str, path: str) -> str:
        return f"http://{self.address}/v2/{repository}/{path}"

    def blob(self, repository: str, data: bytes) -> dict[str, Any]:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        started = requests.post(self._url(repository, "blobs/uploads/"), auth=self.auth, timeout=30)
        started.raise_for_status()
        location = started.headers["Location"]
        if location.startswith("/"):
            location = f"http://{self.address}{location}"
        put = requests.put(location, params={"digest": digest}, data=data, auth=self.auth, timeout=30)
        put.raise_for_status()
        return {"digest": digest, "size": len(data)}

    def read_blob(self, repository: str, digest: str) -> bytes:
        got = requests.get(self._url(repository, f"blobs/{digest}"), auth=self.auth, timeout=30)
        got.raise_for_status()
        return got.content

    def manifest(self, repository: str, reference: str) -> dict[str, Any]:
        url, headers = self._url(repository, f"manifests/{reference}"), {"Accept": OCI_MANIFEST}
        got = requests.get(url, headers=headers, auth=self.auth, timeout=30)
        got.raise_for_status()
        return dict(got.json())

    def put_manifest(self, repository: str, tag: str, manifest: dict[str, Any]) -> str:
        body = json.dumps(manifest).encode()
        put = requests.put(
            self._url(repository, f"manifests/{tag}"), data=body, auth=self.auth,
            headers={"Content-Type": manifest["mediaType"]}, timeout=30,
        )  # fmt: skip
        put.raise_for_status()
        return "sha256:" + hashlib.sha256(body).hexdigest()

    def push_image(self, repository: str, tag: str) -> str:
        """A one-layer image (one file, a random line: each one pushed is new) as `tag`; its digest."""

        payload = f"vllm-factory admission test {secrets.token_hex(8)}\n".encode()
        tar = io.BytesIO()
        with tarfile.open(fileobj=tar, mode="w") as archive:
            info = tarfile.TarInfo("hello")
            info.size = len(payload)
            archive.addfile(info, io.BytesIO(payload))
        layer = self.blob(repository, tar.getvalue())
        config = {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Cmd": ["/hello"]},
            "rootfs": {"type": "layers", "diff_ids": [layer["digest"]]},
        }
        manifest = {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                **self.blob(repository, json.dumps(config).encode()),
            },
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", **layer}],
        }
        return self.put_manifest(repository, tag, manifest)

    def tamper_provenance(self, repository: str, digest: str, inputs_hash: str) -> None:
        """Rewrites the signed provenance attached to `digest` (its `.att` tag) to name another inputs hash,
        keeping the signature that was made over the original."""
        tag = digest.replace(":", "-") + ".att"
        manifest = self.manifest(repository, tag)
        layer = manifest["layers"][0]
        envelope = json.loads(self.read_blob(repository, layer["digest"]))
        statement = json.loads(base64.b64decode(envelope["payload"]))
        statement["predicate"]["buildDefinition"]["internalParameters"]["inputsHash"] = inputs_hash
        envelope["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
        layer.update(self.blob(repository, json.dumps(envelope).encode()))
        config = json.loads(self.read_blob(repository, manifest["config"]["digest"]))
        config["rootfs"]["diff_ids"] = [layer["digest"]]
        manifest["config"].update(self.blob(repository, json.dumps(config).encode()))
        self.put_manifest(repository, tag, manifest)


@dataclass(frozen=True)
class Key:
    private: Path
    public: Path


@dataclass(frozen=True)
class Cosign:
    """The cosign binary with a home of its own: its caches, and the registry's credentials in a Docker
    config file (go-containerregistry's default keychain reads DOCKER_CONFIG)."""

    binary: Path
    home: Path
    registry: LocalRegistry
    password: str = "admission-test-passphrase"

    def _env(self) -> dict[str, str]:
        config = self.home / "docker"
        if not (config / "config.json").exists():
            config.mkdir(parents=True, exist_ok=True)
            login = base64.b64encode(f"{self.registry.user}:{self.registry.password}".encode()).decode()
            auths = {"auths": {self.registry.address: {"auth": login}}}
            (config / "config.json").write_text(json.dumps(auths))
        return {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(self.home),
            "DOCKER_CONFIG": str(config),
            "COSIGN_PASSWORD": self.password,
        }

    def run(self, *args: str, cwd: Path | None = None) -> str:
        done = subprocess.run(
            [str(self.binary), *args], cwd=cwd, env=self._env(), capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, f"cosign {args[0]}: {done.stderr[-2000:]}"
        return done.stdout

    def key_pair(self, name: str) -> Key:
        folder = self.home / "keys" / name
        folder.mkdir(parents=True)
        self.run("generate-key-pair", cwd=folder)
        return Key(folder / "cosign.key", folder / "cosign.pub")

    def sign(self, key: Key, image: str) -> None:
        self.run("sign", "--key", str(key.private), *OFFLINE, image)

    def attest(self, key: Key, image: str, predicate: dict[str, Any]) -> None:
        path = self.home / f"predicate-{secrets.token_hex(4)}.json"
        path.write_text(json.dumps(predicate))
        self.run("attest", "--key", str(key.private), "--type", "slsaprovenance1", "--predicate", str(path),
                 *OFFLINE, image)  # fmt: skip
