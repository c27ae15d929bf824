"""Containers the factory starts carry labels that name the process that started them, so a run that was
killed outright (SIGKILL, a lost machine) leaves nothing the next run cannot find: every command that
starts containers first removes those whose process is gone, and says what it removed. SIGTERM and SIGHUP
(a cancelled CI job, a closed terminal) unwind like Ctrl-C, so `finally` blocks remove what they started."""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Callable

import docker
from docker.errors import APIError, DockerException, NotFound

from factory.engine.connect import OWNER_LABEL

PID_LABEL = "ai.vllm.factory.pid"
HOST_LABEL = "ai.vllm.factory.host"


def labels(purpose: str, **extra: str) -> dict[str, str]:
    """The labels of a container this process starts: who made it, and for what."""
    return {OWNER_LABEL: purpose, PID_LABEL: str(os.getpid()), HOST_LABEL: socket.gethostname(), **extra}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_labelled(wanted: dict[str, str]) -> None:
    """Remove the factory's containers that carry all of these labels (best effort: used in `finally`)."""
    with contextlib.suppress(DockerException):
        required = [f"{name}={value}" for name, value in wanted.items()]
        _remove_where(docker.from_env(), required, lambda found: True)


def sweep(client: docker.DockerClient) -> list[str]:
    """Remove the factory's containers whose starting process on this host is gone; their names."""
    here = socket.gethostname()

    def orphaned(found: dict[str, str]) -> bool:
        pid = found.get(PID_LABEL, "")
        return found.get(HOST_LABEL) == here and pid.isdigit() and not _alive(int(pid))

    return _remove_where(client, [PID_LABEL], orphaned)


def _remove_where(
    client: docker.DockerClient, required: list[str], chosen: Callable[[dict[str, str]], bool]
) -> list[str]:
    """Remove the factory's containers that carry the `required` labels and whose labels `chosen`
    accepts; the names of those removed."""
    removed = []
    filters: dict[str, str | list[str] | bool] = {"label": [OWNER_LABEL, *required]}
    for container in client.containers.list(all=True, filters=filters, ignore_removed=True):
        if not chosen(container.labels):
            continue
        with contextlib.suppress(NotFound, APIError):
            container.remove(force=True)
            removed.append(str(container.name))
    return removed
