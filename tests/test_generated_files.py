"""Every generated Dockerfile passes hadolint; every compose file passes the real `docker compose config`
with nothing but the values its own .env.example asks for."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from factory.base.tools import compose_binary, hadolint_binary
from tests.conftest import ROOT

DOCKERFILES = sorted(ROOT.glob("images/**/Dockerfile"))
COMPOSE_FILES = sorted(ROOT.glob("compose/**/*compose.yaml"))
# What a user types into .env for the settings that have no default.
SAMPLE_VALUES = {"HEAD_IP": "10.0.0.1", "IFACE_NAME": "eth0", "RENDER_GID": "109"}
# Rules hadolint is told to skip, and why (the Dockerfiles also say so where they apply):
# DL3008 apt versions unpinned: the base image's distribution pins them; DL3042 pip cache: a BuildKit
# cache mount holds it, never a layer.
HADOLINT_IGNORED_INLINE = {"DL3008", "DL3042"}


def tool(name: str) -> str:
    return str(compose_binary() if name == "docker-compose" else hadolint_binary())


def env_example(compose_file: Path) -> dict[str, str]:
    """The .env a user writes from .env.example: its defaults, and a sample for each empty value."""
    example = compose_file.parent / ".env.example"
    if not example.is_file():
        return {}
    pairs = [
        line.split("=", 1) for line in example.read_text().splitlines() if line and not line.startswith("#")
    ]
    return {name: value or SAMPLE_VALUES.get(name, "sample") for name, value in pairs}


def compose_config(compose_file: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [tool("docker-compose"), "-f", str(compose_file), "config", "--format", "json"],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": "/usr/bin:/bin", **env},
    )


def test_there_is_something_to_check() -> None:
    assert len(DOCKERFILES) >= 9 and len(COMPOSE_FILES) >= 60


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: str(p.parent.relative_to(ROOT)))
def test_hadolint(dockerfile: Path) -> None:
    result = subprocess.run(
        [tool("hadolint"), "--format", "json", str(dockerfile)], capture_output=True, text=True, check=False
    )
    # hadolint exits 0 only when it read the file and found nothing: a crash prints no findings at all.
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads(result.stdout) == [], result.stdout
    ignores = {
        line.split("=", 1)[1] for line in dockerfile.read_text().splitlines() if "hadolint ignore=" in line
    }
    assert ignores <= HADOLINT_IGNORED_INLINE


@pytest.mark.parametrize("compose_file", COMPOSE_FILES, ids=lambda p: str(p.relative_to(ROOT / "compose")))
def test_docker_compose_config(compose_file: Path) -> None:
    result = compose_config(compose_file, env_example(compose_file))
    assert result.returncode == 0, f"{result.stderr} (is every required variable in .env.example?)"
    service = next(iter(json.loads(result.stdout)["services"].values()))
    raw = next(iter(yaml.safe_load(compose_file.read_text())["services"].values()))
    if "vllm" not in json.loads(result.stdout)["services"]:
        return  # the PD router: checked by the config call alone
    # /dev/shm as a size (what every format, Kubernetes too, can say); the image's non-root user on a
    # read-only root, no capability (one added for a non-root user is not effective); locked memory for
    # RDMA through the memlock limit on GPU servers
    assert "ipc" not in service and int(service["shm_size"]) > 64 * 1024**2
    assert "cap_add" not in service and service["user"] == "10001:10001" and service["read_only"] is True
    assert {mount.split(":", 1)[0] for mount in service["tmpfs"]} >= {"/home/vllm", "/tmp"}
    if "network_mode" not in service:
        assert service["ports"][0]["host_ip"] == "127.0.0.1", "the API is published on loopback by default"
    assert "auto" not in service["command"]
    if "--headless" in service["command"]:
        assert service["healthcheck"]["disable"] is True, "a headless rank must not inherit the image's check"
    else:
        assert service["healthcheck"]["test"][-1].endswith("/health")
    hardware = compose_file.relative_to(ROOT / "compose").parts[1].split("-")[0]
    memlock = service["ulimits"].get("memlock")
    assert memlock == (None if hardware == "cpu" else -1), "RDMA's locked memory on GPU servers only"
    if hardware.startswith("mi"):
        assert {d["source"] for d in service["devices"]} == {"/dev/kfd", "/dev/dri"}
        assert "video" in service["group_add"] and "109" in service["group_add"]
        assert "seccomp=unconfined" in service["security_opt"]
    elif hardware != "cpu":
        devices = service["deploy"]["resources"]["reservations"]["devices"]
        assert devices[0]["driver"] == "nvidia" and devices[0]["capabilities"] == ["gpu"]
    assert raw["environment"]["HF_TOKEN"] == "${HF_TOKEN:-}", "the token comes from the shell, never the file"


def test_missing_head_address_fails_with_a_message() -> None:
    head = next(p for p in COMPOSE_FILES if p.name == "head.compose.yaml")
    env = {k: v for k, v in env_example(head).items() if k != "HEAD_IP"}
    result = compose_config(head, env)
    assert result.returncode != 0
    assert "set HEAD_IP" in result.stderr
