"""The registry side: credentials (never logged) and the manifest digest read back over the HTTP API."""

from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass, field

import requests
from docker import auth

from factory.base.errors import DockerError

MANIFEST_TYPES = ", ".join(
    [
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.oci.image.index.v1+json",
    ]
)


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str = field(repr=False)  # never printed, not even by a debugger's repr

    def as_auth_config(self) -> dict[str, str]:
        return {"username": self.username, "password": self.password}


def credentials_for(registry: str) -> Credentials | None:
    """FACTORY_REGISTRY_USER/FACTORY_REGISTRY_PASSWORD, else Docker's own config (docker login)."""
    user, password = os.environ.get("FACTORY_REGISTRY_USER"), os.environ.get("FACTORY_REGISTRY_PASSWORD")
    if user and password:
        return Credentials(user, password)
    found = auth.resolve_authconfig(auth.load_config(), registry)
    if found and found.get("Username") and found.get("Password"):
        return Credentials(str(found["Username"]), str(found["Password"]))
    return None


def api_base(registry: str) -> str:
    """Plain HTTP only for a registry on loopback (as the engine itself allows); HTTPS otherwise."""
    host = registry.rsplit(":", 1)[0] if registry.count(":") == 1 else registry
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    return f"{'http' if loopback else 'https'}://{registry}"


def split_registry(registry: str) -> tuple[str, str]:
    """ghcr.io/acme -> ("ghcr.io", "acme"): the host the API lives on, and a namespace for repositories."""
    host, _, namespace = registry.partition("/")
    return host, namespace.strip("/")


def registry_request(
    method: str,
    registry: str,
    path: str,
    credentials: Credentials | None,
    headers: dict[str, str] | None = None,
    data: bytes | None = None,
) -> requests.Response:
    """One registry API call on /v2/<namespace>/<path>: basic auth, or the bearer-token exchange that
    ghcr.io and Docker Hub answer 401 with. Network errors become DockerError."""
    host, namespace = split_registry(registry)
    url = f"{api_base(host)}/v2/{namespace + '/' if namespace else ''}{path}"
    login = (credentials.username, credentials.password) if credentials else None
    sent = dict(headers or {})
    try:
        response = requests.request(method, url, headers=sent, data=data, auth=login, timeout=60)
        challenge = response.headers.get("WWW-Authenticate", "")
        if response.status_code == 401 and challenge.lower().startswith("bearer "):
            sent["Authorization"] = f"Bearer {_bearer_token(challenge, login)}"
            response = requests.request(method, url, headers=sent, data=data, timeout=60)
    except requests.RequestException as exc:
        raise DockerError(f"the registry {host} could not be reached for {path}: {exc}") from None
    if response.status_code in (401, 403):
        raise DockerError(f"the registry {host} refused the credentials (HTTP {response.status_code})")
    return response


def manifest_digest(registry: str, repository: str, tag: str, credentials: Credentials | None) -> str | None:
    """The digest the registry serves for repository:tag (repository without the namespace), or None
    when it has no such tag."""
    response = registry_request(
        "HEAD", registry, f"{repository}/manifests/{tag}", credentials, {"Accept": MANIFEST_TYPES}
    )
    if response.status_code == 404:
        return None
    if response.status_code != 200:
        raise DockerError(f"the registry answered HTTP {response.status_code} for {repository}:{tag}")
    digest = response.headers.get("Docker-Content-Digest")
    return str(digest) if digest else None


def _bearer_token(challenge: str, login: tuple[str, str] | None) -> str:
    fields = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
    realm = fields.pop("realm", "")
    response = requests.get(realm, params=fields, auth=login, timeout=30)
    if response.status_code != 200:
        raise DockerError(
            f"the registry's token service refused the credentials (HTTP {response.status_code})"
        )
    body = response.json()
    return str(body.get("token") or body.get("access_token") or "")
