"""What validation checks inside the running container and at its /metrics, beside the API: the server runs
as the image's non-root user, its root filesystem is read-only where its run spec says so (every folder the
spec lists writable, nothing else), and the metric series the autoscaler and the endpoint picker read are
served under the names the catalog gives them (read from the server, never assumed)."""

from __future__ import annotations

import re
import shlex

import requests

from factory.plan.runspec import RunSpec
from factory.validate.container import Started
from factory.validate.probes import ProbeFailure

PROBE_FILE = ".factory-validate-write"


def _inside(started: Started, *command: str) -> tuple[int, str]:
    """Runs a command in the container as its own user; (exit code, output)."""
    code, output = started.container.get_wrapped_container().exec_run(list(command), demux=False)
    text = output.decode(errors="replace") if isinstance(output, bytes) else ""
    return (code if code is not None else -1), text.strip()


def server_ids(started: Started) -> tuple[int, int]:
    """The real uid and gid of the container's first process (the server its entrypoint started)."""
    code, status = _inside(started, "cat", "/proc/1/status")
    if code != 0:
        raise ProbeFailure(f"could not read /proc/1/status in {started.name}: {status[:200]}")
    found = {m[1]: int(m[2]) for m in re.finditer(r"^(Uid|Gid):\s+(\d+)", status, re.MULTILINE)}
    return found["Uid"], found["Gid"]


def check_user(started: Started, spec: RunSpec) -> str:
    uid, gid = server_ids(started)
    if uid == 0:
        raise ProbeFailure(f"the server in {started.name} runs as root (uid 0)")
    if (uid, gid) != (spec.user.uid, spec.user.gid):
        raise ProbeFailure(f"the server runs as {uid}:{gid}, the image's user is {spec.user.ids}")
    return f"the server (pid 1) runs as {uid}:{gid}, the image's user {spec.user.name}"


def _writes(started: Started, folder: str) -> tuple[bool, str]:
    """Whether the container's user may create a file in `folder` (removed again)."""
    path = f"{folder.rstrip('/')}/{PROBE_FILE}"
    script = f"touch {shlex.quote(path)} && rm -f {shlex.quote(path)}"
    code, output = _inside(started, "sh", "-c", script)
    return code == 0, output


def check_read_only(started: Started, spec: RunSpec) -> str:
    """The root filesystem refuses a write (in the image's own folders and at /), each writable folder of the
    spec (and each volume) takes one."""
    if not spec.read_only_root:
        return "the spec leaves the root filesystem writable"
    refused = []
    for folder in ("/", "/usr/local/bin", "/opt"):
        wrote, output = _writes(started, folder)
        if wrote:
            raise ProbeFailure(f"{folder} took a write in {started.name}: the root filesystem is writable")
        if "Read-only file system" not in output:
            raise ProbeFailure(f"a write to {folder} failed, but not as read-only: {output[:200]}")
        refused.append(folder)
    writable = [folder.target for folder in spec.writable] + [volume.target for volume in spec.volumes]
    for folder in writable:
        wrote, output = _writes(started, folder)
        if not wrote:
            raise ProbeFailure(f"{folder}, which the spec makes writable, refused a write: {output[:200]}")
    return f"read-only at {', '.join(refused)}; writable: {', '.join(writable)}"


def check_series(base_url: str, series: tuple[str, ...], path: str) -> str:
    """Every series name in `series` is served at /metrics (a sample of it, any labels)."""
    response = requests.get(f"{base_url}{path}", timeout=30)
    if response.status_code != 200:
        raise ProbeFailure(f"{path} answered HTTP {response.status_code}")
    served = {
        line.split("{", 1)[0].split(" ", 1)[0]
        for line in response.text.splitlines()
        if line and not line.startswith("#")
    }
    missing = [name for name in series if name not in served]
    if missing:
        near = sorted(name for name in served if name.startswith("vllm:"))
        raise ProbeFailure(f"{path} serves no {', '.join(missing)}; its vllm series: {', '.join(near[:40])}")
    return f"{path} serves {', '.join(series)}"
