"""KV-store images and files: the Mooncake layer locked against the vLLM set, the image sharing every layer of
the plain image below it, the launcher that fills a process's config from its settings, and the compose files
of both topologies (one per process, in their start order, settings never edited into them)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import docker
import pytest
import yaml

from factory.base.tools import compose_binary
from factory.lockfile.model import canonical_name, requirement_blocks
from factory.lockfile.store import set_text
from factory.project import Project
from factory.render import compose
from tests.conftest import ROOT, TINY, kv_blueprint

FILL = ROOT / "factory" / "image_files" / "factory-fill-config"


def test_the_mooncake_layer_holds_only_what_the_vllm_set_lacks(project: Project) -> None:
    """Resolved against the vLLM set's pins: the wheel and msgpack; aiohttp and requests, which both need,
    stay in the vLLM set at its versions (so every layer below Mooncake's is the plain image's)."""
    assert project.lock is not None and project.lock.mooncake
    # The vendor images' layers are resolved on their own (tests/test_kv_vendor_layer.py).
    for layer in (layer for layer in project.lock.mooncake.values() if not layer.vendor_image):
        assert layer.requirements and layer.version, layer
        mine = {
            canonical_name(name)
            for name, _ in requirement_blocks(set_text(project.lock_path, layer.requirements))
        }
        vllm = project.lock.sets[layer.on]
        assert vllm.requirements
        theirs = {
            canonical_name(name)
            for name, _ in requirement_blocks(set_text(project.lock_path, vllm.requirements))
        }
        assert not mine & theirs, f"{layer.on}: packages in both layers: {sorted(mine & theirs)}"
        assert canonical_name(layer.requirement.split(">")[0]) in mine
        assert all(
            "--hash=sha256:" in block
            for _, block in requirement_blocks(set_text(project.lock_path, layer.requirements))
        )


def test_a_kv_store_image_is_not_buildable_below_the_stores_vllm_floor(project: Project) -> None:
    """Kimi-Linear pins vLLM 0.11.2: its KV-store images say why they cannot be built, with the floor."""
    from factory.blueprint.select import select

    kv = select(project, "moonshotai/Kimi-Linear-48B-A3B-Instruct", "h200", kv_store=True)[0]
    assert kv.image.install is None
    assert "need vLLM 0.21.0 or later" in (kv.image.unbuildable or "") and "0.11.2" in (
        kv.image.unbuildable or ""
    )
    assert kv.image.tag.endswith("-mooncake") and len(kv.deployments) == 2


@pytest.mark.parametrize(
    ("value", "expected"),
    [("10.0.0.7", "10.0.0.7"), ('a", "protocol": "evil', 'a", "protocol": "evil'), ("", "")],
)
def test_the_launcher_fills_a_config_from_the_environment_and_escapes_each_value(
    tmp_path: Path, value: str, expected: str
) -> None:
    """A setting's value lands in its JSON string as that string (a quote cannot add a key); an unset
    one is empty, as the recipes' heredocs leave it; then the command runs in the launcher's place."""
    template = tmp_path / "t.json"
    template.write_text('{"master_server_address": "$MOONCAKE_MASTER_IP:50051", "device_name": "$UNSET_ONE"}')
    filled = tmp_path / "run" / "f.json"
    env = {"PATH": os.environ["PATH"], "MOONCAKE_MASTER_IP": value}
    result = subprocess.run(
        [sys.executable, str(FILL), str(template), str(filled), sys.executable, "-c", "print('ran')"],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert result.stdout.strip() == "ran"
    data = json.loads(filled.read_text())
    assert data == {"master_server_address": f"{expected}:50051", "device_name": ""}


@pytest.mark.docker
def test_a_kv_store_image_shares_every_layer_of_its_plain_image(
    kv_built: Any, tiny_built: Any, docker_client: docker.DockerClient
) -> None:
    """Built after the plain image: every layer up to vLLM's is the plain image's own; what Mooncake adds is
    its system library, its layer, the launcher (and the image's own tail above them)."""
    plain = docker_client.images.get(tiny_built.image).attrs["RootFS"]["Layers"]
    kv = docker_client.images.get(kv_built.image).attrs["RootFS"]["Layers"]
    shared = next((i for i, (a, b) in enumerate(zip(plain, kv, strict=False)) if a != b), len(plain))
    # The plain image's layers after vLLM's (its tail): the version record (a COPY and a RUN), the launcher,
    # the model, and the non-root user's block (its RUN and its WORKDIR, issue 48), which stays last.
    tail = 6
    assert shared == len(plain) - tail, f"{shared} of {len(plain)} layers shared"
    history = docker_client.api.history(kv_built.image)
    marks = ("mooncake.txt", "libibverbs", "factory-fill-config")
    added = [entry["Size"] for entry in history if any(mark in entry["CreatedBy"] for mark in marks)]
    print(f"layers shared: {shared} of {len(plain)}; Mooncake's {len(added)} add {sum(added) / 1e6:.0f} MB")
    assert len(added) == 3 and 0 < sum(added) < 400e6


def _settings() -> dict[str, str]:
    return {
        "MOONCAKE_MASTER_IP": "10.0.0.1",
        "MOONCAKE_STORE_IP": "10.0.0.2",
        "VLLM_INSTANCE_1": "10.0.0.3",
        "VLLM_INSTANCE_2": "10.0.0.4",
    }


@pytest.mark.parametrize("store", ["kv_store_centralized_mooncake", "kv_store_distributed_mooncake"])
def test_each_process_of_a_kv_store_deployment_has_a_compose_file_that_compose_reads(
    project: Project, store: str
) -> None:
    """One file per process, each naming the processes to start first; the config it reads mounted from
    beside it; a setting left unset stops compose with what to set (never a default address)."""
    deployment = kv_blueprint(project).deployment(store)
    folder = ROOT / compose.directory(deployment)
    names = [role.name for role in deployment.roles]
    expected = ["master", "store", "instance-1", "instance-2", "router"]
    assert names == (expected if store.endswith("centralized_mooncake") else ["master", "instance-1"])
    for role in deployment.roles:
        file = compose.file_name(deployment, role)
        header = (folder / file).read_text().splitlines()[2]
        spec = deployment.spec(role)
        assert all(name in header for name in spec.after), header
        result = subprocess.run(
            [str(compose_binary()), "-f", file, "config", "--format", "json"], cwd=folder,
            env={**os.environ, **_settings()}, capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        service = next(iter(json.loads(result.stdout)["services"].values()))
        for config in spec.configs:
            assert (folder / config.file).is_file()
            assert any(v["target"] == config.template and v.get("read_only") for v in service["volumes"])
        if spec.after:
            missing = subprocess.run(
                [str(compose_binary()), "-f", file, "config"], cwd=folder,
                env={k: v for k, v in os.environ.items() if not k.startswith(("MOONCAKE", "VLLM_INSTANCE"))},
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            assert missing.returncode != 0 and "set " in missing.stderr, missing.stderr


def test_the_configs_are_the_kv_store_files_with_the_cpu_targets_values(project: Project) -> None:
    """The CPU target has no RDMA: tcp and segments that fit this machine, from the catalog; the centralized
    topology's instances still give no memory (the store owns the pool)."""
    for store, segment in (("kv_store_centralized_mooncake", 0), ("kv_store_distributed_mooncake", "256MB")):
        deployment = kv_blueprint(project).deployment(store)
        instance = deployment.spec(next(r for r in deployment.roles if r.name == "instance-1"))
        config = json.loads(instance.configs[0].content)
        assert config["protocol"] == "tcp" and config["global_segment_size"] == segment
        assert config["comment"].startswith("DO NOT EDIT: written by `factory generate`")
    centralized = kv_blueprint(project).deployment("kv_store_centralized_mooncake")
    store = centralized.spec(next(r for r in centralized.roles if r.name == "store"))
    assert json.loads(store.configs[0].content)["local_hostname"] == "$MOONCAKE_STORE_IP"
    assert yaml.safe_load((ROOT / "catalog" / "hardware.yaml").read_text())["vendors"]["cpu"]["mooncake"]
    assert TINY in kv_blueprint(project).image.served_model_name
