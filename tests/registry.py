"""A real registry for tests: Debian's docker-registry (distribution 2.8) with htpasswd auth on loopback.

Two kinds: `shared_registry`, one per session for every test that may find in it what others pushed, and
`running_registry`, a test's own, for a test that needs a registry that holds nothing."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests


@dataclass
class LocalRegistry:
    root: Path
    user: str = "factory"
    password: str = field(default="s3cret-registry-pass", repr=False)
    port: int = 0
    process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        if self.process and self.process.poll() is None:
            return  # already serving: a second process could not bind the port and would leak
        binary = shutil.which("docker-registry") or "/usr/bin/docker-registry"
        htpasswd = shutil.which("htpasswd") or "/usr/bin/htpasswd"
        if not self.port:
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                self.port = probe.getsockname()[1]
        hashed = subprocess.run(
            [htpasswd, "-Bbn", self.user, self.password], capture_output=True, text=True, check=True
        ).stdout
        (self.root / "htpasswd").write_text(hashed)
        config = self.root / "config.yml"
        config.write_text(
            "version: 0.1\n"
            f"storage:\n  filesystem:\n    rootdirectory: {self.root / 'data'}\n"
            f"http:\n  addr: {self.address}\n"
            f"auth:\n  htpasswd:\n    realm: factory-tests\n    path: {self.root / 'htpasswd'}\n"
        )
        log = (self.root / "registry.log").open("ab")
        self.process = subprocess.Popen([binary, "serve", str(config)], stdout=log, stderr=log)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if requests.get(f"http://{self.address}/v2/", timeout=2).status_code == 401:
                    return
            except requests.RequestException:
                time.sleep(0.2)
        raise RuntimeError(f"the test registry did not start; see {self.root / 'registry.log'}")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()  # ours: started above, ended by its own handle
            self.process.wait(timeout=30)

    def remove(self) -> None:
        """Stop, and delete the pushed layers (gigabytes) rather than leave them to pytest's temp folders."""
        self.stop()
        shutil.rmtree(self.root / "data", ignore_errors=True)

    def repositories(self) -> list[str]:
        response = requests.get(
            f"http://{self.address}/v2/_catalog", auth=(self.user, self.password), timeout=10
        )
        response.raise_for_status()
        return list(response.json().get("repositories") or [])


@contextlib.contextmanager
def running_registry(folder: Path) -> Iterator[LocalRegistry]:
    """A registry of the test's own on a free loopback port, storing under `folder`; removed after."""
    if not (shutil.which("docker-registry") or Path("/usr/bin/docker-registry").exists()):
        pytest.fail("docker-registry is missing; testbench/up installs it")
    registry = LocalRegistry(folder)
    registry.start()
    try:
        yield registry
    finally:
        registry.remove()


@pytest.fixture(scope="session")
def shared_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRegistry]:
    """One authenticated registry for the whole run, shared by every module that pushes to a registry.
    The tiny CPU image is 6.42 GB: a push to a registry that lacks its layers gzips every one of them
    (minutes on two cores), one to a registry that holds them sends a manifest. Shared, the layers are
    uploaded once per run, whichever test pushes first. A test therefore may find repositories and layers
    other tests pushed: it reads back only the repositories and tags it pushed itself, and a test that
    needs a registry holding nothing (layers that really flow, a repository that must not appear) starts
    its own with `running_registry`."""
    with running_registry(tmp_path_factory.mktemp("shared-registry")) as registry:
        yield registry
