"""The build's network (the `network` build setting): read from .factory.local.toml, FACTORY_BUILD_NETWORK or
`--build-network`, a misspelt value named where it was read, written by each BuildKit front end in its own
words, and refused where a front end cannot give it.

A real Compose build (the path that runs here) shows what each value gives a RUN step: a server on the
build host's 127.0.0.1 is reached on the host network and not on the default one; the whole image on the
host network is tests/test_local_index.py. The buildx plugin cannot be installed on this machine, so the
bake file and command are checked as written (their words are buildx's own, docs/bake-reference.md) and
buildx's releases are given, not run."""

from __future__ import annotations

import contextlib
import json
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import docker
import pytest
import yaml
from docker.errors import ImageNotFound
from packaging.version import Version

from factory.base.errors import DockerError, InputError
from factory.base.settings import Network, load_settings
from factory.builder.backends import build_command, buildx_release, has_buildx, run_build
from factory.builder.builder import choose_backend
from factory.builder.context import StagedContext
from factory.builder.network import check_backend
from factory.cli.images import _build_flags
from factory.cli.parser import build_parser
from factory.project import Project
from tests.conftest import ROOT, TINY, blueprint_of, run_factory


def settings_file(root: Path, network: str) -> Path:
    path = root / ".factory.local.toml"
    path.write_text(f'[build]\nnetwork = "{network}"\n', encoding="utf-8")
    return path


def test_the_network_is_read_from_the_file_then_the_environment_then_the_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FACTORY_BUILD_NETWORK", raising=False)
    assert load_settings(tmp_path).network == "default"
    settings_file(tmp_path, "host")
    assert load_settings(tmp_path).network == "host"
    monkeypatch.setenv("FACTORY_BUILD_NETWORK", "default")
    assert load_settings(tmp_path).network == "default"
    flags = _build_flags(build_parser().parse_args(["build", "--hardware", "cpu", "--build-network", "host"]))
    assert load_settings(tmp_path, flags).network == "host"
    unset = _build_flags(build_parser().parse_args(["build", "vllm-router"]))
    assert load_settings(tmp_path, unset).network == "default", "no flag: the environment's value stays"


def test_a_misspelt_network_is_named_where_it_was_read_with_the_valid_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FACTORY_BUILD_NETWORK", raising=False)
    path = settings_file(tmp_path, "hots")
    with pytest.raises(InputError) as in_file:
        load_settings(tmp_path)
    said = str(in_file.value)
    assert f"{path}: build.network" in said and "got: 'hots'" in said
    assert "did you mean: 'host'?" in said and "valid: default, host" in said
    settings_file(tmp_path, "host")
    monkeypatch.setenv("FACTORY_BUILD_NETWORK", "bridge")
    with pytest.raises(InputError, match="FACTORY_BUILD_NETWORK") as in_environment:
        load_settings(tmp_path)
    assert str(path) not in str(in_environment.value) and "valid: default, host" in str(in_environment.value)
    flag = run_factory(ROOT, "build", "--hardware", "cpu", "--build-network", "bridge")
    assert flag.returncode == 2 and "--build-network: invalid choice: 'bridge'" in flag.stderr


def staged(project: Project, tmp_path: Path, network: str) -> StagedContext:
    image = blueprint_of(project, TINY, "cpu").image
    (tmp_path / image.tag).mkdir(exist_ok=True)
    return StagedContext(image, tmp_path / image.tag, {}, {}, "factory-local/debian:bookworm", network)  # type: ignore[arg-type]


def test_every_backend_writes_the_host_network_and_none_writes_the_default(
    project: Project, tmp_path: Path
) -> None:
    host = staged(project, tmp_path, "host")
    compose = build_command(host, "factory-test/network:1", "compose")
    spec = yaml.safe_load(Path(compose[compose.index("-f") + 1]).read_text(encoding="utf-8"))
    assert spec["services"]["image"]["build"]["network"] == "host"
    bake = build_command(host, "factory-test/network:1", "bake", no_cache=True)
    target = json.loads(Path(bake[bake.index("-f") + 1]).read_text(encoding="utf-8"))["target"]["image"]
    assert target["network"] == "host" and target["entitlements"] == ["network.host"]
    assert bake[bake.index("--allow") + 1] == "network.host", "bake grants it only on its command line"

    default = staged(project, tmp_path, "default")
    compose = build_command(default, "factory-test/network:1", "compose")
    spec = yaml.safe_load(Path(compose[compose.index("-f") + 1]).read_text(encoding="utf-8"))
    assert "network" not in spec["services"]["image"]["build"]
    bake = build_command(default, "factory-test/network:1", "bake")
    target = json.loads(Path(bake[bake.index("-f") + 1]).read_text(encoding="utf-8"))["target"]["image"]
    assert "network" not in target and "entitlements" not in target and "--allow" not in bake


def test_a_backend_that_cannot_give_the_host_network_is_refused_naming_the_setting_and_the_backend(
    project: Project,
) -> None:
    with pytest.raises(DockerError, match=r"setting network .* the bake backend grants from buildx 0\.17\.0"):
        check_backend("host", "bake", buildx_release("github.com/docker/buildx v0.16.2 2f0b8e7"))
    check_backend("host", "bake", buildx_release("github.com/docker/buildx v0.17.1 8c2d0b3"))
    # Compose hands builds to bake wherever buildx is installed, without bake's --allow network.host.
    with pytest.raises(DockerError, match=r"setting network .* the compose backend cannot give"):
        check_backend("host", "compose", Version("0.30.1"))
    check_backend("host", "compose", None)
    check_backend("default", "bake", Version("0.8.0"))
    tiny = blueprint_of(project, TINY, "cpu").image
    if not has_buildx():  # this machine: Compose reaches the daemon's BuildKit itself, and gives it
        assert choose_backend("auto", tiny, "linux/amd64", "host") == "compose"


@dataclass(frozen=True)
class Probe:
    """A build target of one RUN step (what a build needs to know of its image)."""

    tag: str
    reference: str
    platform: str = "linux/amd64"
    immutable_reference: str = ""
    inputs_hash: str = ""


@pytest.fixture
def loopback_server(tmp_path: Path) -> Iterator[int]:
    """An HTTP server on the build host's 127.0.0.1 only, serving one file; its port."""
    (tmp_path / "served").mkdir()
    (tmp_path / "served" / "hello.txt").write_text("from the build host\n", encoding="utf-8")

    class Quiet(SimpleHTTPRequestHandler):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, directory=str(tmp_path / "served"), **kwargs)  # type: ignore[arg-type]

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()


@pytest.mark.docker
def test_on_the_host_network_a_run_step_reaches_the_build_hosts_loopback_and_on_the_default_it_does_not(
    loopback_server: int, tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    def build(network: Network) -> str:
        folder = tmp_path / network / "probe"
        folder.mkdir(parents=True)
        (folder / "Dockerfile").write_text(
            "FROM factory-local/debian:bookworm\n"  # testbench/up bootstraps it
            f"RUN curl -fsS http://127.0.0.1:{loopback_server}/hello.txt > /hello.txt\n",
            encoding="utf-8",
        )
        tag = f"factory-test/build-network:{uuid.uuid4().hex[:12]}"
        staged = StagedContext(Probe("probe", tag), folder, {}, {}, "factory-local/debian:bookworm", network)
        try:
            run_build(staged, tag, "compose", echo=False, no_cache=True)
            labels = {"ai.vllm.factory.test": "build-network"}
            return docker_client.containers.run(
                tag, ["cat", "/hello.txt"], remove=True, labels=labels
            ).decode()
        finally:
            with contextlib.suppress(ImageNotFound):
                docker_client.images.remove(tag)

    assert build("host") == "from the build host\n"
    with pytest.raises(DockerError, match=r"Failed to connect to 127\.0\.0\.1"):
        build("default")
