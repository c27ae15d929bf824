"""Push with the Docker SDK, reading every chunk of the stream: docker-py's push does not raise when
the push fails, it reports the failure inside the stream (docker-py issues 3161, 2226)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import docker
from docker.errors import APIError

from factory.base.errors import DockerError
from factory.base.reporter import Reporter, silent
from factory.publish.registry import Credentials

# Failures worth another try: the network or the registry hiccuped. Others (auth, not found) are final.
TRANSIENT = (
    "connection refused",
    "connection reset",
    "broken pipe",
    "eof",
    "timeout",
    "i/o timeout",
    "503",
    "502",
    "500",
    "504",
    "service unavailable",
    "bad gateway",
    "no such host",
    "toomanyrequests",
)
FINAL = ("unauthorized", "authentication required", "denied", "forbidden", "incorrect username or password")


class PushFailed(DockerError):
    def __init__(self, message: str, transient: bool) -> None:
        super().__init__(message)
        self.transient = transient


@dataclass(frozen=True)
class Pushed:
    reference: str
    digest: str
    attempts: int


def read_push_stream(
    chunks: Iterable[dict[str, Any]], reference: str, on_chunk: Callable[[dict[str, Any]], None]
) -> str:
    """The digest the engine reports for the pushed manifest; PushFailed on any error in the stream."""
    digest = None
    for chunk in chunks:
        on_chunk(chunk)
        error = chunk.get("errorDetail", {}).get("message") or chunk.get("error")
        if error:
            lowered = str(error).lower()
            transient = any(word in lowered for word in TRANSIENT) and not any(w in lowered for w in FINAL)
            raise PushFailed(f"pushing {reference} failed: {error}", transient)
        aux = chunk.get("aux") or {}
        if aux.get("Digest"):
            digest = str(aux["Digest"])
    if digest is None:
        raise PushFailed(f"pushing {reference} ended without a digest from the engine", transient=True)
    return digest


def push(
    client: docker.DockerClient,
    repository: str,
    tag: str,
    credentials: Credentials | None,
    attempts: int = 4,
    backoff_s: float = 1.0,
    on_chunk: Callable[[dict[str, Any]], None] = lambda chunk: None,
    report: Reporter = silent,
) -> Pushed:
    reference = f"{repository}:{tag}"
    for attempt in range(1, attempts + 1):
        try:
            stream = client.api.push(
                repository,
                tag=tag,
                stream=True,
                decode=True,
                auth_config=credentials.as_auth_config() if credentials else None,
            )
            return Pushed(reference, read_push_stream(stream, reference, on_chunk), attempt)
        except APIError as exc:
            failure = PushFailed(f"pushing {reference} failed: {exc.explanation or exc}", transient=True)
        except PushFailed as exc:
            failure = exc
        if not failure.transient or attempt == attempts:
            raise PushFailed(
                f"{failure} (after {attempt} attempt{'s' if attempt > 1 else ''})", failure.transient
            )
        wait = backoff_s * 2 ** (attempt - 1)
        report(f"push of {reference} failed (attempt {attempt}/{attempts}), retrying in {wait:.0f} s")
        time.sleep(wait)
    raise AssertionError("unreachable")
